"""Compile-only builds of the SM90 FP8 x FP4 kernels (impls/sm90_fp8_fp4_grouped_gemm.cuh)
through the real JIT path, checked in the cubin: one kernel, QGMMA batched, the E2M1 -> E4M3
table lookups (PRMT) and 16-byte tile stores of the transform, no local memory. Every tile
scheduler, both weight layouts, one and two math warpgroups, tile widths 16 to 192, register
and TMA-store epilogues. Needs nvcc, not a GPU."""

from __future__ import annotations

import pytest
from test_compile_only import dump_sass

from moegemm.heuristics import SM90, GemmDesc, select_config
from moegemm.heuristics.sm90_fp8_fp4 import make_config, max_stages
from moegemm.jit import cache
from moegemm.jit.codegen import sm90_fp8_fp4_spec
from moegemm.jit.compiler import find_cuobjdump
from moegemm.jit.cubin import count_cubin_kernels

pytestmark = pytest.mark.nvcc


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")  # fails the build on local memory


def fp8_fp4_sass(spec) -> str:
    cubin_path = cache.build_or_load(spec)
    assert count_cubin_kernels(cubin_path.read_bytes()) == 1
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("cuobjdump not found: cubin built, SASS not inspected")
    return dump_sass(cuobjdump, cubin_path)


def assert_fp8_fp4_kernel(sass: str, block_n: int) -> None:
    assert "LDL" not in sass and "STL" not in sass, "no local-memory traffic"
    qgmma = [line for line in sass.splitlines() if "QGMMA." in line]
    assert qgmma and all(f"QGMMA.64x{block_n}x32.F32.E4M3.E4M3" in q for q in qgmma)
    # Four k32 steps a batch under one scoreboard: not serialized.
    assert 4 * sum("gsb0" in line for line in qgmma) <= len(qgmma), "wgmma serialized"
    assert "HGMMA" not in sass
    assert "PRMT" in sass, "table lookups of the conversion"
    assert "STS.128" in sass, "the E4M3 tile written 16 bytes a lane"
    assert "REDUX" in sass, "the passes' base exponent agreed by warp reductions"


VARIANTS = [
    ("bf16_gemm_nt", 128, 128, 64, "raw"),
    ("m_grouped_contiguous", 128, 160, 32, "prepared"),
    ("m_grouped_offsets", 64, 192, 0, "raw"),
    ("m_grouped_offsets", 64, 16, 16, "prepared"),
    ("m_grouped_masked", 128, 144, 16, "raw"),
    ("m_grouped_masked", 64, 64, 0, "prepared"),
]


@pytest.mark.parametrize("kind,block_m,block_n,store_cols,weights", VARIANTS)
def test_kernel_compiles_for_sm90a(
    kind: str, block_m: int, block_n: int, store_cols: int, weights: str
) -> None:
    stages = max_stages(block_m, block_n, store_cols, SM90)
    config = make_config(block_m, block_n, stages, SM90, store_cols)
    spec = sm90_fp8_fp4_spec(config, kind, weights)
    assert f"kPreparedWeights = {'true' if weights == 'prepared' else 'false'};" in spec.source
    sass = fp8_fp4_sass(spec)
    assert_fp8_fp4_kernel(sass, block_n)
    assert ("UTMASTG" in sass) == bool(store_cols)


def test_heuristic_picks_compile() -> None:
    """The configs the heuristics choose at decode and prefill build for both layouts."""
    for kind, m, expected in (("m_grouped_offsets", 8 * 32, 8), ("m_grouped_masked", 512, 64)):
        for weights in ("raw", "prepared"):
            desc = GemmDesc(
                kind, m, 4096, 7168, 32, ab_dtype="fp8_fp4", expected_m=expected, weights=weights
            )
            config = select_config(desc, SM90)
            sass = fp8_fp4_sass(sm90_fp8_fp4_spec(config, kind, weights))
            assert_fp8_fp4_kernel(sass, config.layout.block_n)


def test_bad_requests_are_refused() -> None:
    config = make_config(128, 128, 4, SM90, 0)
    with pytest.raises(ValueError, match="weights"):
        sm90_fp8_fp4_spec(config, "m_grouped_offsets", "fp4")
    with pytest.raises(ValueError, match="kind"):
        sm90_fp8_fp4_spec(config, "k_grouped", "raw")
