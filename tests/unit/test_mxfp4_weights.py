"""prepare_mxfp4_weights and its inverse without a GPU (one CUDA test): the SM90 prepared layout
(python/moegemm/api/mxfp4_weights.py) round-trips exactly, keeps every dequantized value, flags
the 64-row blocks that take the kernel's exact path, moves the scale bytes of all-zero blocks
next to their neighbours', and refuses what the kernels do not take. The table conversion of
the layout against dequantize_mxfp4: tests/compile/test_fp4_table_host.py."""

from __future__ import annotations

import pytest
import torch

import moegemm
from moegemm import quant
from moegemm.api.mxfp4_weights import EXACT_FLAG, SM90_ROW_BLOCK, unprepare_mxfp4_weights

U8 = torch.uint8


def random_pair(g: int, n: int, k: int, seed: int, low: int = 100, high: int = 140):
    gen = torch.Generator().manual_seed(seed)
    b = torch.randint(0, 256, (g, n, k // 2), generator=gen, dtype=U8)
    sfb = torch.randint(low, high, (g, n, k // 32), generator=gen, dtype=U8)
    return b, sfb


@pytest.mark.parametrize("shape", [(1, 64, 128), (3, 192, 2880), (2, 128, 96), (1, 64, 32)])
def test_prepare_round_trips_exactly(shape: tuple[int, int, int]) -> None:
    g, n, k = shape
    b, sfb = random_pair(g, n, k, 5)
    weights = moegemm.prepare_mxfp4_weights(b, sfb)
    assert isinstance(weights, moegemm.Mxfp4Weights) and weights.prepared
    num_kb = -(-k // 128)
    assert weights.b.shape == (g, n, 64 * num_kb) and weights.b.is_contiguous()
    assert weights.sfb.shape == (g, 2 * num_kb, n) and weights.sfb.dtype == torch.int32
    assert weights.k == k
    b2, sfb2 = unprepare_mxfp4_weights(weights)
    assert torch.equal(b2, b) and torch.equal(sfb2, sfb)
    # A copy (another device, a checkpoint) keeps everything: the tensors are whole.
    copied = moegemm.Mxfp4Weights(weights.b.clone(), weights.sfb.clone(), k=k)
    assert torch.equal(unprepare_mxfp4_weights(copied)[0], b)
    if k % 128:  # without k the padded codes come back: K rounded up to 128, zero codes
        padded, _ = unprepare_mxfp4_weights(moegemm.Mxfp4Weights(weights.b, weights.sfb))
        assert torch.equal(padded[..., : k // 2], b) and not padded[..., k // 2 :].any()
    assert unprepare_mxfp4_weights(moegemm.Mxfp4Weights(b, sfb, prepared=False))[0] is b


@pytest.mark.parametrize("lead", [(5,), (2, 3), ()])
def test_prepare_in_passes_equals_one_pass(lead: tuple[int, ...], monkeypatch) -> None:
    """The codes are reordered a few matrices a pass (bounded temporaries for a whole layer's
    experts): any pass size gives the same tensors, leading dims and a single matrix alike."""
    from moegemm.api import mxfp4_weights

    b, sfb = random_pair(max(1, int(torch.tensor(lead).prod())), 128, 2880, 11)
    b, sfb = b.reshape(*lead, 128, 1440), sfb.reshape(*lead, 128, 90)
    whole = moegemm.prepare_mxfp4_weights(b, sfb)
    monkeypatch.setattr(mxfp4_weights, "PREPARE_CHUNK_BYTES", 128 * 1536 * 2)  # two a pass
    in_passes = moegemm.prepare_mxfp4_weights(b, sfb)
    monkeypatch.setattr(mxfp4_weights, "PREPARE_CHUNK_BYTES", 1)  # one a pass
    one_each = moegemm.prepare_mxfp4_weights(b, sfb)
    for w in (in_passes, one_each):
        assert torch.equal(w.b, whole.b) and torch.equal(w.sfb, whole.sfb)
    assert torch.equal(unprepare_mxfp4_weights(one_each)[0], b)


def test_code_bytes_sit_where_the_kernels_load_them() -> None:
    """The module doc's byte order, independently of the inverse: 64-row block nb's k-block kb is
    the 4096 contiguous bytes at (nb * KB + kb) * 4096 of its group (one TMA box piece), thread
    t's word i at (i / 4) * 2048 + 16 t + 4 (i % 4), nibble c (c < 4) row r's magnitude of
    k = 32 j + 16 q + 4 (t % 4) + c (i = 2 j + q), nibble 4 + c row r + 8's, and the sign of row
    r's code c at bit 8 c + 3, of row r + 8's at 8 c + 7."""
    g, n, k = 2, 192, 384
    b, sfb = random_pair(g, n, k, 11)
    flat = moegemm.prepare_mxfp4_weights(b, sfb).b.flatten(-2)  # [G, N * Kp / 2]
    codes = torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2).long()  # [G, N, K] nibbles
    t = torch.arange(128).view(128, 1, 1)
    i = torch.arange(8).view(1, 8, 1)
    c = torch.arange(4).view(1, 1, 4)
    r = 16 * (t // 32) + (t % 32) // 4
    kk = 32 * (i // 2) + 16 * (i % 2) + 4 * (t % 4) + c
    for grp, nb, kb in ((0, 0, 0), (1, 2, 1), (1, 1, 2)):
        block = flat[grp, (nb * 3 + kb) * 4096 : (nb * 3 + kb + 1) * 4096].long()
        at = (i // 4) * 2048 + 16 * t + 4 * (i % 4)  # [128, 8, 1] word byte offsets
        word = sum(block[at + q] << (8 * q) for q in range(4))  # [128, 8, 1]
        rows = 64 * nb + r
        lo = codes[grp, rows, 128 * kb + kk]  # [128, 8, 4]
        hi = codes[grp, rows + 8, 128 * kb + kk]
        assert torch.equal((word >> (4 * c)) & 7, lo & 7)
        assert torch.equal((word >> (4 * c + 16)) & 7, hi & 7)
        assert torch.equal((word >> (8 * c + 3)) & 1, lo >> 3)
        assert torch.equal((word >> (8 * c + 7)) & 1, hi >> 3)


def test_prepare_keeps_dequantized_values() -> None:
    w = torch.randn(2, 64, 96) * torch.logspace(-4, 4, 96)
    b, sfb = quant.quantize_mxfp4(w)
    back, sfb2 = unprepare_mxfp4_weights(moegemm.prepare_mxfp4_weights(b, sfb))
    assert torch.equal(quant.dequantize_mxfp4(back, sfb2), quant.dequantize_mxfp4(b, sfb))


def test_blocks_outside_the_window_take_the_exact_path() -> None:
    n, k = 128, 256
    b, sfb = random_pair(1, n, k, 3, 120, 130)
    sfb[0, 70, 1] = sfb[0, 70, 0:4].max() - 12  # 13 binades in row 70's first k-block
    sfb[0, 5, 4:8] = 3  # a top below 7: 2^(top - 133) is no normal float
    weights = moegemm.prepare_mxfp4_weights(b, sfb)
    flags = (weights.sfb[0, :2] & EXACT_FLAG) != 0  # [KB, N]
    expected = torch.zeros(2, n, dtype=torch.bool)
    expected[0, 64:] = True  # the whole 64-row block of row 70
    expected[1, :64] = True  # the block of row 5, second k-block
    assert torch.equal(flags, expected)
    assert torch.equal(unprepare_mxfp4_weights(weights)[1], sfb)  # the scale plane


def test_offsets_words_of_a_row() -> None:
    """Row 9 (column 16 * 0 + 2 * 1 + 1 = 3 of its block), scale bytes 121, 119, 111, 116 in a
    64-row block whose largest byte is 122 (row 40): offsets s - 122 + 12 = 11, 9, 1, 6, and
    the block's float 2^(122 - 133) on every row."""
    b, sfb = random_pair(1, 64, 128, 1, 112, 121)
    sfb[0, 9] = torch.tensor([121, 119, 111, 116], dtype=U8)
    sfb[0, 40, 2] = 122
    words = moegemm.prepare_mxfp4_weights(b, sfb).sfb[0, 0].long() & 0xFFFFFFFF
    word = int(words[3])
    assert [(word >> (16 + 4 * j)) & 0xF for j in range(4)] == [11, 9, 1, 6]
    assert word & EXACT_FLAG == 0  # the block's bytes within 12 binades
    halves = torch.tensor((words & 0xFFFF).tolist(), dtype=torch.int32) << 16
    assert (halves.view(torch.float32) == 2.0 ** (122 - 133)).all()  # one top per block


def test_prepare_checks() -> None:
    b, sfb = random_pair(2, 64, 64, 2)
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
    with pytest.raises(ValueError, match=r"^b must have shape \(2, 64, 32\)"):
        prepare(torch.zeros(2, 64, 48, dtype=U8), sfb)
    with pytest.raises(ValueError, match="^sfb must have K/32 > 0 blocks"):
        prepare(torch.zeros(2, 64, 0, dtype=U8), torch.zeros(2, 64, 0, dtype=U8))
    with pytest.raises(ValueError, match="^b must be"):
        prepare(torch.zeros(32, dtype=U8), torch.zeros(2, dtype=U8))
    with pytest.raises(ValueError, match=f"multiple of {SM90_ROW_BLOCK}"):
        prepare(torch.zeros(1, 96, 64, dtype=U8), torch.full((1, 96, 4), 127, dtype=U8))
    strided = torch.full((2, 64, 4), 120, dtype=U8)[..., ::2]
    out = prepare(b, strided)
    assert torch.equal(unprepare_mxfp4_weights(out)[1], strided)
    with pytest.raises(TypeError, match="^weights must be a moegemm.Mxfp4Weights"):
        unprepare_mxfp4_weights((b, sfb))


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100f"])
def test_prepare_refuses_what_the_gemms_do_not_take(arch: str) -> None:
    """N must be a positive multiple of 8 and b's rows readable by the GEMMs' TMA, on either
    arch (SM100 pads N itself, so only this check stands between N = 100 and a kernel)."""
    prepare = moegemm.prepare_mxfp4_weights
    for n in (100, 0):
        b, sfb = torch.zeros(1, n, 32, dtype=U8), torch.full((1, n, 2), 127, dtype=U8)
        with pytest.raises(ValueError, match=rf"^N \(b.shape\[-2\]\) must be a positive "
                           rf"multiple of 8, got {n}$"):  # fmt: skip
            prepare(b, sfb, arch=arch)
    b, sfb = random_pair(2, 64, 64, 2)
    with pytest.raises(ValueError, match=r"^b must be row-major"):
        prepare(torch.zeros(2, 64, 64, dtype=U8)[..., ::2], sfb, arch=arch)
    with pytest.raises(ValueError, match=r"^b row stride must be a multiple of 16 bytes"):
        prepare(torch.zeros(2, 64, 40, dtype=U8)[..., :32], sfb, arch=arch)
    with pytest.raises(ValueError, match=r"^b must be row-major"):
        prepare(torch.zeros(64, 32, dtype=U8).t().contiguous().t(), sfb[0], arch=arch)
    with pytest.raises(ValueError, match=r"^b must be contiguous"):
        prepare(torch.zeros(2, 2, 64, 64, dtype=U8)[..., ::2], sfb.expand(2, 2, 64, 2), arch=arch)
    padded = torch.zeros(64, 48, dtype=U8)[:, :32]  # padded rows of 48 bytes: the GEMMs take them
    padded.copy_(b[0])
    assert torch.equal(unprepare_mxfp4_weights(prepare(padded, sfb[0]))[0], b[0])


@pytest.mark.parametrize("arch", ["sm_90a", "sm_100f"])
def test_prepare_takes_gpt_oss_blocks_view(arch: str) -> None:
    """gpt-oss ships b as blocks [E, N, K/32, 16]: taken as the [E, N, K/2] bytes it views, as
    dequantize_mxfp4 and prepare_moe_weights take it."""
    b, sfb = random_pair(2, 64, 96, 4)
    blocks = b.unflatten(-1, (3, 16))
    got, want = (
        moegemm.prepare_mxfp4_weights(blocks, sfb, arch),
        moegemm.prepare_mxfp4_weights(b, sfb, arch),
    )
    assert torch.equal(got.b, want.b) and torch.equal(got.sfb, want.sfb) and got.k == want.k
    assert torch.equal(quant.dequantize_mxfp4(blocks, sfb), quant.dequantize_mxfp4(b, sfb))
    with pytest.raises(ValueError, match=r"^b in the blocks layout \[.., N, K/32, 16\] must be"):
        moegemm.prepare_mxfp4_weights(b.unflatten(-1, (3, 16))[:, :32], sfb, arch)


@pytest.mark.gpu
def test_prepare_on_cuda_equals_cpu() -> None:
    b, sfb = random_pair(4, 128, 2880, 7, 0, 255)
    cpu = moegemm.prepare_mxfp4_weights(b, sfb)
    gpu = moegemm.prepare_mxfp4_weights(b.cuda(), sfb.cuda())
    assert torch.equal(gpu.b.cpu(), cpu.b) and torch.equal(gpu.sfb.cpu(), cpu.sfb)


def test_all_zero_blocks_take_their_neighbours_scale() -> None:
    """A 32-block of zero codes (quantize_mxfp4 gives it byte 0) gets the largest byte of its
    row's other blocks in its 128 of K, else of its row, else the median row maximum of the
    matrix at that k-block: its values stay zero, and no 64-row block takes the kernel's exact
    path for it."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(2, 64, 320, generator=gen) * 0.02
    w[0, 5] = 0  # a whole row
    w[0, 17, 64:96] = 0  # one block
    w[1, 40, :128] = 0  # a whole 128-K block of a row
    w[1, 41, 128:] = -0.0  # negative zeros are zero codes too
    b, sfb = quant.quantize_mxfp4(w)
    assert (sfb[0, 5] == 0).all() and sfb[0, 17, 2] == 0
    prepared = moegemm.prepare_mxfp4_weights(b, sfb)
    _, new = unprepare_mxfp4_weights(prepared)
    assert torch.equal(sfb, quant.quantize_mxfp4(w)[1])  # input untouched
    assert torch.equal(quant.dequantize_mxfp4(b, new), quant.dequantize_mxfp4(b, sfb))
    assert new[0, 17, 2] == sfb[0, 17, [0, 1, 3]].max()
    assert (new[1, 40, :4] == sfb[1, 40, 4:].max()).all()
    assert (new[0, 5] > 100).all()  # the matrix's median row maximum, not 0
    changed = new != sfb
    assert torch.equal(changed, (b.unflatten(-1, (10, 16)) & 0x77 == 0).all(-1))
    assert not ((prepared.sfb[:, :3] & EXACT_FLAG) != 0).any()
    # The same weights without the rebasing would take the exact path.
    flagged = moegemm.prepare_mxfp4_weights(b | 0x11, sfb)  # no zero block left
    assert ((flagged.sfb[:, :3] & EXACT_FLAG) != 0).any()
