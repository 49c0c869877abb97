"""Compile-only builds of the SM90 BF16 kernels (compositions of the persistent skeleton in
include/moegemm/kernels/sm90_persistent_gemm.cuh) through the real JIT path (codegen -> nvcc ->
cache), checked in the cubin: one kernel, HGMMA present and pipelined, no local memory. Also the
skeleton's transform stage, with a trivial copy transform. Needs nvcc, not a GPU."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest

from moegemm.families import select_config
from moegemm.heuristics import SM90, GemmDesc
from moegemm.heuristics.config import (
    GemmConfig,
    LaunchConfig,
    Layout,
    PipelineConfig,
    StorageConfig,
)
from moegemm.jit import cache
from moegemm.jit.codegen import sm90_bf16_gemm_spec, sm90_bf16_k_grouped_spec
from moegemm.jit.compiler import find_cuobjdump
from moegemm.jit.cubin import count_cubin_kernels

pytestmark = pytest.mark.nvcc  # conftest skips these where nvcc is missing

BARRIER_BYTES = 16  # a full and an empty mbarrier per stage


def ring_bytes(kind: str, block_m: int, block_n: int, stages: int) -> int:
    """One ring of 64-wide BF16 stages: A and B slabs (k-grouped: 64-wide MN chunks, the same
    bytes), plus its barriers."""
    del kind  # every family stages (block_m + block_n) rows of 128 bytes
    return stages * ((block_m + block_n) * 128 + BARRIER_BYTES)


def make_config(
    kind: str,
    block_m: int,
    block_n: int,
    stages: int,
    *,
    store_cols: int = 0,
    cluster: tuple[int, int] = (1, 1),
    swap_ab: bool = False,
    stripe_m: int = 0,
    extra_warpgroups: int = 0,
    extra_smem: int = 0,
) -> GemmConfig:
    """A config built by hand (the kernels assert its shared memory and thread count), so the
    test does not depend on which configs the heuristics enumerate."""
    if kind == "k_grouped":
        num_wg = block_m // 64
        staging = num_wg * 2 * 64 * 32 * 4 if store_cols else 0
    else:
        num_wg = block_n // 64 if swap_ab else (1 if block_m == 64 else 2)
        staging = block_m * block_n * 2 if store_cols else 0
    cluster_m, cluster_n = cluster
    return GemmConfig(
        layout=Layout(block_m, block_n, 64, swap_ab, cluster_m, cluster_n, stripe_m),
        storage=StorageConfig(
            load_box_a=(64, block_m // cluster_n),
            load_box_b=(64, block_n // cluster_m),
            swizzle_a=128,
            swizzle_b=128,
            store_box_d=(store_cols, 64) if store_cols else None,
            swizzle_d=store_cols * (4 if kind == "k_grouped" else 2),
        ),
        pipeline=PipelineConfig(
            stages, ring_bytes(kind, block_m, block_n, stages) + staging + extra_smem
        ),
        launch=LaunchConfig(128 * (num_wg + 1 + extra_warpgroups), num_wg),
    )


def dump_sass(cuobjdump, cubin_path) -> str:
    proc = subprocess.run(
        [str(cuobjdump), "--dump-sass", str(cubin_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, f"cuobjdump failed: {proc.stdout[-500:]} {proc.stderr[-500:]}"
    return proc.stdout


def built_sass(spec) -> str:
    """Builds `spec` through the JIT cache, checks the cubin holds one kernel and returns its
    SASS (the test is skipped where cuobjdump is missing, after the build)."""
    cubin_path = cache.build_or_load(spec)
    assert count_cubin_kernels(cubin_path.read_bytes()) == 1
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("cuobjdump not found: cubin built, SASS not inspected")
    return dump_sass(cuobjdump, cubin_path)


def assert_pipelined_wgmma(sass: str) -> None:
    """wgmma present, no local memory, and batched: a batch of wgmma carries one scoreboard
    (gsb0) at its end; ptxas serializes them (each with its own gsb0 and a wait) when it cannot
    prove the accumulators untouched."""
    assert "LDL" not in sass and "STL" not in sass, "no local-memory traffic"
    hgmma = [line for line in sass.splitlines() if "HGMMA." in line and "RZ" not in line]
    assert hgmma, "the math must run on wgmma"
    assert 2 * sum("gsb0" in line for line in hgmma) <= len(hgmma), "wgmma serialized"


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")  # fails the build on local memory


# One warpgroup / two warpgroups / two m64 atoms per warpgroup / an extended-N atom, across the
# epilogues (registers with BF16 out, FP32 out with C; TMA stores of 64-, 32- and 16-column
# boxes) and every tile scheduler (layout).
VARIANTS = [
    ("bf16_gemm_nt", 64, 64, 8, "bf16", False, 0),
    ("bf16_gemm_nt", 128, 256, 4, "fp32", True, 0),
    ("bf16_gemm_nt", 256, 128, 4, "bf16", False, 0),
    ("bf16_gemm_nt", 128, 48, 8, "bf16", True, 0),
    ("bf16_gemm_nt", 128, 224, 3, "bf16", False, 32),
    ("m_grouped_contiguous", 128, 128, 6, "bf16", False, 0),
    ("m_grouped_contiguous", 128, 256, 3, "bf16", False, 64),
    ("m_grouped_offsets", 64, 256, 5, "bf16", False, 0),
    ("m_grouped_offsets", 128, 240, 3, "bf16", False, 16),
    ("m_grouped_masked", 256, 112, 4, "bf16", False, 0),
    ("m_grouped_masked", 256, 96, 3, "bf16", False, 32),
    ("k_grouped", 128, 256, 4, "fp32", True, 0),
    ("k_grouped", 64, 128, 6, "fp32", False, 0),
    ("k_grouped", 128, 256, 4, "fp32", True, 32),
    ("k_grouped", 128, 192, 4, "fp32", False, 32),
]


@pytest.mark.parametrize("kind,block_m,block_n,stages,d_dtype,with_c,store_cols", VARIANTS)
def test_kernel_compiles_for_sm90a(
    kind: str, block_m: int, block_n: int, stages: int, d_dtype: str, with_c: bool, store_cols
) -> None:
    config = make_config(kind, block_m, block_n, stages, store_cols=store_cols)
    if kind == "k_grouped":
        spec = sm90_bf16_k_grouped_spec(config, with_c)
    else:
        spec = sm90_bf16_gemm_spec(config, d_dtype, with_c, kind)
    # The kernel reads a named config, not positional template arguments.
    assert "struct Config {" in spec.source and f"kBlockN = {block_n};" in spec.source
    assert "MOEGEMM_STAGE_VARIANT" not in spec.source and "SPLIT_TAILS" not in spec.source
    sass = built_sass(spec)
    assert_pipelined_wgmma(sass)
    assert "SR_GLOBALTIMER" not in sass and "CALL" not in sass, "no probe, no printf"
    if store_cols:
        assert "UTMASTG" in sass, "stored by TMA"
        if d_dtype == "bf16":
            assert "STSM" in sass, "BF16 staged with stmatrix"
        if kind == "k_grouped" and with_c:  # C = D in place goes out as TMA reduce-adds
            assert "UTMAREDG.2D.ADD" in sass
    else:
        assert "UTMASTG" not in sass
        if d_dtype == "bf16" and not with_c:
            assert "STG.E.128" in sass, "BF16 register stores go out 16 bytes per lane"


def test_heuristic_picks_compile() -> None:
    """The configs the heuristics choose for a decode and a prefill shape build too."""
    for m in (1, 8192):
        config = select_config(GemmDesc("bf16_gemm_nt", m=m, n=4096, k=7168), SM90)
        spec = sm90_bf16_gemm_spec(config, "bf16", False)
        assert count_cubin_kernels(cache.build_or_load(spec).read_bytes()) == 1


@pytest.mark.parametrize("kind", ["m_grouped_offsets", "m_grouped_masked"])
def test_walk_stripe_kernels_compile(kind: str) -> None:
    """The grouped walk in stripes builds for both grouped-walk layouts, names its stripe and
    keeps wgmma without local memory; dense refuses a stripe."""
    config = make_config(kind, 128, 256, 3, store_cols=64, stripe_m=8)
    spec = sm90_bf16_gemm_spec(config, "bf16", False, kind)
    assert "kStripeM = 8;" in spec.source and ", 8>;" in spec.source and "p8" in spec.name
    assert_pipelined_wgmma(built_sass(spec))
    with pytest.raises(ValueError, match="grouped-walk"):
        sm90_bf16_gemm_spec(config, "bf16", False, "bf16_gemm_nt")


# (kind, cluster, block_m, TMA store): each layout with each cluster shape it takes, the two
# tile shapes alternating so both epilogues meet both sharing directions.
CLUSTER_CASES = [
    ("bf16_gemm_nt", (2, 1), 128, True),
    ("m_grouped_offsets", (2, 1), 64, False),
    ("m_grouped_masked", (2, 1), 128, True),
    ("bf16_gemm_nt", (1, 2), 64, False),
    ("m_grouped_offsets", (1, 2), 128, True),
    ("m_grouped_masked", (1, 2), 64, False),
    ("m_grouped_contiguous", (1, 2), 128, True),
]


@pytest.mark.parametrize("kind,cluster,block_m,tma_store", CLUSTER_CASES)
def test_cluster_multicast_kernels_compile(kind, cluster, block_m, tma_store) -> None:
    """2-CTA clusters sharing B (2x1) or A (1x2) by multicast (reachable through config=)."""
    stages = 3 if tma_store else (4 if block_m == 128 else 5)
    config = make_config(kind, block_m, 256, stages, store_cols=64 if tma_store else 0,
                         cluster=cluster)  # fmt: skip
    sass = built_sass(sm90_bf16_gemm_spec(config, "bf16", False, kind))
    assert "MULTICAST" in sass, "the shared operand must be loaded with a multicast TMA"
    assert_pipelined_wgmma(sass)
    # GPU-scope fences belong to the two cluster barriers (set-up, exit) only: a cluster-scope
    # release per stage compiles to one MEMBAR.ALL.GPU per k-block (measured 1.5-2x slower).
    assert sass.count("MEMBAR.ALL.GPU") <= 2, "GPU-scope fence inside the mainloop"


@pytest.mark.parametrize(
    "kind,block_m,block_n",
    [
        ("m_grouped_masked", 8, 128),
        ("m_grouped_masked", 96, 64),
        ("m_grouped_offsets", 48, 64),
        ("m_grouped_offsets", 128, 128),
    ],
)
def test_swap_ab_kernels_compile(kind, block_m, block_n) -> None:
    """The decode kernel with the weights on the wgmma's M side: wgmma m64 x tokens, pipelined,
    no local memory; 48 tokens needs CuTe's extended wgmma shapes."""
    config = make_config(kind, block_m, block_n, 8 if block_m <= 32 else 5, swap_ab=True)
    spec = sm90_bf16_gemm_spec(config, "bf16", False, kind)
    assert ("MOEGEMM_WGMMA_EXTENDED_N" in spec.source) == (block_m == 48)
    sass = built_sass(spec)
    assert f"HGMMA.64x{block_m}x16.F32.BF16" in sass, "tokens on the wgmma's N side"
    assert_pipelined_wgmma(sass)


