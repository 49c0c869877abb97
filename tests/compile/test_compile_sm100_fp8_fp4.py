"""SM100 FP8 x FP4 kernels (tcgen05 kind::mxf8f6f4.block_scale), compiled for sm_100f and
statically checked (no Blackwell GPU here: none of this runs on hardware).

- Every config the SM100 FP8 x FP4 heuristics rank (enumerate_configs: a superset of what they
  select) for the decode, prefill and masked suites of moe_shapes.json, in each layout the
  kernel serves, is compiled through the real JIT path (ptxas told to fail on local memory) and
  its SASS and ELF inspected: UTCQMMA (tcgen05.mma kind::mxf8f6f4), UTCCP (tcgen05.cp of the
  scales), UTCBAR (tcgen05.commit), LDTM (tcgen05.ld), TMA loads; no UTCHMMA, no .2CTA, no trap
  beyond the tensor-memory allocator's own, no local memory, no stack, shared memory within
  the opt-in budget.
- A host program compiled against CUTLASS prints, per config, the kernel's constants next to
  CuTe's encoders: the instruction descriptor of each of the four MMAs of a k-block (formats:
  E2M1 = 5, CuTe's float_e2m1_unpacksmem_t, not float_e2m1_t's 1; UE8M0 scales; scale-factor
  ids 0..3), the SW128 K-major operand descriptors and k-slices (make_umma_desc), the scale
  descriptor against CuTe's SmemDescriptor bit fields; then budgets recomputed here (shared
  memory, tensor-memory columns for accumulators plus scales, expected bytes, arrive counts),
  and the FP32 -> UE8M0 cell conversion of the activation scales on chosen values.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest
from sm100_elf import assert_cta_group_matches_launch
from test_compile_sm100 import _config_block, allocator_traps, cuobjdump, opcodes  # noqa: F401

from moegemm.families import enumerate_configs, is_legal, select_config
from moegemm.heuristics import GemmDesc, arch_for
from moegemm.heuristics.config import GemmConfig
from moegemm.jit import cache
from moegemm.jit.codegen_sm100 import sm100_fp8_fp4_gemm_spec, sm100_kernel_spec
from moegemm.jit.compiler import find_nvcc, include_flags
from moegemm.jit.cubin import count_cubin_kernels
from moegemm.jit.spec import KernelSpec

pytestmark = pytest.mark.nvcc

REPO = Path(__file__).resolve().parents[2]
SHAPES = REPO / "python" / "moegemm" / "data" / "moe_shapes.json"
ARCH = arch_for("sm_100f")
SMEM_OPT_IN = 232448
TMEM_COLUMNS = 512
UMMA_M = 128


def suite_descs() -> list[GemmDesc]:
    data = json.loads(SHAPES.read_text())
    descs: dict[GemmDesc, None] = {}
    for suite in ("decode", "prefill", "masked"):
        for case in data["suites"][suite]:
            n, k, groups = case["n"], case["k"], case["num_groups"]
            if k % 32:
                continue
            rows = case["m_total"]
            expected = max(1, round(case["expected_m"]))
            max_m = case.get("max_m", max(128, expected))
            kw = {"ab_dtype": "fp8_fp4"}
            for desc in (
                GemmDesc("m_grouped_contiguous", m=rows, n=n, k=k, num_groups=groups, **kw),
                GemmDesc("m_grouped_offsets", m=rows, n=n, k=k, num_groups=groups, **kw),
                GemmDesc("m_grouped_masked", max_m, n, k, groups, expected_m=expected, **kw),
                GemmDesc("bf16_gemm_nt", m=rows, n=n, k=k, **kw),
            ):
                descs[desc] = None
    # gpt-oss's K = 2880 (not a multiple of 128: the prepared weights pad it).
    descs[GemmDesc("m_grouped_offsets", 512, 5760, 2880, 32, ab_dtype="fp8_fp4")] = None
    return list(descs)


def layer_descs() -> list[GemmDesc]:
    """The fused MoE layer's GEMMs with MXFP4 experts (GEMM1 with SwiGLU, GEMM2 with RowScale),
    gpt-oss-20b's shape (32 experts, H = I = 2880) at decode and prefill rows, and masked."""
    kw = {"ab_dtype": "fp8_fp4", "weights": "prepared"}
    descs = []
    for rows in (8, 4096):
        expected = max(1, rows // 32)
        for epilogue in ("swiglu", "swiglu_oai"):
            descs.append(GemmDesc("m_grouped_offsets", rows, 5760, 2880, 32, expected_m=expected,
                                  epilogue=epilogue, **kw))  # fmt: skip
        descs.append(GemmDesc("m_grouped_offsets", rows, 2880, 2880, 32, expected_m=expected,
                              epilogue="row_scale", **kw))  # fmt: skip
    descs.append(GemmDesc("m_grouped_masked", 90, 5760, 2880, 32, expected_m=3, epilogue="swiglu",
                          **kw))  # fmt: skip
    return descs


def _spec(desc: GemmDesc, config: GemmConfig) -> KernelSpec:
    return sm100_fp8_fp4_gemm_spec(config, desc.kind, epilogue=desc.epilogue)


@functools.cache
def candidates() -> dict[str, tuple[KernelSpec, GemmConfig]]:
    """Every config the heuristics rank for the suites, and the selected one of each layer GEMM
    (its epilogue makes another kernel of the same config)."""
    specs: dict[str, tuple[KernelSpec, GemmConfig]] = {}
    for desc in suite_descs():
        for config in enumerate_configs(desc, ARCH):
            assert is_legal(config, desc, ARCH), config
            spec = _spec(desc, config)
            assert sm100_kernel_spec(desc, config) == spec
            specs.setdefault(spec.name, (spec, config))
    for desc in layer_descs():
        config = select_config(desc, ARCH)
        assert is_legal(config, desc, ARCH) and config.layout.swap_ab, config
        spec = _spec(desc, config)
        assert sm100_kernel_spec(desc, config) == spec and desc.epilogue in spec.name
        specs.setdefault(spec.name, (spec, config))
    return specs


def test_selection_and_layouts() -> None:
    assert 8 <= len(candidates()) <= 32, "keep the compile set small"
    selected = set()
    for desc in suite_descs():
        config = select_config(desc, ARCH)
        selected.add(_spec(desc, config).name)
        assert _spec(desc, config).arch == "sm_100f"
        assert config.layout.block_n == 128 and config.layout.block_k == 128
        if desc.kind != "bf16_gemm_nt":
            assert config.layout.swap_ab
    assert selected <= set(candidates())


def test_unsupported_problems_are_clear_errors() -> None:
    for desc in (
        GemmDesc("k_grouped", 128, 128, 128, num_groups=2, ab_dtype="fp8_fp4", d_dtype="fp32"),
        GemmDesc("m_grouped_contiguous", 64, 256, 128, 2, ab_dtype="fp8_fp4", epilogue="swiglu"),
        GemmDesc("bf16_gemm_nt", 64, 256, 128, ab_dtype="fp8_fp4", d_dtype="fp32"),
    ):
        with pytest.raises(ValueError, match="no SM100 kernel"):
            select_config(desc, ARCH)


@pytest.fixture(scope="module")
def cubins(tmp_path_factory) -> dict[str, Path]:
    saved = {k: os.environ.get(k) for k in ("MOEGEMM_CACHE_DIR", "MOEGEMM_JIT_PTXAS_CHECK")}
    os.environ["MOEGEMM_CACHE_DIR"] = str(tmp_path_factory.mktemp("sm100_fp4_cache"))
    os.environ["MOEGEMM_JIT_PTXAS_CHECK"] = "1"
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = {
                name: pool.submit(cache.build_or_load, spec)
                for name, (spec, _) in candidates().items()
            }
            return {name: future.result() for name, future in futures.items()}
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.parametrize("name", sorted(candidates()))
def test_kernel_sass_and_elf(name: str, cubins, allocator_traps: int) -> None:  # noqa: F811
    spec, config = candidates()[name]
    cubin = cubins[name]
    assert count_cubin_kernels(cubin.read_bytes()) == 1
    sass = cuobjdump("--dump-sass", str(cubin))
    ops = opcodes(sass)
    assert sum(op.startswith("UTCQMMA") for op in ops) >= 4, "kind::mxf8f6f4: UTCQMMA"
    assert sum(op.startswith("UTCCP") for op in ops) >= 2, "tcgen05.cp of both scales: UTCCP"
    assert any(op.startswith("UTCBAR") for op in ops), "tcgen05.commit: UTCBAR"
    assert any(op.startswith("LDTM") for op in ops), "tcgen05.ld: LDTM"
    assert sum(op.startswith("UTMALDG") for op in ops) >= 3, "A, W and W's scales by TMA"
    assert not any(op.startswith("UTCHMMA") for op in ops), "no kind::f16"
    assert ".2CTA" not in sass
    assert_cta_group_matches_launch(cuobjdump("-elf", str(cubin)), config)
    assert not any(op in ("LDL", "STL") or op.startswith(("LDL.", "STL.")) for op in ops)
    assert sass.count("BPT.TRAP") == allocator_traps, "a trap beyond the allocator's own"
    usage = cuobjdump("-res-usage", str(cubin))
    fields = dict(re.findall(r"(\w+):(\d+)", usage.split("Function", 1)[1]))
    assert fields["LOCAL"] == "0" and fields["STACK"] == "0"
    assert int(fields["SHARED"]) <= 1024
    assert config.pipeline.smem_bytes + int(fields["SHARED"]) <= SMEM_OPT_IN
    assert f"kSmemBytes = {config.pipeline.smem_bytes};" in spec.source


# --- descriptors and budgets against CuTe ----------------------------------------------------

_HOST_PROLOGUE = r"""
#include <cstdio>
#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <moegemm/impls/sm100_fp8_fp4_grouped_gemm.cuh>

template <int Rows>
uint64_t cute_smem_desc() {  // E4M3 or unpacked E2M1: one byte an element in shared memory
  using namespace cute;
  auto layout = tile_to_shape(UMMA::Layout_K_SW128_Atom<uint8_t>{},
                              make_shape(Int<Rows>{}, Int<128>{}));
  auto tensor = make_tensor(make_smem_ptr(static_cast<uint8_t*>(nullptr)), layout);
  return uint64_t(UMMA::make_umma_desc<UMMA::Major::K>(tensor));
}

template <int Rows>
uint32_t cute_k_slice_u128(int k) {  // the k-th 32-wide slice, in 16-byte units
  using namespace cute;
  auto layout = tile_to_shape(UMMA::Layout_K_SW128_Atom<uint8_t>{},
                              make_shape(Int<Rows>{}, Int<128>{}));
  return uint32_t(layout.layout_b()(0, 32 * k) / 16);
}

uint64_t cute_sf_desc() {  // 32 rows x 16 bytes, no swizzle, SBO 128 B, LBO 0
  cute::UMMA::SmemDescriptor d;
  d.desc_ = 0;
  d.start_address_ = 0;
  d.leading_byte_offset_ = 0;
  d.stride_byte_offset_ = 128 >> 4;
  d.version_ = 1;
  d.base_offset_ = 0;
  d.lbo_mode_ = 0;
  d.layout_type_ = uint8_t(cute::UMMA::LayoutType::SWIZZLE_NONE);
  return d.desc_;
}

template <class Config>
void report(const char* name) {
  using K = moegemm::sm100::Fp8Fp4Gemm<Config>;
  using namespace moegemm::sm100;
  constexpr int M = K::kUmmaM, N = K::kUmmaN;
  using Tok = cute::float_e4m3_t;
  using Wgt = cutlass::detail::float_e2m1_unpacksmem_t;
  using TA = std::conditional_t<K::kSwapAB, Wgt, Tok>;
  using TB = std::conditional_t<K::kSwapAB, Tok, Wgt>;
  const uint64_t cute_a = cute_smem_desc<M>(), cute_b = cute_smem_desc<N>();
  printf("row %s", name);
  for (int k = 0; k < 4; ++k) {
    auto cute_idesc = cute::UMMA::make_instr_desc_block_scaled<
        TA, TB, float, cutlass::float_ue8m0_t, M, N, cute::UMMA::Major::K,
        cute::UMMA::Major::K>();
    cute_idesc.a_sf_id_ = k;
    cute_idesc.b_sf_id_ = k;
    printf(" idesc%d %u %u", k, K::Mma::idesc(k), uint32_t(cute_idesc));
    printf(" k%d %u %u", k, uint32_t(umma_smem_desc_mx_k_slice(0, k) & 0x3fff),
           cute_k_slice_u128<M>(k));
  }
  // The formats CuTe gives the two element types, and the packed type's (the wrong one).
  printf(" formats %u %u %u", uint32_t(cute::UMMA::to_UMMAFormat<Tok>()),
         uint32_t(cute::UMMA::to_UMMAFormat<Wgt>()),
         uint32_t(cute::UMMA::to_UMMAFormat<cute::float_e2m1_t>()));
  printf(" fmt %u %u", K::kFormatTokens, K::kFormatWeights);
  printf(" desc_a %llu %llu", (unsigned long long)umma_smem_desc_mx_k_slice(0, 0),
         (unsigned long long)cute_a);
  printf(" desc_b %llu %llu", (unsigned long long)umma_smem_desc_mx_k_slice(0, 0),
         (unsigned long long)cute_b);
  printf(" desc_sf %llu %llu", (unsigned long long)umma_sf_desc(0),
         (unsigned long long)cute_sf_desc());
  printf(" umma %d %d smem %u tmem %u sfcols %u %u bytes %u stages %u", M, N, K::kSmemBytes,
         K::kTmemCols, K::kTmemSfaCol, K::kTmemSfbCol, K::kExpectedBytes, K::kNumStages);
  printf(" arrivals %u %u %u %u threads %u\n", K::kFullArrivals, K::kEmptyArrivals,
         K::kTmemFullArrivals, K::kTmemEmptyArrivals, K::kNumThreads);
}

void cells() {
  const float values[] = {1.0f, 0.5f, 3.0f, 0.0f, -1.0f, __builtin_huge_valf(),
                          __builtin_nanf(""), 0x1p-126f, 0x1p-127f, 0x1p127f, 0x1.000002p0f};
  printf("cells");
  for (float v : values) printf(" %u", moegemm::sm100::ue8m0_cell_of(v));
  printf("\n");
}
"""


@pytest.fixture(scope="module")
def host_report(tmp_path_factory) -> tuple[dict[str, dict[str, list[int]]], list[int]]:
    work = tmp_path_factory.mktemp("umma_mx_host")
    blocks, calls = [], ["  cells();"]
    for name, (spec, _) in sorted(candidates().items()):
        block, space = _config_block(spec)
        blocks.append(block)
        calls.append(f'  report<{space}::Config>("{name}");')
    source = work / "umma_mx_descs.cu"
    source.write_text(
        _HOST_PROLOGUE + "\n".join(blocks) + "\nint main() {\n" + "\n".join(calls) + "\n}\n"
    )
    binary = work / "umma_mx_descs"
    command = [str(find_nvcc()), "-std=c++17", "--expt-relaxed-constexpr", *include_flags()]
    command += ["-gencode=arch=compute_100f,code=sm_100f", "--diag-suppress=177,550,20012"]
    command += [str(source), "-o", str(binary)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    rows: dict[str, dict[str, list[int]]] = {}
    cells: list[int] = []
    for line in out.splitlines():
        if line.startswith("cells "):
            cells = [int(t) for t in line.split()[1:]]
        if not line.startswith("row "):
            continue
        tokens = line.split()
        fields: dict[str, list[int]] = {}
        key = ""
        for token in tokens[2:]:
            if re.fullmatch(r"\d+", token):
                fields[key].append(int(token))
            else:
                key = token
                fields[key] = []
        rows[tokens[1]] = fields
    assert set(rows) == set(candidates())
    return rows, cells


def test_descriptors_equal_cutes(host_report) -> None:
    rows, _ = host_report
    for name, row in rows.items():
        _, config = candidates()[name]
        # CuTe: E4M3 0, unpacked E2M1 5, packed float_e2m1_t 1 (E5M2 under mxf8f6f4).
        assert row["formats"] == [0, 5, 1] and row["fmt"] == [0, 5]
        for k in range(4):
            ours, cutes = row[f"idesc{k}"]
            assert ours == cutes, f"{name}: idesc {k} {ours:#x} != CuTe {cutes:#x}"
            # Independently: formats, UE8M0, scale-factor ids, M, N.
            fa, fb = (5, 0) if config.layout.swap_ab else (0, 5)
            m, n = row["umma"]
            assert (ours >> 7) & 7 == fa and (ours >> 10) & 7 == fb
            assert (ours >> 23) & 1 == 1 and (ours >> 4) & 3 == k and (ours >> 29) & 3 == k
            assert (ours >> 17) & 0x3F == n >> 3 and (ours >> 24) & 0x1F == m >> 4
            assert ours >> 31 == 0, "K = 32"
            ours, cutes = row[f"k{k}"]
            assert ours == cutes == 2 * k, f"{name}: k-slice {k}"
        for operand in ("desc_a", "desc_b", "desc_sf"):
            ours, cutes = row[operand]
            assert ours == cutes, f"{name} {operand}: {ours:#x} != CuTe {cutes:#x}"
        sf = row["desc_sf"][0]
        assert (sf >> 32) & 0x3FFF == 8 and (sf >> 16) & 0x3FFF == 0 and sf >> 61 == 0


def test_budgets_recomputed_independently(host_report) -> None:
    rows, _ = host_report
    for name, row in rows.items():
        _, config = candidates()[name]
        lay = config.layout
        stages = config.pipeline.num_stages
        umma_m, umma_n = row["umma"]
        assert umma_m == UMMA_M and lay.block_n == 128
        assert umma_n == (lay.block_m if lay.swap_ab else lay.block_n)
        # Shared memory of a stage: A (block_m x 128 E4M3), W (128 rows x 128 unpacked bytes),
        # scales (2 x 128 rows x 4 bytes); barriers 8 B each, the 16-byte TMEM slot.
        stage = lay.block_m * 128 + 128 * 128 + 2 * 128 * 4
        assert stage % 1024 == 0
        smem = stages * stage + (2 * stages + 4) * 8 + 16
        assert row["smem"] == [smem] and config.pipeline.smem_bytes == smem <= SMEM_OPT_IN
        assert row["stages"] == [stages]
        # TMA transaction bytes: A's box, W's box counted packed (4 bits a code), W's scales.
        assert row["bytes"] == [lay.block_m * 128 + 128 * 128 // 2 + 128 * 4]
        # Tensor memory: two FP32 accumulators of umma_n columns, then 4 + 4 scale columns.
        need = 2 * umma_n + 8
        tmem = max(32, 1 << (need - 1).bit_length())
        assert row["tmem"] == [tmem] and need <= tmem <= TMEM_COLUMNS
        assert row["sfcols"] == [2 * umma_n, 2 * umma_n + 4]
        # full: arrive.expect_tx + the scale warp; empty, tmem_full: one commit; tmem_empty:
        # lane 0 of each of the 4 epilogue warps.
        assert row["arrivals"] == [2, 1, 1, 4]
        assert row["threads"] == [config.launch.num_threads] == [256]


def test_activation_scale_cells(host_report) -> None:
    """FP32 scale -> UE8M0 cell: 2^e gives byte e + 127 four times; anything else 0xFF (NaN)."""
    _, cells = host_report

    def cell(byte: int) -> int:
        return byte * 0x01010101

    nan = cell(0xFF)
    want = [cell(127), cell(126), nan, nan, nan, nan, nan, cell(1), nan, cell(254), nan]
    assert cells == want
    assert struct.unpack("<I", struct.pack("<f", 0.5))[0] >> 23 == 126


def test_warmup_builds_sm100_fp8_fp4_kernels_for_mxfp4() -> None:
    """warmup_specs(..., "sm_100f", weights="mxfp4"): the SM100 FP8 x FP4 kernels of the
    prepared form (one kernel per config: SM100 takes no raw weights), no BF16 ones."""
    from moegemm.warmup.specs import warmup_specs

    shapes = [{"n": 5760, "k": 2880, "num_groups": 32}, {"n": 2880, "k": 2880, "num_groups": 1}]
    specs = warmup_specs(shapes, [1, 8, 64, 512], 4, "sm_100f", 148, weights="mxfp4")
    assert specs and all(s.arch == "sm_100f" for s in specs)
    assert all(s.name.startswith("sm100_fp8_fp4_") for s in specs), [s.name for s in specs]
    assert {s.name.split("_")[3] for s in specs} >= {"dense", "offs", "masked", "contig"}
