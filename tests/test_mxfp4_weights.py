"""prepare_mxfp4_weights and its inverse without a GPU (one CUDA test): the prepared nibble
layout against a per-nibble reference of its contract, round trips, dequantized values kept,
argument checks."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

import moegemm
from moegemm import quant
from moegemm.api.mxfp4_weights import SIGN_SOURCE, unprepare_mxfp4_weights

U8 = torch.uint8


def t(*shape: int, dtype: torch.dtype = U8) -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype)


def reference_prepare(b: torch.Tensor) -> torch.Tensor:
    """The contract's layout, one nibble at a time on little-endian 32-bit words."""
    flat = b.reshape(-1).tolist()
    out = []
    for w in range(0, len(flat), 4):
        word = flat[w] | flat[w + 1] << 8 | flat[w + 2] << 16 | flat[w + 3] << 24
        codes = [(word >> (4 * j)) & 0xF for j in range(8)]
        prepared = 0
        for k in range(8):
            s = k // 2 if k % 2 == 0 else 4 + (k - 1) // 2
            nibble = (codes[k] & 7) | (codes[s] & 8)
            prepared |= nibble << (4 * k)
        out += [(prepared >> (8 * i)) & 0xFF for i in range(4)]
    return torch.tensor(out, dtype=U8).reshape(b.shape)


