"""Compile-only builds of the fused MoE layer's kernels through the real JIT path (nvcc, no
GPU): route-and-gather, combine, and the BF16 and FP8 x FP4 (MXFP4 experts) grouped GEMMs with
the SwiGLU and RowScale epilogues, as the heuristics pick them for decode and prefill. Checked in
the cubin: one kernel, no local memory, the instructions each must contain."""

from __future__ import annotations

import pytest
from test_compile_only import dump_sass

from moegemm.families import kernel_spec, select_config
from moegemm.heuristics import SM90, GemmDesc
from moegemm.jit import cache
from moegemm.jit.codegen import moe_combine_spec, moe_route_gather_spec
from moegemm.jit.compiler import find_cuobjdump
from moegemm.jit.cubin import count_cubin_kernels

pytestmark = pytest.mark.nvcc


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")  # fails the build on local memory


def sass_of(spec) -> str:
    path = cache.build_or_load(spec)
    assert count_cubin_kernels(path.read_bytes()) == 1
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("cuobjdump not found: cubin built, SASS not inspected")
    sass = dump_sass(cuobjdump, path)
    assert "LDL" not in sass and "STL" not in sass
    return sass


def test_route_gather_kernel() -> None:
    sass = sass_of(moe_route_gather_spec())
    assert "MATCH.ANY" in sass, "ranks among a warp's lanes of one expert"
    assert "ATOMS" in sass, "the shared-memory histograms"
    assert "LDG.E.128" in sass and "STG.E.128" in sass, "the gather in 16-byte vectors"


def test_combine_kernel() -> None:
    sass = sass_of(moe_combine_spec())
    assert "LDG.E.128" in sass and "STG.E.128" in sass


@pytest.mark.parametrize("epilogue", ["swiglu", "swiglu_oai", "row_scale"])
@pytest.mark.parametrize("rows", [4, 512])  # swapped (decode) and unswapped picks
def test_layer_gemm_compiles(epilogue: str, rows: int) -> None:
    n, k = (1536, 2048) if epilogue != "row_scale" else (2048, 768)  # Qwen3-30B's experts
    desc = GemmDesc("m_grouped_offsets", 128 * rows, n, k, 128, expected_m=rows, epilogue=epilogue)
    config = select_config(desc, SM90)
    assert config.layout.swap_ab == (rows == 4)
    sass = sass_of(kernel_spec(desc, config))
    assert "HGMMA" in sass
    if epilogue != "row_scale":
        assert "MUFU.EX2" in sass, "the activation's exponential"
    if rows == 512:  # prefill tiles stage their results and store them by TMA
        assert config.store_cols and "STSM" in sass and "UTMASTG" in sass
    else:
        assert "UTMASTG" not in sass


@pytest.mark.parametrize("epilogue", ["swiglu", "swiglu_oai", "row_scale"])
@pytest.mark.parametrize(
    "kind,rows", [("m_grouped_offsets", 4), ("m_grouped_offsets", 32), ("m_grouped_offsets", 64),
                  ("m_grouped_offsets", 256), ("m_grouped_masked", 32)],
)  # fmt: skip
def test_mxfp4_layer_gemm_compiles(epilogue: str, kind: str, rows: int) -> None:
    """The MXFP4 layer's FP8 x FP4 GEMMs on prepared weights, as the heuristics pick them from
    decode to prefill sizes, with its fused epilogues: the stores share the registers of the
    mainloop, so a kernel change can spill here and nowhere else (the private cache builds with
    the ptxas local-memory check; sass_of checks the SASS)."""
    n, k = (1536, 2048) if epilogue != "row_scale" else (2048, 768)  # Qwen3-30B's experts
    m = 128 * rows if kind == "m_grouped_offsets" else rows
    desc = GemmDesc(kind, m, n, k, 128, ab_dtype="fp8_fp4", expected_m=rows, weights="prepared",
                    epilogue=epilogue)  # fmt: skip
    config = select_config(desc, SM90)
    sass = sass_of(kernel_spec(desc, config))
    assert "QGMMA" in sass and "PRMT" in sass, "FP8 wgmma on table-converted weights"
    if epilogue != "row_scale":
        assert "MUFU.EX2" in sass, "the activation's exponential"