@pytest.mark.parametrize("block_m,store_cols", [(128, 64), (64, 0)])
def test_transform_stage_compiles(block_m: int, store_cols: int) -> None:
    """The skeleton's transform stage with the trivial copy transform: one more warpgroup that
    copies each landed stage (LDS/STS) into a two-stage ring of its own, which the wgmma then
    reads; the config counts its warpgroup and ring, and the kernel asserts both."""
    block_n, stages, out_stages = 128, 4, 2
    transform = f"moegemm::CopyTransform<{out_stages}>"
    config = make_config(
        "m_grouped_offsets", block_m, block_n, stages, store_cols=store_cols,
        extra_warpgroups=1, extra_smem=ring_bytes("", block_m, block_n, out_stages),
    )  # fmt: skip
    spec = sm90_bf16_gemm_spec(config, "bf16", False, "m_grouped_offsets", transform=transform)
    assert f"using Transform = {transform};" in spec.source
    plain = sm90_bf16_gemm_spec(config, "bf16", False, "m_grouped_offsets")
    assert spec.name != plain.name and "Transform" not in plain.source
    sass = built_sass(spec)
    assert_pipelined_wgmma(sass)
    ops = re.findall(r"\b(LDS|STS)\.128\b", sass)
    assert "LDS" in ops and "STS" in ops, "the copy runs through registers, 16 bytes a thread"
    # Without the transform's warpgroup or ring bytes the kernel refuses the config.
    short = dataclasses.replace(
        config, launch=dataclasses.replace(config.launch, num_threads=config.launch.num_threads - 128)
    )  # fmt: skip
    with pytest.raises(Exception, match="config.launch.num_threads"):
        cache.build_or_load(sm90_bf16_gemm_spec(short, "bf16", False, "m_grouped_offsets",
                                                transform=transform))  # fmt: skip