@pytest.mark.parametrize("shape", [(8, 16), (3, 16, 64), (2, 8, 144)])
def test_prepare_matches_the_per_nibble_reference_and_round_trips(shape) -> None:
    gen = torch.Generator().manual_seed(sum(shape))
    b = torch.randint(0, 256, shape, dtype=U8, generator=gen)
    sfb = torch.randint(0, 255, (*shape[:-1], shape[-1] // 16), dtype=U8, generator=gen)
    w = moegemm.prepare_mxfp4_weights(b, sfb)
    assert isinstance(w, moegemm.Mxfp4Weights) and w.prepared
    assert w.b.shape == b.shape and w.b.dtype == U8 and w.b.is_contiguous()
    assert torch.equal(w.b, reference_prepare(b))
    assert w.sfb is sfb  # unit stride along K/32: the same tensor
    back, back_sfb = unprepare_mxfp4_weights(w)
    assert torch.equal(back, b) and back_sfb is sfb
    # Only signs move: the magnitudes of every nibble are the checkpoint's.
    assert torch.equal(w.b & 0x77, b & 0x77)
    assert unprepare_mxfp4_weights(moegemm.Mxfp4Weights(b, sfb, prepared=False))[0] is b


def test_prepare_sign_positions_of_the_contract() -> None:
    """Code j < 4's sign at bit 8j + 3, code 4 + j's at bit 8j + 7 of its word."""
    for j in range(8):
        word = 8 << (4 * j)  # code j = -0, every other code +0
        b = torch.tensor([(word >> (8 * i)) & 0xFF for i in range(4)] * 4, dtype=U8).view(1, 16)
        out = moegemm.prepare_mxfp4_weights(b, torch.zeros(1, 1, dtype=U8)).b[0, :4].tolist()
        got = sum(byte << (8 * i) for i, byte in enumerate(out))
        assert got == 1 << (8 * j + 3 if j < 4 else 8 * (j - 4) + 7), j
        assert SIGN_SOURCE[(8 * j + 3 if j < 4 else 8 * (j - 4) + 7) // 4] == j


def test_prepare_keeps_dequantized_values() -> None:
    w = torch.randn(2, 16, 96) * torch.logspace(-4, 4, 96)
    b, sfb = quant.quantize_mxfp4(w)
    back, _ = unprepare_mxfp4_weights(moegemm.prepare_mxfp4_weights(b, sfb))
    assert torch.equal(quant.dequantize_mxfp4(back, sfb), quant.dequantize_mxfp4(b, sfb))


def test_prepare_checks() -> None:
    b, sfb = t(2, 8, 32, dtype=U8), t(2, 8, 2, dtype=U8)
    prepare = moegemm.prepare_mxfp4_weights
    nan = sfb.clone()
    nan[1, 3, 1] = 0xFF
    pattern = r"^sfb holds the NaN scale byte 0xFF \(first at index \(1, 3, 1\)\)"
    with pytest.raises(ValueError, match=pattern):
        prepare(b, nan)
    with pytest.raises(TypeError, match="^b must have dtype torch.uint8, got torch.int8"):
        prepare(b.to(torch.int8), sfb)
    with pytest.raises(TypeError, match="^sfb must be a torch.Tensor, got list"):
        prepare(b, sfb.tolist())
    with pytest.raises(ValueError, match=r"^b must have shape \(2, 8, 32\)"):
        prepare(t(2, 8, 48, dtype=U8), sfb)
    with pytest.raises(ValueError, match="^sfb must have K/32 > 0 blocks"):
        prepare(t(2, 8, 0, dtype=U8), t(2, 8, 0, dtype=U8))
    with pytest.raises(ValueError, match="^b must be"):
        prepare(t(32, dtype=U8), t(2, dtype=U8))
    strided = t(2, 8, 4, dtype=U8)[..., ::2]
    out = prepare(b, strided)
    assert out.sfb.is_contiguous() and torch.equal(out.sfb, strided)
    with pytest.raises(TypeError, match="^weights must be a moegemm.Mxfp4Weights"):
        unprepare_mxfp4_weights((b, sfb))


@pytest.mark.gpu
def test_prepare_on_cuda_equals_cpu() -> None:
    gen = torch.Generator().manual_seed(7)
    b = torch.randint(0, 256, (4, 64, 1440), dtype=U8, generator=gen)
    sfb = torch.randint(0, 255, (4, 64, 90), dtype=U8, generator=gen)
    cpu = moegemm.prepare_mxfp4_weights(b, sfb).b
    gpu = moegemm.prepare_mxfp4_weights(b.cuda(), sfb.cuda()).b
    assert torch.equal(gpu.cpu(), cpu)


def test_all_zero_blocks_take_their_neighbours_scale() -> None:
    """A 32-block of zero codes (quantize_mxfp4 gives it byte 0) gets the largest byte of its
    row's other blocks in its 128 of K, else of its row, else the median row maximum of the
    matrix at that k-block: its values stay zero, and no tile takes a second conversion pass
    for it (benchmarks/fp4_pass_fraction.py, the kernel's rule)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from fp4_pass_fraction import passes

    gen = torch.Generator().manual_seed(3)
    w = torch.randn(2, 64, 320, generator=gen) * 0.02
    w[0, 5] = 0  # a whole row
    w[0, 17, 64:96] = 0  # one block
    w[1, 40, :128] = 0  # a whole 128-K block of a row
    w[1, 41, 128:] = -0.0  # negative zeros are zero codes too
    b, sfb = quant.quantize_mxfp4(w)
    assert (sfb[0, 5] == 0).all() and sfb[0, 17, 2] == 0
    prepared = moegemm.prepare_mxfp4_weights(b, sfb)
    new = prepared.sfb
    assert new is not sfb and torch.equal(sfb, quant.quantize_mxfp4(w)[1])  # input untouched
    assert torch.equal(quant.dequantize_mxfp4(b, new), quant.dequantize_mxfp4(b, sfb))
    assert new[0, 17, 2] == sfb[0, 17, [0, 1, 3]].max()
    assert (new[1, 40, :4] == sfb[1, 40, 4:].max()).all()
    assert (new[0, 5] > 100).all()  # the matrix's median row maximum, not 0
    changed = new != sfb
    assert torch.equal(changed, (b.unflatten(-1, (10, 16)) & 0x77 == 0).all(-1))
    for g in range(2):
        assert int(passes(new[g], 64).max()) == 1
        assert int(passes(sfb[g], 64).max()) == 2
