"""The fused MoE layer's FP8 rows on SM100 carry power-of-two scales (the SM100 FP8 x FP4 kernel
reads each per-128 scale as a UE8M0 exponent): moe/fp8_rows.cuh's block_scale<true> is compiled
for the host and compared bit for bit with per_token_cast_to_fp8(..., ue8m0=True)'s rule, and
block_scale<false> with the plain rule, over amax values that straddle every rounding case.
The quantizing kernels built for sm_100f use the UE8M0 form; those for sm_90a do not."""

from __future__ import annotations

import math
import struct
import subprocess

import pytest

from moegemm.jit.codegen import moe_quantize_rows_spec, moe_route_gather_spec
from moegemm.jit.compiler import find_nvcc, include_flags

pytestmark = pytest.mark.nvcc  # conftest skips these where nvcc is missing

_AMAXES = [
    0.0, 1e-6, 1e-4, 1.00001e-4, 0.5, 1.0, 3.0, 447.0, 448.0, 449.0, 896.0, 1e30, 3.3e38,
    float("inf"), float("nan"), 2.0**-20, 2.0**-20 * 448.0, 7.0 * 448.0, 65504.0,
]  # fmt: skip

_PROGRAM = r"""
#include <cstdio>
#include <cstring>
#include <moegemm/moe/fp8_rows.cuh>
int main() {
  unsigned int bits;
  float amax, s;
  while (std::scanf("%x", &bits) == 1) {
    std::memcpy(&amax, &bits, 4);
    s = moegemm::moe::block_scale<false>(amax);
    unsigned int plain; std::memcpy(&plain, &s, 4);
    s = moegemm::moe::block_scale<true>(amax);
    unsigned int pow2; std::memcpy(&pow2, &s, 4);
    std::printf("%08x %08x\n", plain, pow2);
  }
}
"""


def _bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def test_block_scale_matches_per_token_cast_to_fp8(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    from moegemm.quant import FP8_AMAX_EPS, FP8_E4M3_MAX, _ceil_pow2

    source = tmp_path / "block_scale.cu"
    source.write_text(_PROGRAM)
    binary = tmp_path / "block_scale"
    command = [str(find_nvcc()), "-std=c++17", *include_flags(), str(source), "-o", str(binary)]
    proc = subprocess.run(command, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    amaxes = torch.tensor(_AMAXES, dtype=torch.float32)
    stdin = "\n".join(f"{_bits(a):08x}" for a in amaxes.tolist()) + "\n"
    out = subprocess.run([str(binary)], input=stdin, capture_output=True, text=True, check=True)
    got = [tuple(int(w, 16) for w in line.split()) for line in out.stdout.splitlines()]
    # per_token_cast_to_fp8's rule on the same amaxes (NaN kept by clamp, as torch's amax does)
    plain = amaxes.clamp(min=FP8_AMAX_EPS) * (1.0 / FP8_E4M3_MAX)
    pow2 = _ceil_pow2(plain.clone())
    want = list(zip(plain.view(torch.int32).tolist(), pow2.view(torch.int32).tolist()))
    want = [(p & 0xFFFFFFFF, q & 0xFFFFFFFF) for p, q in want]
    assert got == want
    # Every finite UE8M0 scale is a power of two no smaller than the plain one.
    for (p, q), a in zip(got, _AMAXES):
        if math.isfinite(a):
            assert (
                q & 0x7FFFFF == 0
                and struct.unpack("<f", struct.pack("<I", q))[0]
                >= (struct.unpack("<f", struct.pack("<I", p))[0])
            )


def test_sm100_quantizing_kernels_use_ue8m0_scales() -> None:
    for spec in (moe_route_gather_spec("sm_100f", fp8=True), moe_quantize_rows_spec("sm_100f")):
        assert spec.name.endswith("_ue8m0") and ", true>(" in spec.source, spec.source
    for spec in (moe_route_gather_spec("sm_90a", fp8=True), moe_quantize_rows_spec("sm_90a")):
        assert "ue8m0" not in spec.name and ", false>(" in spec.source, spec.source
    assert "ue8m0" not in moe_route_gather_spec("sm_100f", fp8=False).name
