"""Compile-only builds of the SM90 BF16 kernel's distinct template instantiations through the real
JIT path (codegen -> nvcc -> cache), checked in the cubin: one kernel, HGMMA present, no local
memory. Needs nvcc, not a GPU."""

from __future__ import annotations

import dataclasses
import re
import subprocess

import pytest

from moegemm.heuristics import SM90, GemmDesc, select_config, sm90
from moegemm.heuristics.sm90 import enumerate_bf16_configs, store_cols
from moegemm.jit import cache
from moegemm.jit.codegen import sm90_bf16_gemm_spec, sm90_bf16_k_grouped_spec
from moegemm.jit.compiler import find_cuobjdump
from moegemm.jit.cubin import count_cubin_kernels

pytestmark = pytest.mark.nvcc  # conftest skips these where nvcc is missing


def config_with(
    block_m: int,
    block_n: int,
    kind: str = "bf16_gemm_nt",
    tma_store: bool = False,
    d_dtype: str = "bf16",
    with_c: bool = False,
):
    desc = GemmDesc(kind, m=4096, n=4096, k=4096, num_groups=4, d_dtype=d_dtype, with_c=with_c)
    for config in enumerate_bf16_configs(desc, SM90):
        lay = config.layout
        key = (lay.block_m, lay.block_n, bool(store_cols(config)), lay.cluster_m)
        if key == (block_m, block_n, tma_store, 1):
            return config
    raise AssertionError(f"no legal config {block_m}x{block_n} (TMA store: {tma_store})")


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