def test_bad_requests_are_refused() -> None:
    grouped = make_config("m_grouped_contiguous", 128, 256, 4)
    with pytest.raises(ValueError, match="clusters"):
        sm90_bf16_gemm_spec(
            dataclasses.replace(grouped, layout=dataclasses.replace(grouped.layout, cluster_m=2)),
            "bf16", False, "m_grouped_contiguous",
        )  # fmt: skip
    with pytest.raises(ValueError, match="kind"):
        sm90_bf16_gemm_spec(grouped, "bf16", False, "k_grouped")
    with pytest.raises(ValueError, match="d_dtype"):
        sm90_bf16_gemm_spec(grouped, "fp16", False, "m_grouped_contiguous")
    stored = make_config("bf16_gemm_nt", 128, 256, 3, store_cols=64)
    with pytest.raises(ValueError, match="TMA-store"):
        sm90_bf16_gemm_spec(stored, "bf16", True)
    with pytest.raises(ValueError, match="transform"):
        sm90_bf16_gemm_spec(grouped, "bf16", False, "m_grouped_contiguous", transform="int; x")
    swapped = make_config("m_grouped_offsets", 32, 128, 8, swap_ab=True)
    for kind in ("bf16_gemm_nt", "m_grouped_contiguous"):
        with pytest.raises(ValueError, match="swap_ab"):
            sm90_bf16_gemm_spec(swapped, "bf16", False, kind)
    with pytest.raises(ValueError, match="swap_ab"):
        sm90_bf16_gemm_spec(swapped, "bf16", True, "m_grouped_offsets")
    k_config = make_config("k_grouped", 128, 256, 4)
    with pytest.raises(ValueError, match="k-grouped"):
        sm90_bf16_k_grouped_spec(
            dataclasses.replace(k_config, layout=dataclasses.replace(k_config.layout, cluster_n=2)),
            False,
        )  # fmt: skip
    # Kernel names stay config-based.
    assert (
        sm90_bf16_k_grouped_spec(k_config, True).name == "sm90_bf16_kgrouped_m128n256k64s4w2c1x1_c"
    )
    assert sm90_bf16_gemm_spec(swapped, "bf16", False, "m_grouped_offsets").name == (
        "sm90_bf16_offs_m32n128k64s8w2c1x1t_bf16"
    )


