"""The prepared MXFP4 layout and its table conversion (python/moegemm/api/mxfp4_weights.py,
include/moegemm/transform/fp4_table.cuh): the device conversion compiled for the host by nvcc
(prmt emulated) on every thread's words of prepare_mxfp4_weights' output reproduces
dequantize_mxfp4 bit for bit, for every code and every offset of the table window (the layout's
other rules: tests/unit/test_mxfp4_weights.py). Needs nvcc, not a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from moegemm import prepare_mxfp4_weights
from moegemm.api.mxfp4_weights import EXACT_FLAG
from moegemm.quant import dequantize_mxfp4

INCLUDE = Path(__file__).resolve().parents[2] / "include"

pytestmark = pytest.mark.nvcc

_PROGRAM = r"""
#include <cstdio>
#include <moegemm/transform/fp4_table.cuh>
int main() {
  unsigned w[8], r, r8;
  while (std::scanf("%u %u %u %u %u %u %u %u %u %u", &w[0], &w[1], &w[2], &w[3], &w[4], &w[5],
                    &w[6], &w[7], &r, &r8) == 10) {
    uint32_t words[8], a[16];
    for (int i = 0; i < 8; ++i) words[i] = w[i];
    moegemm::fp4::convert_k_block(words, r, r8, a);
    for (int i = 0; i < 16; ++i) std::printf("%u ", a[i]);
    std::printf("%a %a\n", moegemm::fp4::row_scale_of(r), moegemm::fp4::row_scale_of(r8));
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def converter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("nvcc not found")
    work = tmp_path_factory.mktemp("fp4table")
    src = work / "table.cu"
    src.write_text(_PROGRAM)
    exe = work / "table"
    subprocess.run(
        [nvcc, "-std=c++17", "-O1", f"-I{INCLUDE}", str(src), "-o", str(exe)],
        check=True,
        capture_output=True,
    )
    return exe


def thread_inputs(weights, group: int, rb: int, kb: int) -> list[tuple[int, ...]]:
    """Per thread t of one (64-row, 128-K) block: its 8 code words and its rows' offsets
    words, read from the prepared tensors as the kernel's loads do."""
    codes, words = weights.b, weights.sfb
    num_kb = codes.shape[-1] // 64  # a row block's k-blocks: 4096 contiguous bytes each
    first = (rb * num_kb + kb) * 4096
    block = codes[group].reshape(-1)[first : first + 4096]
    flat = block.to(torch.int64)
    word_of = lambda off: int(sum(int(flat[off + i]) << (8 * i) for i in range(4)))
    out = []
    for t in range(128):
        w = [word_of((i // 4) * 2048 + 16 * t + 4 * (i % 4)) for i in range(8)]
        pair = 8 * (t // 32) + (t % 32) // 4
        col = rb * 64 + 2 * pair
        ow = words[group, kb, col : col + 2].tolist()
        out.append((*w, ow[0] & 0xFFFFFFFF, ow[1] & 0xFFFFFFFF))
    return out


def run(exe: Path, jobs: list[tuple[int, ...]]) -> list[list[str]]:
    stdin = "".join(" ".join(str(x) for x in job) + "\n" for job in jobs)
    out = subprocess.run([str(exe)], input=stdin, capture_output=True, text=True, check=True)
    return [line.split() for line in out.stdout.splitlines()]


def converted_block(exe: Path, weights, group: int, rb: int, kb: int) -> torch.Tensor:
    """What the wgmma sees of one block, times the promotion's row factor: [64, 128] floats."""
    jobs = thread_inputs(weights, group, rb, kb)
    values = torch.zeros(64, 128, dtype=torch.float64)
    for t, line in enumerate(run(exe, jobs)):
        regs = [int(x) for x in line[:16]]
        scales = [float.fromhex(line[16]), float.fromhex(line[17])]
        r = 16 * (t // 32) + (t % 32) // 4
        for reg, word in enumerate(regs):
            j, q, h = reg // 4, (reg // 2) % 2, reg % 2
            raw = torch.tensor([(word >> (8 * c)) & 0xFF for c in range(4)], dtype=torch.uint8)
            e4m3 = raw.view(torch.float8_e4m3fn).double()
            k0 = 32 * j + 16 * q + 4 * (t % 4)
            values[r + 8 * h, k0 : k0 + 4] = e4m3 * scales[h]
    return values


def window_scales(n: int, nb: int, seed: int) -> torch.Tensor:
    """Scale bytes 0..11 binades below one top per (64-row block, 128 of K), the layout's unit,
    so the offsets cover the whole window [1, 12]; every row's first 32-block holds the top."""
    g = torch.Generator().manual_seed(seed)
    top = torch.randint(110, 140, (1, n // 64, 1, -(-nb // 4)), generator=g)
    top = top.expand(1, n // 64, 64, top.shape[-1]).reshape(1, n, -1).repeat_interleave(4, -1)
    drop = torch.randint(0, 12, (1, n, top.shape[-1]), generator=g)
    drop[..., 0::4] = 0  # block 0 holds the top
    return (top - drop)[..., :nb].to(torch.uint8)


def every_code(n: int, k: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    b = torch.randint(0, 256, (1, n, k // 2), generator=g, dtype=torch.uint8)
    b[0, 0, :8] = torch.tensor([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE], dtype=torch.uint8)
    return b


@pytest.mark.parametrize("k", [256, 160])  # whole k-blocks, and K % 128 != 0 (zero-code tail)
def test_table_conversion_is_dequantize_bit_for_bit(converter: Path, k: int) -> None:
    n = 64
    b, sfb = every_code(n, k, 1), window_scales(n, k // 32, 2)
    weights = prepare_mxfp4_weights(b, sfb)
    offsets_seen = set()
    want = dequantize_mxfp4(b[0], sfb[0]).double()
    for kb in range(-(-k // 128)):
        assert (weights.sfb[0, kb] & EXACT_FLAG).eq(0).all(), "every row fits the window"
        got = converted_block(converter, weights, 0, 0, kb)
        width = min(128, k - 128 * kb)
        assert torch.equal(got[:, :width], want[:, 128 * kb : 128 * kb + width]), kb
        assert torch.equal(got[:, width:], torch.zeros_like(got[:, width:]))
        for word in weights.sfb[0, kb].tolist():
            offsets_seen |= {((word & 0xFFFFFFFF) >> (16 + 4 * j)) & 0xF for j in range(4)}
    assert offsets_seen == set(range(1, 13)), sorted(offsets_seen)