def sass_instructions(sass: str) -> list[str]:
    """The instruction lines of a SASS dump without their addresses (names and headers out),
    so two builds of one kernel compare by their machine code only."""
    lines = [line for line in sass.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", line)]
    return [re.sub(r"/\*[0-9a-f]{4,}\*/", "", line).strip() for line in lines]


# One warpgroup / two warpgroups / two m64 atoms per warpgroup / an extended-N atom, across the
# epilogues (registers with BF16 out, FP32 out with C; TMA stores of 64-, 32- and 16-column
# boxes) and every tile scheduler (layout).
VARIANTS = [
    ("bf16_gemm_nt", 64, 64, "bf16", False, False),
    ("bf16_gemm_nt", 128, 256, "fp32", True, False),
    ("bf16_gemm_nt", 256, 128, "bf16", False, False),
    ("bf16_gemm_nt", 128, 48, "bf16", True, False),
    ("bf16_gemm_nt", 128, 224, "bf16", False, True),
    ("m_grouped_contiguous", 128, 128, "bf16", False, False),
    ("m_grouped_contiguous", 128, 256, "bf16", False, True),
    ("m_grouped_offsets", 64, 256, "bf16", False, False),
    ("m_grouped_offsets", 128, 240, "bf16", False, True),
    ("m_grouped_masked", 256, 112, "bf16", False, False),
    ("m_grouped_masked", 256, 96, "bf16", False, True),
    ("k_grouped", 128, 256, "fp32", True, False),
    ("k_grouped", 64, 128, "fp32", False, False),
    ("k_grouped", 128, 256, "fp32", True, True),
    ("k_grouped", 128, 192, "fp32", False, True),
]


@pytest.mark.parametrize("kind,block_m,block_n,d_dtype,with_c,tma_store", VARIANTS)
def test_kernel_compiles_for_sm90a(
    kind: str,
    block_m: int,
    block_n: int,
    d_dtype: str,
    with_c: bool,
    tma_store: bool,
    tmp_path,
    monkeypatch,
) -> None:
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")  # fails the build on local memory
    config = config_with(block_m, block_n, kind, tma_store, d_dtype, with_c)
    if kind == "k_grouped":
        spec = sm90_bf16_k_grouped_spec(config, with_c)
    else:
        spec = sm90_bf16_gemm_spec(config, d_dtype, with_c, kind)
    sass = built_sass(spec)
    assert "HGMMA" in sass, "the math must run on wgmma"
    assert "LDL" not in sass and "STL" not in sass, "no local-memory traffic"
    # A batch of wgmma carries one scoreboard (gsb0) at its end; ptxas serializes them (each
    # with its own gsb0 and a wait) when it cannot prove the accumulators untouched.
    hgmma = [line for line in sass.splitlines() if "HGMMA." in line and "RZ" not in line]
    assert 2 * sum("gsb0" in line for line in hgmma) <= len(hgmma), "wgmma serialized"
    if tma_store:
        assert "UTMASTG" in sass, "stored by TMA"
        if d_dtype == "bf16":
            assert "STSM" in sass, "BF16 staged with stmatrix"
        if kind == "k_grouped" and with_c:  # C = D in place goes out as TMA reduce-adds
            assert "UTMAREDG.2D.ADD" in sass
    else:
        assert "UTMASTG" not in sass


def test_heuristic_picks_compile(tmp_path, monkeypatch) -> None:
    """The configs the heuristics choose for a decode and a prefill shape build too."""
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    for m in (1, 8192):
        config = select_config(GemmDesc("bf16_gemm_nt", m=m, n=4096, k=7168), SM90)
        spec = sm90_bf16_gemm_spec(config, "bf16", False)
        assert count_cubin_kernels(cache.build_or_load(spec).read_bytes()) == 1


def test_walk_stripe_kernels_compile(tmp_path, monkeypatch) -> None:
    """The grouped walk in stripes (the default where K >= 4096) builds for both grouped-walk
    layouts, names its stripe and keeps wgmma without local memory; dense refuses a stripe."""
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(sm90.WALK_STRIPES_ENV, raising=False)
    for kind in ("m_grouped_offsets", "m_grouped_masked"):
        desc = GemmDesc(kind, m=4096, n=4096, k=4096, num_groups=8, expected_m=4096)
        config = sm90.select(desc, SM90)
        assert config.layout.stripe_m == sm90.WALK_STRIPE_M
        spec = sm90_bf16_gemm_spec(config, "bf16", False, kind)
        assert f", {sm90.WALK_STRIPE_M}>" in spec.source and "p8" in spec.name
        sass = built_sass(spec)
        assert "HGMMA" in sass and "LDL" not in sass and "STL" not in sass
    dense = select_config(GemmDesc("bf16_gemm_nt", m=4096, n=4096, k=4096), SM90)
    striped = dataclasses.replace(dense, layout=dataclasses.replace(dense.layout, stripe_m=8))
    with pytest.raises(ValueError, match="grouped-walk"):
        sm90_bf16_gemm_spec(striped, "bf16", False, "bf16_gemm_nt")


def test_stage_breakdown_variants_compile(tmp_path, monkeypatch) -> None:
    """The timing-only builds of benchmarks/stage_breakdown.py (wgmma and/or stores left out)."""
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    config = config_with(128, 256, "m_grouped_offsets", tma_store=True)
    names = set()
    cuobjdump = find_cuobjdump()
    for variant in (1, 2, 3, 4):  # 4: the grouped walk without its per-round rotation
        spec = sm90_bf16_gemm_spec(config, "bf16", False, "m_grouped_offsets", variant)
        assert f"#define MOEGEMM_STAGE_VARIANT {variant}" in spec.source
        cubin_path = cache.build_or_load(spec)
        assert count_cubin_kernels(cubin_path.read_bytes()) == 1
        names.add(spec.name)
        if variant == 2 and cuobjdump is not None:
            # Without stores the accumulators must stay live, or ptxas drops the wgmma too and
            # the "no epilogue" timing measures loads only.
            sass = dump_sass(cuobjdump, cubin_path)
            assert "HGMMA.64x256x16.F32.BF16" in sass
    assert len(names) == 4
    assert "MOEGEMM_STAGE_VARIANT" not in sm90_bf16_gemm_spec(config, "bf16", False).source
    if cuobjdump is not None:
        # The order twins compare against these builds: they must be other machine code.
        kind = "m_grouped_offsets"
        default = sass_instructions(built_sass(sm90_bf16_gemm_spec(config, "bf16", False, kind)))
        unrotated = built_sass(sm90_bf16_gemm_spec(config, "bf16", False, kind, 4))
        assert "HGMMA.64x256x16.F32.BF16" in unrotated
        assert sass_instructions(unrotated) != default

    k_config = config_with(128, 256, "k_grouped", tma_store=True, d_dtype="fp32")
    assert "MOEGEMM_STAGE_VARIANT" not in sm90_bf16_k_grouped_spec(k_config, False).source
    for variant in (1, 2, 3, 4, 8, 16):
        spec = sm90_bf16_k_grouped_spec(k_config, False, variant)
        assert f"#define MOEGEMM_STAGE_VARIANT {variant}" in spec.source
        cubin_path = cache.build_or_load(spec)
        assert count_cubin_kernels(cubin_path.read_bytes()) == 1
        if variant in (2, 4, 8, 16) and cuobjdump is not None:
            sass = dump_sass(cuobjdump, cubin_path)
            assert "HGMMA.64x256x16.F32.BF16" in sass
            if variant == 16:  # round-robin order: other code than the default build
                default = built_sass(sm90_bf16_k_grouped_spec(k_config, False))
                assert sass_instructions(sass) != sass_instructions(default)
            if variant == 8:  # zeroing per warpgroup: 128-thread barriers, wgmma pipelined
                assert "BAR.SYNC.DEFER_BLOCKING 0x1, 0x100" not in sass
                hgmma = [line for line in sass.splitlines() if "HGMMA." in line]
                assert 2 * sum("gsb0" in line for line in hgmma) <= len(hgmma)


@pytest.mark.parametrize(
    "kind,cluster",
    [
        ("bf16_gemm_nt", "2x1"),
        ("m_grouped_offsets", "2x1"),
        ("m_grouped_masked", "2x1"),
        ("bf16_gemm_nt", "1x2"),
        ("m_grouped_offsets", "1x2"),
        ("m_grouped_masked", "1x2"),
        ("m_grouped_contiguous", "1x2"),
    ],
)
@pytest.mark.parametrize("block_m,tma_store", [(128, True), (64, False)])
def test_cluster_multicast_kernels_compile(
    kind, cluster, block_m, tma_store, tmp_path, monkeypatch
) -> None:
    """2-CTA clusters sharing B (2x1) or A (1x2) by multicast (experimental, enumerated only
    on request)."""
    cluster = tuple(int(x) for x in cluster.split("x"))
    from moegemm.heuristics.sm90 import EXPERIMENTAL_CLUSTERS_ENV, enumerate_configs

    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")
    monkeypatch.delenv(EXPERIMENTAL_CLUSTERS_ENV, raising=False)
    desc = GemmDesc(kind, m=4096, n=4096, k=4096, num_groups=4, expected_m=1024)
    assert all(c.layout.cluster_size == 1 for c in enumerate_configs(desc, SM90))
    monkeypatch.setenv(EXPERIMENTAL_CLUSTERS_ENV, "1")
    config = next(
        c
        for c in enumerate_configs(desc, SM90)
        if (c.layout.cluster_m, c.layout.cluster_n) == cluster
        and c.layout.block_m == block_m
        and c.layout.block_n == 256
        and bool(store_cols(c)) == tma_store
    )
    assert sm90.is_legal(config, desc, SM90)
    # The shared operand's box is the CTA's share of the tile.
    assert config.storage.load_box_a == (64, block_m // cluster[1])
    assert config.storage.load_box_b == (64, 256 // cluster[0])
    sass = built_sass(sm90_bf16_gemm_spec(config, "bf16", False, kind))
    assert "MULTICAST" in sass, "the shared operand must be loaded with a multicast TMA"
    assert "LDL" not in sass and "STL" not in sass
    hgmma = [line for line in sass.splitlines() if "HGMMA." in line and "RZ" not in line]
    assert hgmma and 2 * sum("gsb0" in line for line in hgmma) <= len(hgmma), "wgmma serialized"
    # GPU-scope fences belong to the two cluster barriers (set-up, exit) only: a cluster-scope
    # release per stage compiles to one MEMBAR.ALL.GPU per k-block (measured 1.5-2x slower).
    assert sass.count("MEMBAR.ALL.GPU") <= 2, "GPU-scope fence inside the mainloop"


@pytest.mark.parametrize(
    "kind,block_n,tma_store,half_atom",
    [
        ("m_grouped_offsets", 256, True, "HGMMA.64x128x16"),  # TMA boxes tile the half
        ("m_grouped_offsets", 240, True, "HGMMA.64x120x16"),  # half stored from registers
        ("m_grouped_masked", 96, False, "HGMMA.64x48x16"),  # extended-N half of a base N
        ("bf16_gemm_nt", 256, True, "HGMMA.64x128x16"),
    ],
)
def test_split_tail_kernels_compile(kind, block_n, tma_store, half_atom, tmp_path, monkeypatch):
    """Split tails (experimental, built on request): a second wgmma loop of half the width, no
    local memory, wgmma not serialized; without the request the kernel has neither."""
    from moegemm.jit.codegen import SPLIT_TAILS_ENV

    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")
    config = config_with(128, block_n, kind, tma_store)
    monkeypatch.delenv(SPLIT_TAILS_ENV, raising=False)
    default = sm90_bf16_gemm_spec(config, "bf16", False, kind)
    monkeypatch.setenv(SPLIT_TAILS_ENV, "1")
    split = sm90_bf16_gemm_spec(config, "bf16", False, kind)
    assert split.name == default.name + "_split" and "MOEGEMM_SPLIT_TAILS 1" in split.source
    assert "MOEGEMM_SPLIT_TAILS" not in default.source
    sass = built_sass(split)
    assert half_atom in sass and f"HGMMA.64x{block_n}x16" in sass
    assert "LDL" not in sass and "STL" not in sass
    hgmma = [line for line in sass.splitlines() if "HGMMA." in line and "RZ" not in line]
    assert 2 * sum("gsb0" in line for line in hgmma) <= len(hgmma), "wgmma serialized"


def test_b_sharing_clusters_refused_for_m_indices() -> None:
    from dataclasses import replace

    config = config_with(128, 256, "m_grouped_contiguous")
    clustered = replace(config, layout=replace(config.layout, cluster_m=2))
    with pytest.raises(ValueError, match="clusters"):
        sm90_bf16_gemm_spec(clustered, "bf16", False, "m_grouped_contiguous")
    desc = GemmDesc("m_grouped_contiguous", m=4096, n=4096, k=4096, num_groups=4)
    assert not sm90.is_legal(clustered, desc, SM90)


@pytest.mark.parametrize(
    "kind,block_m,block_n",
    [
        ("m_grouped_masked", 8, 128),
        ("m_grouped_masked", 96, 64),
        ("m_grouped_offsets", 48, 64),
        ("m_grouped_offsets", 128, 128),
    ],
)
def test_swap_ab_kernels_compile(kind, block_m, block_n, tmp_path, monkeypatch) -> None:
    """The decode kernel with the weights on the wgmma's M side: wgmma m64 x tokens, pipelined,
    no local memory; 48 tokens needs CuTe's extended wgmma shapes."""
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")
    desc = GemmDesc(kind, m=1024, n=4096, k=4096, num_groups=16, expected_m=32)
    config = next(
        c
        for c in sm90.enumerate_configs(desc, SM90)
        if c.layout.swap_ab and (c.layout.block_m, c.layout.block_n) == (block_m, block_n)
    )
    assert sm90.is_legal(config, desc, SM90)
    sass = built_sass(sm90_bf16_gemm_spec(config, "bf16", False, kind))
    assert f"HGMMA.64x{block_m}x16.F32.BF16" in sass, "tokens on the wgmma's N side"
    assert "LDL" not in sass and "STL" not in sass
    hgmma = [line for line in sass.splitlines() if "HGMMA." in line and "RZ" not in line]
    assert 2 * sum("gsb0" in line for line in hgmma) <= len(hgmma), "wgmma serialized"


@pytest.mark.parametrize("swap_ab", [False, True])
def test_timeline_variant_is_the_only_build_with_the_probe(swap_ab, tmp_path, monkeypatch) -> None:
    """Stage variant bit 3 (scripts/timeline.py) reads the global timer and prints; the
    production build of the same config does neither, and keeps its wgmma pipelined."""
    from moegemm.jit.codegen import TIMELINE_VARIANT

    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    kind = "m_grouped_masked"
    desc = GemmDesc(kind, m=512, n=2048, k=768, num_groups=16, expected_m=32)
    config = next(
        c
        for c in sm90.enumerate_configs(desc, SM90)
        if c.layout.swap_ab == swap_ab
        and c.layout.block_n == 128
        and c.layout.cluster_size == 1
        and not store_cols(c)
    )
    timeline = built_sass(sm90_bf16_gemm_spec(config, "bf16", False, kind, TIMELINE_VARIANT))
    assert "SR_GLOBALTIMER" in timeline and "CALL" in timeline, "stamps and printf"
    production = built_sass(sm90_bf16_gemm_spec(config, "bf16", False, kind))
    assert "SR_GLOBALTIMER" not in production and "CALL" not in production
    assert "LDL" not in production and "STL" not in production
    hgmma = [line for line in production.splitlines() if "HGMMA." in line and "RZ" not in line]
    assert 2 * sum("gsb0" in line for line in hgmma) <= len(hgmma), "wgmma serialized"
    if not swap_ab:
        # BF16 out without C: the register stores go out 16 bytes per lane.
        assert "STG.E.128" in production


def test_swap_ab_kernels_refuse_other_stage_variants() -> None:
    desc = GemmDesc("m_grouped_masked", m=512, n=2048, k=768, num_groups=16, expected_m=32)
    config = next(c for c in sm90.enumerate_configs(desc, SM90) if c.layout.swap_ab)
    with pytest.raises(ValueError, match="only the timeline"):
        sm90_bf16_gemm_spec(config, "bf16", False, "m_grouped_masked", 2)


def test_swap_ab_refused_outside_the_decode_layouts() -> None:
    from dataclasses import replace

    desc = GemmDesc("m_grouped_offsets", m=512, n=4096, k=4096, num_groups=16, expected_m=32)
    config = next(c for c in sm90.enumerate_configs(desc, SM90) if c.layout.swap_ab)
    for kind in ("bf16_gemm_nt", "m_grouped_contiguous"):
        with pytest.raises(ValueError, match="swap_ab"):
            sm90_bf16_gemm_spec(config, "bf16", False, kind)
    with pytest.raises(ValueError, match="swap_ab"):
        sm90_bf16_gemm_spec(config, "fp32", False, "m_grouped_offsets")
    with pytest.raises(ValueError, match="swap_ab"):
        sm90_bf16_gemm_spec(config, "bf16", False, "m_grouped_offsets", stage_variant=1)
    # Illegal for prefill rows, for the other kinds, and with a cluster.
    prefill = GemmDesc("m_grouped_offsets", m=32768, n=4096, k=4096, num_groups=16)
    assert not any(c.layout.swap_ab for c in sm90.enumerate_configs(prefill, SM90))
    assert not sm90.is_legal(config, prefill, SM90)
    for kind in ("bf16_gemm_nt", "m_grouped_contiguous"):
        other = GemmDesc(kind, m=512, n=4096, k=4096, num_groups=1 if kind == "bf16_gemm_nt" else 4)
        assert not any(c.layout.swap_ab for c in sm90.enumerate_configs(other, SM90))
        assert not sm90.is_legal(config, other, SM90)
    clustered = replace(config, layout=replace(config.layout, cluster_m=2))
    assert not sm90.is_legal(clustered, desc, SM90)
