"""moegemm.quant against an independent scalar implementation of the OCP MX v1.0 rules.

The reference below shares no code with moegemm.quant: it works on Python floats with
math.frexp and exact Fractions, rounds by comparing distances to every grid point, and breaks
ties by the even code index (the even mantissa bit), as OCP's roundTiesToEven specifies.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import pytest
import torch

from moegemm.quant import dequantize_mxfp4, per_token_cast_to_fp8, quantize_mxfp4

GRID = [Fraction(v) for v in ("0", "0.5", "1", "1.5", "2", "3", "4", "6")]


def ref_block(values: list[float]) -> tuple[int, list[int], list[float]]:
    """OCP MXFP4 of one 32-block: (scale byte, codes, dequantized values)."""
    amax = max(abs(v) for v in values)
    if amax == 0:
        exp = -127  # log2(0) = -inf, clamped to the smallest UE8M0 exponent
    else:
        _, ex = math.frexp(amax)  # amax = m * 2^ex, m in [0.5, 1): floor(log2 amax) = ex - 1
        exp = min(max(ex - 1 - 2, -127), 127)
    scale = Fraction(2) ** exp
    codes, deq = [], []
    for v in values:
        mag = abs(Fraction(v)) / scale
        if mag >= 6:
            idx = 7  # saturation
        else:
            dists = [abs(mag - g) for g in GRID]
            best = min(dists)
            tied = [i for i, d in enumerate(dists) if d == best]
            idx = tied[0] if len(tied) == 1 else next(i for i in tied if i % 2 == 0)
        neg = math.copysign(1.0, v) < 0
        codes.append(idx | (8 if neg else 0))
        val = float(GRID[idx] * scale)
        deq.append(-val if neg else val)
    return exp + 127, codes, deq


def ref_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes uint8 [..., K], sfb, dequantized float32) of w, block by block in plain Python."""
    rows = w.float().reshape(-1, 32).tolist()
    out = [ref_block(r) for r in rows]
    k = w.shape[-1]
    sfb = torch.tensor([o[0] for o in out], dtype=torch.uint8).reshape(*w.shape[:-1], k // 32)
    codes = torch.tensor([o[1] for o in out], dtype=torch.uint8).reshape(w.shape)
    deq = torch.tensor([o[2] for o in out], dtype=torch.float32).reshape(w.shape)
    return codes, sfb, deq


def unpack(b: torch.Tensor) -> torch.Tensor:
    """Codes of b [..., K/2] in element order, element 2i in the low nibble."""
    return torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2)


def f32(bits: int) -> float:
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def check_against_ref(w: torch.Tensor) -> None:
    b, sfb = quantize_mxfp4(w)
    codes, ref_sfb, ref_deq = ref_quantize(w)
    assert torch.equal(sfb, ref_sfb)
    assert torch.equal(unpack(b), codes)
    deq = dequantize_mxfp4(b, sfb)
    # Bitwise, so -0.0 and the FP32 subnormals are checked too.
    assert torch.equal(deq.view(torch.int32), ref_deq.view(torch.int32))


def block(values: list[float], fill: float = 0.0) -> list[float]:
    return values + [fill] * (32 - len(values))


# ---- hand-picked values -------------------------------------------------------------------


def test_ties_round_to_even_code() -> None:
    ties = [0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0]
    # amax 4 gives scale 2^0: the ties sit exactly between grid points.
    w = torch.tensor([block([4.0] + ties + [-t for t in ties])])
    b, sfb = quantize_mxfp4(w)
    assert sfb.tolist() == [[127]]
    # 0.25->0, 0.75->1 (idx 2), 1.25->1 (idx 2), 1.75->2 (idx 4), 2.5->2, 3.5->4 (idx 6), 5->4
    expect = [6, 0, 2, 2, 4, 4, 6, 6]
    assert unpack(b)[0, :15].tolist() == expect + [8 | i for i in expect[1:]]
    check_against_ref(w)
    # The same ties at other scales, and just off the ties (which must not round to even).
    for s in (2.0**-20, 2.0**-3, 2.0**4, 2.0**100):
        vals = [4.0] + ties + [t * (1 + 2**-20) for t in ties] + [t * (1 - 2**-20) for t in ties]
        check_against_ref(torch.tensor([block([v * s for v in vals])]))


