"""The FP8 x FP4 kernels' E2M1 -> E4M3 conversion (include/moegemm/transform/fp4_to_fp8.cuh),
the device code itself compiled for the host by nvcc (prmt emulated), against
`dequantize_mxfp4`: every code in every nibble position, every exponent offset of a table, the
checkpoint's nibble layout (the prepared layout's table conversion:
tests/compile/test_fp4_table_host.py). Needs nvcc, not a GPU."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from moegemm.quant import dequantize_mxfp4

INCLUDE = Path(__file__).resolve().parents[2] / "include"
NUM_OFFSETS = 15

pytestmark = pytest.mark.nvcc

_PROGRAM = r"""
#include <cstdio>
#include <moegemm/transform/fp4_to_fp8.cuh>
int main() {
  unsigned w;
  unsigned o;
  while (std::scanf("%u %u", &w, &o) == 2) {
    unsigned lo, hi, r0, r1;
    moegemm::fp4::table_words(o, lo, hi);
    moegemm::fp4::convert_raw(w, lo, hi, r0, r1);
    // The halves alone (the register-operand MMA's conversion) must match the whole.
    if (moegemm::fp4::convert_raw_half(w, lo, hi, 0) != r0 ||
        moegemm::fp4::convert_raw_half(w, lo, hi, 1) != r1) {
      std::printf("half mismatch\n");
      return 3;
    }
    std::printf("%u %u\n", r0, r1);
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def converter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    work = tmp_path_factory.mktemp("fp4conv")
    src = work / "convert.cu"
    src.write_text(_PROGRAM)
    exe = work / "convert"
    subprocess.run(
        [nvcc, "-std=c++17", "-O1", f"-I{INCLUDE}", str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
    )
    return exe


def run_converter(exe: Path, jobs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    stdin = "".join(f"{w} {o}\n" for w, o in jobs)
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True)
    return [tuple(int(x) for x in line.split()) for line in out.stdout.splitlines()]


def word_bytes(words: list[int]) -> torch.Tensor:
    return torch.tensor(
        [[(w >> (8 * i)) & 0xFF for i in range(4)] for w in words], dtype=torch.uint8
    ).flatten()


def expected_values(w: int, o: int) -> torch.Tensor:
    """The 8 codes of raw word w times 2^(6 - o), exactly (dequantize_mxfp4 with scale byte
    127 + 6 - o)."""
    packed = word_bytes([w]).view(1, 4)
    # dequantize_mxfp4 takes 32-code blocks: pad the 8 codes to one block.
    block = torch.zeros(1, 16, dtype=torch.uint8)
    block[:, :4] = packed
    scale = torch.tensor([[127 + 6 - o]], dtype=torch.uint8)
    return dequantize_mxfp4(block, scale)[0, :8]


def as_e4m3(words: tuple[int, int]) -> torch.Tensor:
    return word_bytes(list(words)).view(torch.float8_e4m3fn).float()


def test_every_code_every_position_every_offset(converter: Path) -> None:
    # Words holding code c in every nibble, and words with all 16 codes spread over positions.
    rng = random.Random(0)
    words = [int(f"{c:x}" * 8, 16) for c in range(16)]
    for shift in range(8):
        codes = [(shift + j) % 16 for j in range(8)]
        words.append(sum(c << (4 * j) for j, c in enumerate(codes)))
        codes = [(shift + 8 + j) % 16 for j in range(8)]
        words.append(sum(c << (4 * j) for j, c in enumerate(codes)))
    words += [rng.getrandbits(32) for _ in range(64)]
    jobs = [(w, o) for w in words for o in range(NUM_OFFSETS)]
    raw_out = run_converter(converter, jobs)
    assert len(raw_out) == len(jobs)
    for (w, o), raw in zip(jobs, raw_out):
        want = expected_values(w, o)
        got_raw = as_e4m3(raw[:2])
        # Exact, and the sign of zero too (code 8 is -0: E4M3 0x80).
        assert torch.equal(got_raw, want), (hex(w), o, got_raw, want)
        assert torch.equal(torch.signbit(got_raw), torch.signbit(want)), (hex(w), o)


def test_offsets_cover_exactly_the_exact_window(converter: Path) -> None:
    """Offset 0 maps the largest code to 6 * 2^6 = 384 and offset 14 the smallest nonzero one
    to 0.5 * 2^-8 = 2^-9, E4M3's smallest subnormal: the 15 tables span the whole window in
    which every E2M1 value times a power of two is exact in E4M3."""
    (top,) = run_converter(converter, [(0x77777777, 0)])
    assert as_e4m3(top[:2]).tolist() == [384.0] * 8
    (bottom,) = run_converter(converter, [(0x11111111, NUM_OFFSETS - 1)])
    assert as_e4m3(bottom[:2]).tolist() == [2.0**-9] * 8