@pytest.mark.gpu
def test_transform_stage_runs_like_the_plain_kernel(monkeypatch) -> None:
    """On the GPU: the copy-transform kernel (one more warpgroup, its own ring) writes exactly
    the plain kernel's results, and both match an FP32 reference, over ragged offsets groups
    (an empty group, a one-row group, rows crossing m-blocks)."""
    import torch

    import moegemm
    from moegemm.launch import plans
    from moegemm.testing import calc_diff

    kind, block_m, block_n, stages, out_stages = "m_grouped_offsets", 128, 128, 4, 2
    plain = make_config(kind, block_m, block_n, stages, store_cols=64)
    copied = make_config(
        kind, block_m, block_n, stages, store_cols=64,
        extra_warpgroups=1, extra_smem=ring_bytes(kind, block_m, block_n, out_stages),
    )  # fmt: skip
    real_spec = plans.kernel_spec

    def spec_with_transform(desc, config, arch="sm_90a"):
        if config == copied:
            return sm90_bf16_gemm_spec(config, desc.d_dtype, desc.with_c, desc.kind,
                                       transform=f"moegemm::CopyTransform<{out_stages}>")  # fmt: skip
        return real_spec(desc, config, arch)

    monkeypatch.setattr(plans, "kernel_spec", spec_with_transform)
    torch.manual_seed(0)
    sizes, n, k = [0, 70, 256, 1, 130], 384, 1000  # K tail: 1000 = 15 k-blocks + 40
    a = torch.randn(sum(sizes), k, device="cuda").to(torch.bfloat16)
    b = torch.randn(len(sizes), n, k, device="cuda").to(torch.bfloat16)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    outs = []
    for config in (plain, copied):
        d = torch.full((sum(sizes), n), float("nan"), device="cuda", dtype=torch.bfloat16)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs, config=config)
        outs.append(d)
    torch.cuda.synchronize()
    assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)), "bitwise equal"
    start = 0
    for g, rows in enumerate(sizes):
        if rows:
            ref = a[start : start + rows].float() @ b[g].float().t()
            assert calc_diff(outs[1][start : start + rows], ref) < 1e-5, f"group {g}"
        start += rows