def test_zero_blocks_and_negative_zero() -> None:
    w = torch.tensor([block([]), block([], -0.0), block([0.0, -0.0, 1.0, -0.0])])
    b, sfb = quantize_mxfp4(w)
    assert sfb[:, 0].tolist() == [0, 0, 125]  # all-zero blocks: byte 0 (2^-127)
    c = unpack(b)
    assert c[0].tolist() == [0] * 32
    assert c[1].tolist() == [8] * 32  # -0 keeps its sign
    assert c[2, :4].tolist() == [0, 8, 6, 8]
    deq = dequantize_mxfp4(b, sfb)
    assert torch.signbit(deq[1]).all() and not torch.signbit(deq[0]).any()
    check_against_ref(w)
    # A small negative that rounds to zero keeps its sign too.
    w = torch.tensor([block([4.0, -0.2, 0.2])])
    assert unpack(quantize_mxfp4(w)[0])[0, :3].tolist() == [6, 8, 0]


def test_subnormal_e2m1_half() -> None:
    w = torch.tensor([block([4.0, 0.5, -0.5, 0.3, 0.26, 0.25, 0.24, 0.7])])
    assert unpack(quantize_mxfp4(w)[0])[0, :8].tolist() == [6, 1, 9, 1, 1, 0, 0, 1]
    check_against_ref(w)


def test_saturation_above_six() -> None:
    # amax in (6, 8) * scale: the OCP scale leaves it above 6 and it saturates (not 8).
    w = torch.tensor([block([7.0, -7.5, 7.99, 6.5, 6.0, 5.5])])
    b, sfb = quantize_mxfp4(w)
    assert sfb.tolist() == [[127]]
    assert unpack(b)[0, :6].tolist() == [7, 15, 7, 7, 7, 7]
    check_against_ref(w)
    # FP32's largest value: floor(log2) = 127, byte 252, value / scale ~ 7.99 -> 6.
    fmax = f32(0x7F7FFFFF)
    w = torch.tensor([block([fmax, -fmax, fmax / 3, 2.0**125])])
    b, sfb = quantize_mxfp4(w)
    assert sfb.tolist() == [[252]] and unpack(b)[0, :4].tolist() == [7, 15, 5, 2]
    assert torch.isfinite(dequantize_mxfp4(b, sfb)).all()
    check_against_ref(w)


def test_smallest_exponents() -> None:
    cases = [
        [2.0**-130, 2.0**-131],  # below the clamp: byte 0, 2^-130 / 2^-127 = 0.125 -> 0
        [2.0**-128, 1.5 * 2.0**-128, 2.0**-129],  # 0.5 -> code 1, 0.75 tie -> 1, 0.25 tie -> 0
        [2.0**-125, 3 * 2.0**-127, 2.0**-149],  # floor(log2) -125: byte 0, value 4 (idx 6)
        [2.0**-124, 2.0**-126],  # byte 1
        [f32(0x00000001)],  # the smallest FP32 subnormal
    ]
    w = torch.tensor([block(c) for c in cases])
    b, sfb = quantize_mxfp4(w)
    assert sfb[:, 0].tolist() == [0, 0, 0, 1, 0]
    assert unpack(b)[1, :3].tolist() == [1, 2, 0]
    assert unpack(b)[2, :2].tolist() == [6, 5]
    check_against_ref(w)


def test_largest_and_smallest_scale_bytes_dequantize_exactly() -> None:
    codes = torch.arange(16, dtype=torch.uint8).repeat(2)  # all 16 codes, twice
    b = (codes[0::2] | (codes[1::2] << 4)).expand(4, 16).contiguous()
    sfb = torch.tensor([[0], [1], [252], [254]], dtype=torch.uint8)
    deq = dequantize_mxfp4(b, sfb)
    for row, e in enumerate((0, 1, 252, 254)):
        for i, c in enumerate(codes.tolist()):
            v = GRID[c & 7] * Fraction(2) ** (e - 127)
            expect = math.inf if v > Fraction(f32(0x7F7FFFFF)) else float(v)
            expect = -expect if c & 8 else expect
            got = deq[row, i].item()
            assert got == expect and math.copysign(1, got) == math.copysign(1, expect), (e, c)
    assert deq[0, 1].item() == 2.0**-128  # 0.5 * 2^-127: an FP32 subnormal, kept exactly


