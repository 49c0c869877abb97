"""SM100 BF16 kernels, compiled for sm_100f and statically checked (no Blackwell GPU here: none
of this runs on hardware).

- Every config the SM100 heuristics may emit (every candidate they rank, not only the ones they
  select) for the decode, prefill and masked suites of moe_shapes.json, in each layout the
  kernel serves, and for its k_grouped suite (the weight gradient's own kernel,
  impls/sm100_bf16_k_grouped_gemm.cuh), is compiled through the real JIT path (codegen -> nvcc
  -> cache, ptxas told to fail on local memory) and its SASS and ELF inspected: UTCHMMA
  (tcgen05.mma kind::f16), UTCBAR (tcgen05.commit), LDTM (tcgen05.ld), no UTCQMMA/UTCCP (FP8 x
  FP4 only), no .2CTA (no clusters of two), the ELF's tcgen05 CTA group equal to the launch's
  cluster size, no trap beyond the tensor-memory allocator's own error paths, no local memory,
  no stack, the shared memory within the opt-in budget.
- A host program compiled against CUTLASS prints, for every candidate config the heuristics
  rank for those suites (a superset of the selected ones), the kernel's own constants
  (instruction descriptor, shared-memory descriptor fields, tensor-memory columns, expected
  bytes, arrive counts, shared memory) next to CuTe's constexpr encoders; the test compares them
  with CuTe and with budgets recomputed here from first principles. The k-grouped kernels'
  operands are MN-major: their descriptors are compared with CuTe's Major::MN encoders.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from sm100_elf import assert_cta_group_matches_launch

from moegemm.families import enumerate_configs, is_legal, select_config
from moegemm.heuristics import GemmDesc, arch_for
from moegemm.heuristics.config import GemmConfig
from moegemm.jit import cache
from moegemm.jit.codegen_sm100 import sm100_kernel_spec
from moegemm.jit.compiler import (
    CompileError,
    check_nvcc_for,
    find_cuobjdump,
    find_nvcc,
    include_flags,
    nvcc_release,
)
from moegemm.jit.cubin import count_cubin_kernels
from moegemm.jit.spec import KernelSpec

pytestmark = pytest.mark.nvcc  # conftest skips these where nvcc is missing

REPO = Path(__file__).resolve().parents[2]
SHAPES = REPO / "python" / "moegemm" / "data" / "moe_shapes.json"  # = shared/moe_shapes.json
ARCH = arch_for("sm_100f")
SMEM_OPT_IN = 232448  # bytes of dynamic shared memory one block may opt into on SM100
TMEM_COLUMNS = 512
UMMA_M = 128


def suite_descs() -> list[GemmDesc]:
    """The problems of the decode, prefill and masked suites in every layout the SM100 BF16
    kernel serves (m_indices, offsets, masked, and each case's shape as a dense GEMM)."""
    data = json.loads(SHAPES.read_text())
    descs: dict[GemmDesc, None] = {}
    for suite in ("decode", "prefill", "masked"):
        for case in data["suites"][suite]:
            n, k, groups = case["n"], case["k"], case["num_groups"]
            rows = case["m_total"]
            expected = max(1, round(case["expected_m"]))
            max_m = case.get("max_m", max(128, expected))
            for desc in (
                GemmDesc("m_grouped_contiguous", m=rows, n=n, k=k, num_groups=groups),
                GemmDesc("m_grouped_offsets", m=rows, n=n, k=k, num_groups=groups),
                GemmDesc("m_grouped_masked", max_m, n, k, groups, expected_m=expected),
                GemmDesc("bf16_gemm_nt", m=rows, n=n, k=k),
            ):
                descs[desc] = None
    # The fused MoE layer's epilogues (swapped tiles) on the first decode and masked cases.
    for case in (data["suites"]["decode"][0], data["suites"]["masked"][0]):
        n, k, groups = case["n"], case["k"], case["num_groups"]
        expected = max(1, round(case["expected_m"]))
        offsets = GemmDesc("m_grouped_offsets", case["m_total"], n, k, groups)
        masked = GemmDesc("m_grouped_masked", 128, n, k, groups, expected_m=expected)
        for epilogue in ("swiglu", "swiglu_oai", "row_scale"):
            descs[dataclasses.replace(offsets, epilogue=epilogue)] = None
        descs[dataclasses.replace(masked, epilogue="swiglu")] = None
    # The dense GEMM's other outputs: FP32, FP32 plus C.
    descs[GemmDesc("bf16_gemm_nt", 4096, 7168, 2048, d_dtype="fp32")] = None
    descs[GemmDesc("bf16_gemm_nt", 4096, 7168, 2048, d_dtype="fp32", with_c=True)] = None
    for desc in k_grouped_descs():
        descs[desc] = None
    return list(descs)


def k_grouped_descs() -> list[GemmDesc]:
    """The k_grouped suite as the benchmarks describe it (M = n, N = k, the mean rows per
    group), with and without C, and one small problem (few rows per group, narrow N)."""
    data = json.loads(SHAPES.read_text())
    descs: dict[GemmDesc, None] = {}
    for case in data["suites"]["k_grouped"]:
        g = case["num_groups"]
        rows = -(-case["m_total"] // g)
        for with_c in (False, True):
            descs[GemmDesc("k_grouped", case["n"], case["k"], rows, g, "bf16", "fp32", with_c)] = (
                None
            )
    descs[GemmDesc("k_grouped", 2048, 512, 64, 8, d_dtype="fp32")] = None
    return list(descs)


Key = tuple[str, str, bool]  # (kind, d_dtype, with_c)


def _spec(desc: GemmDesc, config: GemmConfig) -> KernelSpec:
    return sm100_kernel_spec(desc, config)


@functools.cache
def candidates() -> dict[str, tuple[KernelSpec, GemmConfig]]:
    """Every kernel the heuristics rank for the suites (what they may emit), by name."""
    specs: dict[str, tuple[KernelSpec, GemmConfig]] = {}
    for desc in suite_descs():
        for config in enumerate_configs(desc, ARCH):
            assert is_legal(config, desc, ARCH), config
            specs.setdefault(_spec(desc, config).name, (_spec(desc, config), config))
    return specs


@functools.cache
def emitted() -> dict[str, tuple[KernelSpec, GemmConfig]]:
    """The kernels the heuristics select for the suites, by name (every candidate is compiled
    and checked; these are the ones a call of the suites loads)."""
    specs: dict[str, tuple[KernelSpec, GemmConfig]] = {}
    for desc in suite_descs():
        config = select_config(desc, ARCH)
        specs.setdefault(_spec(desc, config).name, (_spec(desc, config), config))
    return specs


def test_selected_configs_are_among_the_candidates() -> None:
    assert 20 <= len(emitted()) <= 52, "keep the compile set small and meaningful"
    assert set(emitted()) <= set(candidates())
    for desc in suite_descs():
        config = select_config(desc, ARCH)
        assert _spec(desc, config).arch == "sm_100f"
        if desc.kind == "k_grouped":
            # 128 output rows on the MMA's M side, B's columns in 64-wide chunks on its N side.
            lay = config.layout
            assert not lay.swap_ab and lay.block_m == UMMA_M and lay.block_n % 64 == 0
            assert _spec(desc, config).name.startswith("sm100_bf16_kgrouped_")
        # The m-grouped layouts take swapped tiles with the weights' 128 rows on the MMA's M.
        elif desc.kind != "bf16_gemm_nt":
            assert config.layout.swap_ab and config.layout.block_n == 128
    assert sum(name.startswith("sm100_bf16_kgrouped_") for name in emitted()) >= 3


def test_sm100a_is_an_alias_and_the_device_maps_to_sm100f() -> None:
    from moegemm.heuristics import arch_for_compute_capability

    assert arch_for("sm_100a") == ARCH
    assert arch_for_compute_capability(10, 0) == "sm_100f"
    assert arch_for_compute_capability(10, 3) == "sm_100f"  # B300: same family cubin
    for major, minor in ((12, 0), (10, 1), (8, 0)):  # no tcgen05 kernels for these
        with pytest.raises(ValueError, match="SM90"):
            arch_for_compute_capability(major, minor)


def test_unsupported_sm100_problems_are_clear_errors() -> None:
    for desc in (
        # Weight gradients are FP32 out; the fused layer's epilogues are not k-grouped.
        GemmDesc("k_grouped", m=128, n=128, k=128, num_groups=2, d_dtype="bf16"),
        GemmDesc("k_grouped", 128, 128, 128, 2, d_dtype="fp32", epilogue="row_scale"),
        GemmDesc("bf16_gemm_nt", 64, 256, 128, epilogue="swiglu"),
        GemmDesc("bf16_gemm_nt", m=64, n=64, k=64, ab_dtype="fp8_fp4", d_dtype="fp32"),
    ):
        with pytest.raises(ValueError, match="no SM100 kernel"):
            select_config(desc, ARCH)


def test_old_nvcc_is_refused_for_sm100f(monkeypatch) -> None:
    from moegemm.jit import compiler

    assert nvcc_release("Cuda compilation tools, release 12.9, V12.9.41") == (12, 9)
    flags = compiler.cubin_flags("sm_100f")
    monkeypatch.setattr(compiler, "compiler_identity", lambda: {"version": "release 12.8, V1"})
    with pytest.raises(CompileError, match=r"sm_100f needs nvcc >= 12\.9"):
        check_nvcc_for(flags)
    check_nvcc_for(compiler.cubin_flags("sm_90a"))  # other targets are not affected
    monkeypatch.setattr(compiler, "compiler_identity", lambda: {"version": "release 12.9, V1"})
    check_nvcc_for(flags)


# --- compiled kernels ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cubins(tmp_path_factory) -> dict[str, Path]:
    """Builds every candidate kernel (two nvcc at a time) in a private cache, with ptxas failing
    the build on local memory or spills."""
    saved = {k: os.environ.get(k) for k in ("MOEGEMM_CACHE_DIR", "MOEGEMM_JIT_PTXAS_CHECK")}
    os.environ["MOEGEMM_CACHE_DIR"] = str(tmp_path_factory.mktemp("sm100_cache"))
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


def cuobjdump(*args: str) -> str:
    tool = find_cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (pip install nvidia-cuda-cuobjdump)")
    proc = subprocess.run([str(tool), *args], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-1000:]
    return proc.stdout


@pytest.fixture(scope="module")
def allocator_traps(tmp_path_factory) -> int:
    """BPT.TRAP instructions ptxas emits for tcgen05.alloc/dealloc alone (their error paths):
    the kernels may hold these and no other trap."""
    work = tmp_path_factory.mktemp("alloc_only")
    source = work / "alloc_only.cu"
    source.write_text(
        "#include <moegemm/ptx/tcgen05.cuh>\n"
        "__global__ void alloc_only() {\n"
        "  __shared__ uint32_t slot;\n"
        "  if (threadIdx.x < 32) {\n"
        "    moegemm::sm100::tmem_alloc<32>(static_cast<uint32_t>(__cvta_generic_to_shared(&slot)));\n"
        "    moegemm::sm100::tmem_relinquish_alloc_permit();\n"
        "  }\n"
        "  __syncthreads();\n"
        "  if (threadIdx.x < 32) moegemm::sm100::tmem_dealloc<32>(slot);\n"
        "}\n"
    )
    cubin = work / "alloc_only.cubin"
    command = [str(find_nvcc()), "-cubin", "-gencode=arch=compute_100f,code=sm_100f"]
    command += [*include_flags(), str(source), "-o", str(cubin)]
    subprocess.run(command, check=True, capture_output=True)
    return cuobjdump("--dump-sass", str(cubin)).count("BPT.TRAP")


def opcodes(sass: str) -> list[str]:
    """The opcode (with its modifiers) of every instruction line of a SASS dump."""
    found = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", line)
        if m:
            found.append(m.group(1))
    return found


@pytest.mark.parametrize("name", sorted(candidates()))
def test_kernel_sass_and_elf(name: str, cubins, allocator_traps: int) -> None:
    spec, config = candidates()[name]
    cubin = cubins[name]
    assert count_cubin_kernels(cubin.read_bytes()) == 1
    sass = cuobjdump("--dump-sass", str(cubin))
    ops = opcodes(sass)
    assert sum(op.startswith("UTCHMMA") for op in ops) >= 4, "tcgen05.mma kind::f16: UTCHMMA"
    assert any(op.startswith("UTCBAR") for op in ops), "tcgen05.commit: UTCBAR"
    assert any(op.startswith("LDTM") for op in ops), "tcgen05.ld: LDTM"
    assert any(op.startswith("UTMALDG") for op in ops), "TMA loads: UTMALDG"
    assert not any(op.startswith(("UTCQMMA", "UTCCP")) for op in ops), "FP8 x FP4 only"
    assert ".2CTA" not in sass, "no 2-CTA forms: every config is one CTA per tile"
    assert_cta_group_matches_launch(cuobjdump("-elf", str(cubin)), config)
    assert not any(op in ("LDL", "STL") or op.startswith(("LDL.", "STL.")) for op in ops)
    assert sass.count("BPT.TRAP") == allocator_traps, "a trap beyond the allocator's own"
    usage = cuobjdump("-res-usage", str(cubin))
    fields = dict(re.findall(r"(\w+):(\d+)", usage.split("Function", 1)[1]))
    assert fields["LOCAL"] == "0" and fields["STACK"] == "0"
    assert int(fields["SHARED"]) <= 1024, "no static shared memory beyond the reserved 1 KB"
    # What the launch opts into plus the static part: within one block's limit.
    assert config.pipeline.smem_bytes + int(fields["SHARED"]) <= SMEM_OPT_IN
    # The generated source ties the kernel's own shared memory and threads to the config.
    assert f"kSmemBytes = {config.pipeline.smem_bytes};" in spec.source
    if name.startswith("sm100_bf16_kgrouped_"):
        lay = config.layout
        # One TMA box per 64-wide chunk of A's and B's columns, per k-block.
        assert sum(op.startswith("UTMALDG") for op in ops) == (lay.block_m + lay.block_n) // 64
        # The group-tail fixup: 16-byte zero stores, then the generic -> async proxy fence
        # before the tensor core reads the stage.
        assert any(op.startswith("STS.128") for op in ops), "the tail rows' zero stores"
        assert any(op.startswith("FENCE.VIEW.ASYNC.S") for op in ops), "fence.proxy.async"


def test_a_target_without_a_or_f_is_refused(tmp_path) -> None:
    """Built for plain sm_100 (neither `a` nor `f`), tcgen05 does not exist; CuTe's wrappers
    would compile to traps there. The kernel header refuses such a target at compile time."""
    spec, _ = next(iter(emitted().values()))
    source = tmp_path / "plain_sm100.cu"
    source.write_text(spec.source)
    command = [str(find_nvcc()), "-std=c++17", "--expt-relaxed-constexpr", "-cubin"]
    command += ["-gencode=arch=compute_100,code=sm_100", *include_flags(), str(source)]
    command += ["-o", str(tmp_path / "plain.cubin")]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    assert "need an arch- or family-specific target" in proc.stdout + proc.stderr


@pytest.mark.parametrize("fp8", [False, True])
def test_moe_layer_kernels_compile_for_sm100f(fp8: bool, tmp_path, monkeypatch) -> None:
    """The fused layer's own kernels (route-and-gather, combine; with MXFP4 experts the
    gather and the intermediate's quantization with UE8M0 scales) for sm_100f: plain CUDA, so
    no trap at all and no local memory."""
    from moegemm.jit.codegen import moe_combine_spec, moe_quantize_rows_spec, moe_route_gather_spec

    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")
    specs = [moe_route_gather_spec("sm_100f", fp8=fp8)] + (
        [moe_quantize_rows_spec("sm_100f")] if fp8 else [moe_combine_spec("sm_100f")]
    )
    for spec in specs:
        cubin = cache.build_or_load(spec)
        assert count_cubin_kernels(cubin.read_bytes()) == 1
        sass = cuobjdump("--dump-sass", str(cubin))
        assert "BPT.TRAP" not in sass
        assert not any(
            op in ("LDL", "STL") or op.startswith(("LDL.", "STL.")) for op in opcodes(sass)
        )


# --- descriptors and budgets against CuTe ----------------------------------------------------

_HOST_PROLOGUE = r"""
#include <cstdio>
#include <cute/tensor.hpp>
#include <cute/atom/mma_traits_sm100.hpp>
#include <moegemm/impls/sm100_bf16_grouped_gemm.cuh>
#include <moegemm/impls/sm100_bf16_k_grouped_gemm.cuh>

template <int Rows>
uint64_t cute_smem_desc() {
  using namespace cute;
  auto layout = tile_to_shape(UMMA::Layout_K_SW128_Atom<bfloat16_t>{},
                              make_shape(Int<Rows>{}, Int<64>{}));
  auto tensor = make_tensor(make_smem_ptr(static_cast<bfloat16_t*>(nullptr)), layout);
  return uint64_t(UMMA::make_umma_desc<UMMA::Major::K>(tensor));
}

template <int Rows>
uint32_t cute_k_slice_u128(int k) {  // where CuTe puts the k-th 16-wide slice, in 16-byte units
  using namespace cute;
  auto layout = tile_to_shape(UMMA::Layout_K_SW128_Atom<bfloat16_t>{},
                              make_shape(Int<Rows>{}, Int<64>{}));
  return uint32_t(layout.layout_b()(0, 16 * k) * sizeof(bfloat16_t) / 16);
}

// MN-major (k-grouped): 64-wide chunks of Rows columns, each BLOCK_K = 64 rows deep, chunk
// after chunk (the K atoms of one chunk first: Step<_2, _1>), as the TMA boxes land.
template <int Rows>
auto cute_mn_layout() {
  using namespace cute;
  return tile_to_shape(UMMA::Layout_MN_SW128_Atom<bfloat16_t>{},
                       make_shape(Int<Rows>{}, Int<64>{}), Step<_2, _1>{});
}

template <int Rows>
uint64_t cute_mn_smem_desc() {  // one MMA's operand: the stage's first 16 rows
  using namespace cute;
  auto tensor = make_tensor(make_smem_ptr(static_cast<bfloat16_t*>(nullptr)), cute_mn_layout<Rows>());
  auto slice = local_tile(tensor, make_shape(Int<Rows>{}, Int<16>{}), make_coord(0, 0));
  return uint64_t(UMMA::make_umma_desc<UMMA::Major::MN>(slice));
}

template <int Rows>
uint32_t cute_mn_k_slice_u128(int k) {
  using namespace cute;
  return uint32_t(cute_mn_layout<Rows>().layout_b()(0, 16 * k) * sizeof(bfloat16_t) / 16);
}

template <class Config>
void report_k_grouped(const char* name) {
  using K = moegemm::sm100::Bf16KGroupedGemm<Config>;
  using namespace moegemm::sm100;
  constexpr int M = K::kUmmaM, N = K::kUmmaN;
  constexpr uint32_t kChunk = K::Loader::kChunkBytes;
  const uint32_t cute_idesc = uint32_t(cute::UMMA::make_instr_desc<
      cute::bfloat16_t, cute::bfloat16_t, float, M, N, cute::UMMA::Major::MN,
      cute::UMMA::Major::MN>());
  const uint64_t cute_a = cute_mn_smem_desc<M>(), cute_b = cute_mn_smem_desc<N>();
  uint32_t ours_k[4], cute_k[4];
  for (int k = 0; k < 4; ++k) {
    ours_k[k] = uint32_t(umma_smem_desc_bf16_mn_k_slice(0, k, K::Mma::kChunkStrideA) & 0x3fff);
    cute_k[k] = cute_mn_k_slice_u128<M>(k);
  }
  printf("row %s idesc %u %u", name, K::Mma::kIdesc, cute_idesc);
  printf(" desc_a %llu %llu",
         (unsigned long long)umma_smem_desc_bf16_mn_k_slice(0, 0, K::Mma::kChunkStrideA),
         (unsigned long long)cute_a);
  printf(" desc_b %llu %llu",
         (unsigned long long)umma_smem_desc_bf16_mn_k_slice(0, 0, K::Mma::kChunkStrideB),
         (unsigned long long)cute_b);
  for (int k = 0; k < 4; ++k) printf(" k%d %u %u", k, ours_k[k], cute_k[k]);
  printf(" umma %d %d smem %u tmem %u bytes %u stages %u arrivals %u %u %u %u threads %u",
         M, N, K::kSmemBytes, K::kTmemCols, K::kExpectedBytes, K::kNumStages, K::kFullArrivals,
         K::kEmptyArrivals, K::kTmemFullArrivals, K::kTmemEmptyArrivals, K::kNumThreads);
  printf(" chunk %u\n", kChunk);
}

template <class Config>
void report(const char* name) {
  using K = moegemm::sm100::Bf16Gemm<Config>;
  using namespace moegemm::sm100;
  constexpr int M = K::kUmmaM, N = K::kUmmaN;
  const uint32_t cute_idesc = uint32_t(cute::UMMA::make_instr_desc<
      cute::bfloat16_t, cute::bfloat16_t, float, M, N, cute::UMMA::Major::K,
      cute::UMMA::Major::K>());
  // CuTe's host path prints an error line when asked for a shared-memory address: take every
  // value before this row's output starts.
  const uint64_t cute_a = cute_smem_desc<M>(), cute_b = cute_smem_desc<N>();
  uint32_t ours_k[4], cute_k[4];
  for (int k = 0; k < 4; ++k) {
    ours_k[k] = uint32_t(umma_smem_desc_bf16_k_slice(0, k) & 0x3fff);
    cute_k[k] = cute_k_slice_u128<M>(k);
  }
  printf("row %s idesc %u %u", name, K::Mma::kIdesc, cute_idesc);
  printf(" desc_a %llu %llu", (unsigned long long)umma_smem_desc_sw128_kmajor(0),
         (unsigned long long)cute_a);
  printf(" desc_b %llu %llu", (unsigned long long)umma_smem_desc_sw128_kmajor(0),
         (unsigned long long)cute_b);
  for (int k = 0; k < 4; ++k) printf(" k%d %u %u", k, ours_k[k], cute_k[k]);
  printf(" umma %d %d smem %u tmem %u bytes %u stages %u arrivals %u %u %u %u threads %u\n",
         M, N, K::kSmemBytes, K::kTmemCols, K::kExpectedBytes, K::kNumStages, K::kFullArrivals,
         K::kEmptyArrivals, K::kTmemFullArrivals, K::kTmemEmptyArrivals, K::kNumThreads);
}
"""


def _config_block(spec: KernelSpec) -> tuple[str, str]:
    """The generated `namespace X { struct Config ... }` of a spec, and X."""
    m = re.search(r"namespace (\w+) \{\n(struct Config \{.*?\n\};\n)\}", spec.source, re.DOTALL)
    assert m, spec.source
    return m.group(0), m.group(1)


@pytest.fixture(scope="module")
def host_report(tmp_path_factory) -> dict[str, dict[str, list[int]]]:
    """Compiles and runs the host program; its rows by kernel name."""
    work = tmp_path_factory.mktemp("umma_host")
    blocks, calls = [], []
    for name, (spec, _) in sorted(candidates().items()):
        block, space = _config_block(spec)
        blocks.append(block)
        function = "report_k_grouped" if name.startswith("sm100_bf16_kgrouped_") else "report"
        calls.append(f'  {function}<{space}::Config>("{name}");')
    source = work / "umma_descs.cu"
    source.write_text(
        _HOST_PROLOGUE + "\n".join(blocks) + "\nint main() {\n" + "\n".join(calls) + "\n}\n"
    )
    binary = work / "umma_descs"
    # The device pass must target sm_100f too: the kernel header refuses any other.
    command = [str(find_nvcc()), "-std=c++17", "--expt-relaxed-constexpr", *include_flags()]
    command += [
        "-gencode=arch=compute_100f,code=sm_100f",
        "--diag-suppress=177,550,20012",
        str(source),
        "-o",
        str(binary),
    ]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout
    rows: dict[str, dict[str, list[int]]] = {}
    # CuTe's host build cannot turn a pointer into a shared-memory address and says so on
    # stdout: its start address is 0, as ours with base 0.
    for line in out.splitlines():
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
    return rows


def test_descriptors_equal_cutes(host_report) -> None:
    for name, row in host_report.items():
        ours, cutes = row["idesc"]
        assert ours == cutes, f"{name}: instruction descriptor {ours:#x} != CuTe {cutes:#x}"
        for operand in ("desc_a", "desc_b"):
            ours, cutes = row[operand]
            assert ours == cutes, f"{name} {operand}: {ours:#x} != CuTe {cutes:#x}"
        for k in range(4):
            ours, cutes = row[f"k{k}"]
            assert ours == cutes, f"{name}: k-slice {k} at {ours} != CuTe's {cutes} (16 B units)"


def test_k_grouped_descriptors_from_first_principles(host_report) -> None:
    """The MN-major fields decoded against the layout TMA writes: 64 columns (128 B) per row,
    BLOCK_K = 64 rows per chunk, chunks back to back; 8 rows (1024 B) per swizzle atom."""
    rows = {n: r for n, r in host_report.items() if n.startswith("sm100_bf16_kgrouped_")}
    assert len(rows) >= 4, "every k-grouped candidate tile is reported"
    for name, row in rows.items():
        _, config = candidates()[name]
        idesc = row["idesc"][0]
        assert (idesc >> 15) & 1 == 1 and (idesc >> 16) & 1 == 1, f"{name}: A and B MN-major"
        assert (idesc >> 4) & 3 == 1 and (idesc >> 7) & 7 == 1 and (idesc >> 10) & 7 == 1
        assert (idesc >> 17) & 0x3F == config.layout.block_n >> 3
        assert (idesc >> 24) & 0x1F == UMMA_M >> 4
        chunk = config.layout.block_k * 128
        assert row["chunk"] == [chunk]
        for operand, width in (("desc_a", UMMA_M), ("desc_b", config.layout.block_n)):
            desc = row[operand][0]
            # LBO: the next 64-wide chunk; none (0, as CuTe) for an operand of one chunk.
            lbo = chunk if width > 64 else 0
            assert ((desc >> 16) & 0x3FFF) << 4 == lbo, f"{name} {operand}: LBO"
            assert ((desc >> 32) & 0x3FFF) << 4 == 1024, f"{name} {operand}: SBO = 8 rows of 128 B"
            assert (desc >> 46) & 3 == 1 and (desc >> 49) & 7 == 0 and desc >> 61 == 2
        # The k-th MMA reads rows 16 k..16 k + 15: 16 rows of 128 B further, in 16 B units.
        assert [row[f"k{k}"][0] for k in range(4)] == [128 * k for k in range(4)]


def test_budgets_recomputed_independently(host_report) -> None:
    """Shared memory, tensor-memory columns, expected bytes and arrive counts from first
    principles, against the kernel's own constants and the config."""
    for name, row in host_report.items():
        _, config = candidates()[name]
        lay = config.layout
        stages = config.pipeline.num_stages
        umma_m, umma_n = row["umma"]
        assert umma_m == UMMA_M
        assert umma_n == (lay.block_m if lay.swap_ab else lay.block_n)
        assert (lay.block_n if lay.swap_ab else lay.block_m) == UMMA_M
        # One stage: the TMA boxes of A and B (BF16), landing whole in this CTA. k-grouped: one
        # box of 64 columns x block_k rows per 64-wide chunk of A's and B's columns.
        if name.startswith("sm100_bf16_kgrouped_"):
            chunks = lay.block_m // 64 + lay.block_n // 64
            box_bytes = chunks * 64 * lay.block_k * 2
        else:
            box_bytes = sum(
                w * h * 2 for w, h in (config.storage.load_box_a, config.storage.load_box_b)
            )
        assert row["bytes"] == [box_bytes]
        assert box_bytes % 1024 == 0, "slabs stay on 1024-byte swizzle atoms"
        # Barriers: full and empty per stage, full and empty per accumulator, 8 bytes each, and
        # the 16-byte slot tcgen05.alloc writes to.
        smem = stages * box_bytes + (2 * stages + 2 * 2) * 8 + 16
        assert row["smem"] == [smem] and config.pipeline.smem_bytes == smem <= SMEM_OPT_IN
        # Over half the shared memory: no second CTA of the kernel shares an SM, so the
        # tensor-memory allocation never waits on a sibling (the kernels' header comments).
        assert 2 * smem > SMEM_OPT_IN
        assert row["stages"] == [stages]
        # Two FP32 accumulators of umma_n columns, allocated as a power of two >= 32.
        tmem = max(32, 1 << (2 * umma_n - 1).bit_length())
        assert row["tmem"] == [tmem] and 2 * umma_n <= tmem <= TMEM_COLUMNS
        # full: the producer's arrive.expect_tx; empty and tmem_full: one tcgen05.commit;
        # tmem_empty: one arrive per epilogue warp = the warps of the last warpgroup.
        epilogue_warps = 128 // 32
        assert row["arrivals"] == [1, 1, 1, epilogue_warps]
        assert row["threads"] == [config.launch.num_threads] == [256]