def test_scales_spread_inside_one_row() -> None:
    gen = torch.Generator().manual_seed(0)
    nb = 24
    exps = torch.linspace(-20, 4, nb).round()
    w = torch.randn(4, nb, 32, generator=gen) * (2.0**exps).view(1, nb, 1)
    w[:, nb // 2] *= 2.0**10  # one 32-block 2^10 above its neighbours
    w[:, nb // 2 + 2] *= 2.0**-10  # and one 2^10 below
    w = w.reshape(4, nb * 32)
    _, sfb = quantize_mxfp4(w)
    spread = (sfb.int().amax(dim=-1) - sfb.int().amin(dim=-1)).min().item()
    assert spread >= 20  # the row really spans the binades it was built with
    s = sfb.int()
    assert ((s[:, nb // 2] - s[:, nb // 2 - 1]) >= 8).all()  # the outlier block stands out
    assert ((s[:, nb // 2 + 1] - s[:, nb // 2 + 2]) >= 8).all()
    check_against_ref(w)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_random_against_ref(dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(1)
    exps = torch.randint(-8, 8, (2, 8, 4, 1), generator=gen).expand(2, 8, 4, 32).flatten(-2)
    w = (torch.randn(2, 8, 128, generator=gen) * 2.0**exps).to(dtype)
    b, sfb = quantize_mxfp4(w)
    assert b.shape == (2, 8, 64) and sfb.shape == (2, 8, 4)
    assert b.dtype == sfb.dtype == torch.uint8
    check_against_ref(w)
    # Through FP32: the same codes (bf16/fp16 -> fp32 is exact).
    b32, sfb32 = quantize_mxfp4(w.float())
    assert torch.equal(b, b32) and torch.equal(sfb, sfb32)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_extreme_values_of_each_input_dtype(dtype: torch.dtype) -> None:
    """Each input format's largest, smallest normal and smallest subnormal values, both signs:
    the largest saturate to +-6 at the top binade's scale; bf16's subnormals sit below the
    UE8M0 clamp (byte 0, where they round to +-0), fp16's get their own binade's scale."""
    info = torch.finfo(dtype)
    big, normal = info.max, info.smallest_normal
    sub = info.smallest_normal * info.eps  # the smallest subnormal: 2^-133 (bf16), 2^-24 (fp16)
    extremes = [big, -big, big / 2, normal, -normal, sub, -sub]
    rows = [block([v, v / 3, -v / 7, v * 0.75]) for v in extremes]
    rows.append(block([normal, sub, -sub, normal / 2, 3 * sub]))
    w = torch.tensor(rows).to(dtype)  # v / 3 and v / 7 round in `dtype`: the reference sees w
    assert w[:7, 0].float().tolist() == extremes  # the extremes themselves are exact
    b, sfb = quantize_mxfp4(w)
    c = unpack(b)
    assert c[0, 0].item() == 7 and c[1, 0].item() == 15  # max / scale is in (6, 8): saturated
    # floor(log2 max) - 2 + 127; the smallest subnormal: 2^-133 is below the clamp (byte 0),
    # 2^-24 (fp16) gets 2^-26.
    top, bottom = (252, 0) if dtype == torch.bfloat16 else (140, 101)
    assert sfb[0, 0].item() == sfb[1, 0].item() == top and sfb[5, 0].item() == bottom
    check_against_ref(w)


# ---- round trips and layouts --------------------------------------------------------------


def random_mxfp4(
    shape: tuple[int, ...], canonical: bool, seed: int = 2
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random (b, sfb) of [..., N, K]; canonical: bytes in [1, 252] with a code of magnitude
    >= 4 in every block, or byte 0 with any codes (both are quantize_mxfp4's own outputs)."""
    gen = torch.Generator().manual_seed(seed)
    *lead, k = shape
    codes = torch.randint(0, 16, (*lead, k // 32, 32), generator=gen, dtype=torch.uint8)
    sfb = torch.randint(0, 255, (*lead, k // 32), generator=gen, dtype=torch.uint8)
    if canonical:
        sfb = sfb.clamp(max=252)
        pos = torch.randint(0, 32, (*lead, k // 32, 1), generator=gen)
        big = torch.randint(6, 8, pos.shape, generator=gen, dtype=torch.uint8)
        sign = torch.randint(0, 2, pos.shape, generator=gen, dtype=torch.uint8) << 3
        codes.scatter_(-1, pos, big | sign)
        sfb.view(-1)[::7] = 0  # byte 0 blocks keep their random codes: still canonical
    codes = codes.flatten(-2)
    return codes[..., 0::2] | (codes[..., 1::2] << 4), sfb


def test_requantize_canonical_codes_is_identity() -> None:
    b, sfb = random_mxfp4((3, 16, 256), canonical=True)
    b2, sfb2 = quantize_mxfp4(dequantize_mxfp4(b, sfb))
    assert torch.equal(b2, b) and torch.equal(sfb2, sfb)


def test_requantize_noncanonical_keeps_values() -> None:
    # Blocks whose largest code is below 4 (or all zero) re-quantize to a smaller exponent
    # with the same values: not the same bytes, the same numbers.
    b, sfb = random_mxfp4((2, 8, 128), canonical=False)
    sfb = sfb.clamp(max=252)  # codes >= 2 at bytes 253/254 overflow FP32 (inf): refused
    codes = unpack(b) & 0b1101  # magnitudes {0, 0.5, 2, 3}: max < 4 in every block
    b = codes[..., 0::2] | (codes[..., 1::2] << 4)
    deq = dequantize_mxfp4(b, sfb)
    b2, sfb2 = quantize_mxfp4(deq)
    assert (sfb2 <= sfb).all() and (sfb2 < sfb).any()
    assert torch.equal(dequantize_mxfp4(b2, sfb2).view(torch.int32), deq.view(torch.int32))


def test_dequantize_every_code_at_every_scale_byte() -> None:
    """All 16 codes x all 256 bytes against exact Fractions: FP32 subnormals kept, values
    past FP32 +-inf (codes >= 2 at bytes 253, 254), byte 0xFF NaN."""
    codes = torch.arange(16, dtype=torch.uint8).repeat(2)
    b = (codes[0::2] | (codes[1::2] << 4)).expand(256, 16).contiguous()
    sfb = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(256, 1)
    deq = dequantize_mxfp4(b, sfb)
    fmax = Fraction(f32(0x7F7FFFFF))
    for e in range(256):
        for i, c in enumerate(codes.tolist()):
            got = deq[e, i].item()
            if e == 0xFF:
                assert math.isnan(got), (e, c)
                continue
            v = GRID[c & 7] * Fraction(2) ** (e - 127)
            expect = math.inf if v > fmax else float(v)
            expect = -expect if c & 8 else expect
            assert got == expect and math.copysign(1, got) == math.copysign(1, expect), (e, c)


def test_round_trip_every_scale_byte() -> None:
    """A block holding all 16 codes (so its largest magnitude is 6) at every byte FP32 can
    hold (0 .. 252) quantizes back to exactly its own codes and byte, as the reference does."""
    gen = torch.Generator().manual_seed(4)
    perms = torch.rand(253, 32, generator=gen).argsort(dim=-1) % 16  # each code twice, shuffled
    codes = perms.to(torch.uint8)
    b = codes[:, 0::2] | (codes[:, 1::2] << 4)
    sfb = torch.arange(253, dtype=torch.uint8).view(253, 1)
    deq = dequantize_mxfp4(b, sfb)
    assert torch.isfinite(deq).all()
    b2, sfb2 = quantize_mxfp4(deq)
    assert torch.equal(sfb2, sfb) and torch.equal(b2, b)
    check_against_ref(deq)


def test_checkpoint_layout_is_a_view() -> None:
    b, sfb = random_mxfp4((4, 16, 2880), canonical=False, seed=3)  # gpt-oss K = 2880
    ref = dequantize_mxfp4(b, sfb)
    blocks = b.view(4, 16, 90, 16)  # gpt-oss `blocks` [E, N, K/32, 16]
    assert blocks.data_ptr() == b.data_ptr()
    assert torch.equal(dequantize_mxfp4(blocks, sfb).view(torch.int32), ref.view(torch.int32))
    # A strided view (every other expert) of the checkpoint tensors, not made contiguous.
    sub_b, sub_s = blocks[::2], sfb[::2]
    assert not sub_b.is_contiguous()
    got = dequantize_mxfp4(sub_b, sub_s)
    assert torch.equal(got.view(torch.int32), ref[::2].view(torch.int32))
    # torch's own FP4/E8M0 dtypes over the same bytes.
    fp4 = getattr(torch, "float4_e2m1fn_x2", None)
    e8m0 = getattr(torch, "float8_e8m0fnu", None)
    if fp4 is not None and e8m0 is not None:
        got = dequantize_mxfp4(b.view(fp4), sfb.view(e8m0))
        assert torch.equal(got.view(torch.int32), ref.view(torch.int32))


def test_nan_scale_byte_gives_nan_block() -> None:
    b, sfb = random_mxfp4((2, 128), canonical=True)
    sfb[1, 2] = 0xFF
    deq = dequantize_mxfp4(b, sfb)
    assert torch.isnan(deq[1, 64:96]).all()
    assert not torch.isnan(deq[1, :64]).any() and not torch.isnan(deq[0]).any()


# ---- per_token_cast_to_fp8 ----------------------------------------------------------------


@pytest.mark.parametrize("k", [1, 100, 128, 200, 2880, 7168])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_per_token_cast_reconstructs(k: int, dtype: torch.dtype) -> None:
    gen = torch.Generator().manual_seed(k)
    x = (torch.randn(2, 7, k, generator=gen) * torch.logspace(-3, 3, k)).to(dtype)
    x[0, 3] = 0  # a zero row
    a, sfa = per_token_cast_to_fp8(x)
    nb = -(-k // 128)
    assert a.dtype == torch.float8_e4m3fn and a.shape == x.shape
    assert sfa.dtype == torch.float32 and sfa.shape == (2, 7, nb)
    xf = x.float()
    # Each scale is the DeepGEMM one (amax times the FP32 1/448, as CUDA divides by a scalar), the last (partial) block's amax taken over its own columns.
    for j in range(nb):
        amax = xf[..., j * 128 : (j + 1) * 128].abs().amax(dim=-1)
        assert torch.equal(sfa[..., j], amax.clamp(min=1e-4) * (1.0 / 448))
    scale = sfa.repeat_interleave(128, dim=-1)[..., :k]
    err = (a.float() * scale - xf).abs()
    # E4M3: half an ulp is 2^-4 relative for normals, 2^-10 * scale below 2^-6 * scale.
    bound = xf.abs() * (2.0**-4 + 1e-6) + scale * 2.0**-10 * (1 + 1e-6)
    assert (err <= bound).all()
    assert (a[0, 3].float() == 0).all() and torch.equal(
        sfa[0, 3], torch.full((nb,), 1e-4) * (1.0 / 448)
    )
    # Every block whose amax is above the epsilon reaches the top of the E4M3 range.
    live = amax_blocks(xf, 128) >= 1e-4
    assert live.any()
    assert (amax_blocks(a.float(), 128)[live] == 448.0).all()


def amax_blocks(t: torch.Tensor, g: int) -> torch.Tensor:
    return torch.stack([t[..., j : j + g].abs().amax(dim=-1) for j in range(0, t.shape[-1], g)], -1)


def test_per_token_cast_gran_k_and_values() -> None:
    x = torch.tensor([[1.0, -2.0, 0.5, 896.0, 3.0]])
    a, sfa = per_token_cast_to_fp8(x, gran_k=3)
    assert torch.equal(sfa, torch.tensor([[2.0 / 448, 2.0]]))
    assert a.float().tolist() == [[224.0, -448.0, 112.0, 448.0, 1.5]]
    a3, sfa3 = per_token_cast_to_fp8(x.half().view(1, 1, 5), gran_k=3)
    assert a3.shape == (1, 1, 5) and torch.equal(sfa3[0], sfa)


@pytest.mark.parametrize("k", [1, 200, 2880])
def test_per_token_cast_ue8m0(k: int) -> None:
    """ue8m0=True (the SM100 FP8 x FP4 convention): each scale is the smallest power of two
    at or above the plain scale, checked with math.frexp on Python floats."""
    gen = torch.Generator().manual_seed(7 + k)
    x = torch.randn(3, 5, k, generator=gen) * torch.logspace(-4, 4, k)
    x[1, 2] = 0
    x[2, 0, 0] = 448.0 * 2.0**-3  # a block whose plain scale is exactly a power of two
    x[2, 0, 1:128] = 0
    a, sfa = per_token_cast_to_fp8(x, ue8m0=True)
    _, plain = per_token_cast_to_fp8(x)
    assert sfa.shape == plain.shape and a.shape == x.shape
    for s, p in zip(sfa.flatten().tolist(), plain.flatten().tolist()):
        mant, ex = math.frexp(p)  # p = mant * 2^ex, mant in [0.5, 1)
        want = p if mant == 0.5 else math.ldexp(1.0, ex)
        assert s == want, (s, p)
    assert sfa[2, 0, 0].item() == 2.0**-3
    scale = sfa.repeat_interleave(128, dim=-1)[..., :k]
    assert torch.equal(a.float(), (x / scale).clamp(-448, 448).to(torch.float8_e4m3fn).float())
    assert (a.float().abs() <= 448).all()
    err = (a.float() * scale - x).abs()
    assert (err <= x.abs() * (2.0**-4 + 1e-6) + scale * 2.0**-10 * (1 + 1e-6)).all()


# ---- errors -------------------------------------------------------------------------------


def test_errors() -> None:
    with pytest.raises(ValueError, match="w must have K"):
        quantize_mxfp4(torch.zeros(4, 48))
    with pytest.raises(TypeError, match="w must be"):
        quantize_mxfp4(torch.zeros(4, 32, dtype=torch.float64))
    with pytest.raises(TypeError, match="w must be"):
        quantize_mxfp4(torch.zeros(4, 32, dtype=torch.int32))
    with pytest.raises(ValueError, match="w must have rank"):
        quantize_mxfp4(torch.zeros(32))
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError, match="NaN or Inf"):
            quantize_mxfp4(torch.tensor([block([1.0, bad])]))
    b, sfb = random_mxfp4((4, 64), canonical=True)
    with pytest.raises(TypeError, match="b must be uint8"):
        dequantize_mxfp4(b.to(torch.int8), sfb)
    with pytest.raises(TypeError, match="sfb must be uint8"):
        dequantize_mxfp4(b, sfb.float())
    with pytest.raises(ValueError, match="disagree"):
        dequantize_mxfp4(b[:, :16], sfb)
    with pytest.raises(ValueError, match="disagree"):
        dequantize_mxfp4(b, sfb[:2])
    with pytest.raises(ValueError, match="checkpoint layout"):
        dequantize_mxfp4(b.view(4, 2, 16)[:, :, :8], sfb)
    with pytest.raises(ValueError, match="b must be"):
        dequantize_mxfp4(b.view(4, 2, 2, 8), sfb)
    with pytest.raises(ValueError, match="sfb must be"):
        dequantize_mxfp4(b, sfb[0])
    with pytest.raises(TypeError, match="x must be"):
        per_token_cast_to_fp8(torch.zeros(2, 8, dtype=torch.int64))
    with pytest.raises(ValueError, match="x must have rank"):
        per_token_cast_to_fp8(torch.zeros(8))
    with pytest.raises(ValueError, match="K >= 1"):
        per_token_cast_to_fp8(torch.zeros(2, 0))
    with pytest.raises(ValueError, match="gran_k"):
        per_token_cast_to_fp8(torch.zeros(2, 8), gran_k=0)
    with pytest.raises(TypeError, match="gran_k"):
        per_token_cast_to_fp8(torch.zeros(2, 8), gran_k=128.0)  # type: ignore[arg-type]
