"""Shared helpers of the FP8 x FP4 GPU tests: operand builders, the sfa layouts, exact
references on the dequantized operands, and a record of the worst error seen.

The references never go through the kernel's arithmetic: activations are a.float() * sfa
expanded per 128 of K, weights are moegemm.quant.dequantize_mxfp4 (FP32, exact) or, where
FP32 itself would under- or overflow (scale bytes near 0 or 254), the float64 decoding below,
which is exact for every scale byte.
"""

from __future__ import annotations

import math

import torch

from moegemm.quant import dequantize_mxfp4, per_token_cast_to_fp8, quantize_mxfp4

GRAN_K = 128  # activation scale granularity along K
TOL = 1e-4  # the family's calc_diff bound
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)

# name -> worst calc_diff seen (against the dequantized reference); printed at module end.
WORST: dict[str, float] = {}
# name -> calc_diff against the unquantized BF16 product (information only).
VS_BF16: dict[str, float] = {}


def record(name: str, diff: float) -> float:
    """Keep the worst calc_diff per test family; returns diff (NaN counts as the worst)."""
    old = WORST.get(name, 0.0)
    WORST[name] = diff if math.isnan(diff) or not diff <= old else old
    return diff


def summary_lines() -> list[str]:
    lines = [f"worst calc_diff {name}: {v:.3e}" for name, v in sorted(WORST.items())]
    lines += [f"vs unquantized BF16 (info) {n}: {v:.3e}" for n, v in sorted(VS_BF16.items())]
    return lines


def write_summary(config: object, tag: str) -> None:
    """Print summary_lines() past pytest's output capture (shown without -s), then forget
    them, so the next module reports its own."""
    plugins = config.pluginmanager  # type: ignore[attr-defined]
    reporter = plugins.get_plugin("terminalreporter")
    capture = plugins.get_plugin("capturemanager")
    lines = [f"[{tag}] {line}" for line in summary_lines()]
    WORST.clear()
    VS_BF16.clear()
    if reporter is None or capture is None:
        print("\n".join(lines))
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line("")
        for line in lines:
            reporter.write_line(line)


def nan_bf16(*shape: int) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)


def offsets(sizes: list[int]) -> torch.Tensor:
    return torch.tensor(sizes, device="cuda", dtype=torch.int64).cumsum(0).to(torch.int32)


def num_kblocks(k: int) -> int:
    return -(-k // GRAN_K)


# ---- operands -----------------------------------------------------------------------------


def activations(
    *shape: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x bf16, a fp8, sfa fp32 row-major) of shape [..., M, K], via per_token_cast_to_fp8."""
    x = torch.randn(*shape, device="cuda", generator=gen).to(torch.bfloat16)
    a, sfa = per_token_cast_to_fp8(x)
    return x, a, sfa


def random_mxfp4(
    *lead: int, n: int, k: int, gen: torch.Generator, lo: int = 117, hi: int = 123
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random (b uint8 [..., N, K/2], sfb uint8 [..., N, K/32]): every byte value (so every
    code, -0 included), scale bytes uniform in [lo, hi] (weights of magnitude 2^-10 .. 6 * 2^-4,
    a few binades per row as in real checkpoints)."""
    b = torch.randint(0, 256, (*lead, n, k // 2), device="cuda", generator=gen, dtype=torch.uint8)
    sfb = torch.randint(lo, hi + 1, (*lead, n, k // 32), device="cuda", generator=gen)
    return b, sfb.to(torch.uint8)


def quantized_weights(
    *lead: int, n: int, k: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(w bf16, b, sfb): BF16 weights and their quantize_mxfp4, for the error against BF16."""
    w = (torch.randn(*lead, n, k, device="cuda", generator=gen) * 0.02).to(torch.bfloat16)
    b, sfb = quantize_mxfp4(w)
    return w, b, sfb


def mn_major(sfa: torch.Tensor) -> torch.Tensor:
    """sfa [..., M, nkb] in DeepGEMM's MN-major TMA-aligned layout: the same logical tensor with
    strides (.., 1, M_aligned), M_aligned = ceil(M / 4) * 4 (16-byte aligned columns). The
    padding rows hold NaN: a kernel reading past row M would poison its output."""
    *lead, m, nkb = sfa.shape
    m_aligned = -(-m // 4) * 4
    storage = torch.full((*lead, nkb, m_aligned), float("nan"), device=sfa.device)
    storage[..., :m] = sfa.transpose(-1, -2)
    view = storage.transpose(-1, -2)[..., :m, :]
    assert view.stride()[-2:] == (1, m_aligned) and torch.equal(view, sfa)
    return view


def sfa_layout(sfa: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "row":
        return sfa
    if layout == "mn":
        return mn_major(sfa)
    raise ValueError(f"unknown sfa layout {layout!r}")


def weights_arg(b: torch.Tensor, sfb: torch.Tensor, form: str) -> object:
    """The second operand in one of its two accepted forms."""
    if form == "raw":
        return (b, sfb)
    if form == "prepared":
        import moegemm

        prepared = moegemm.prepare_mxfp4_weights(b, sfb)
        kp = -(-2 * b.shape[-1] // 128) * 128
        assert prepared.prepared and prepared.b.shape == (*b.shape[:-1], kp // 2)
        return prepared
    raise ValueError(f"unknown weight form {form!r}")


# ---- references ---------------------------------------------------------------------------


def dequant_a(
    a: torch.Tensor, sfa: torch.Tensor, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """a * sfa with each scale expanded over its 128 columns of K (the last block partial)."""
    k = a.shape[-1]
    # Through float32 (exact for E4M3): not every device copy converts float8 to float64.
    return a.float().to(dtype) * sfa.to(dtype).repeat_interleave(GRAN_K, dim=-1)[..., :k]


def dequant_b64(b: torch.Tensor, sfb: torch.Tensor) -> torch.Tensor:
    """Exact float64 values of MXFP4 (b, sfb) for every scale byte: 2^(e - 127) spans
    2^-127 .. 2^127, where FP32 loses 0.5 * 2^-127 .. (subnormal) and 6 * 2^127 (inf).
    Byte 0xFF gives NaN. Independent of dequantize_mxfp4 (a float64 table and ldexp)."""
    lut = torch.tensor(E2M1 + tuple(-v for v in E2M1), dtype=torch.float64, device=b.device)
    codes = torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2).long()
    e = sfb.to(torch.int64)
    # 2^(e - 127) from its float64 bits (biased exponent e - 127 + 1023, always normal): exact.
    scale = ((e + (1023 - 127)) << 52).view(torch.float64)
    scale = torch.where(e == 0xFF, torch.full_like(scale, math.nan), scale)
    values = lut[codes].unflatten(-1, (sfb.shape[-1], 32)) * scale.unsqueeze(-1)
    return values.flatten(-2)


def ref_fp32(
    a: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor
) -> torch.Tensor:
    """FP32 D = dequant(a, sfa) @ dequant(b, sfb)^T for one group (a [M, K], b [N, K/2])."""
    return dequant_a(a, sfa) @ dequantize_mxfp4(b, sfb).t()


def packed_spans(sizes: list[int]) -> list[tuple[int, int, int]]:
    """(group, first row, rows) of each non-empty group of a packed layout (groups back to back)."""
    spans, start = [], 0
    for grp, rows in enumerate(sizes):
        if rows:
            spans.append((grp, start, rows))
        start += rows
    return spans


def grouped_refs(
    a: torch.Tensor,
    sfa: torch.Tensor,
    b: torch.Tensor,
    sfb: torch.Tensor,
    spans: list[tuple[int, int, int]],
) -> list[torch.Tensor]:
    """FP32 references of (group, first row, rows) spans of a contiguous A (empty spans: none)."""
    return [ref_fp32(a[r0 : r0 + rows], sfa[r0 : r0 + rows], b[g], sfb[g]) for g, r0, rows in spans]


def assert_within_bound(
    got: torch.Tensor, ref64: torch.Tensor, abs64: torch.Tensor, what: str
) -> None:
    """Element-wise: |got - ref| <= 2^-8 |ref| + 2^-9 S + 2^-130, S = sum_k |a_k w_k| (|A| @ |B|^T).

    2^-8 |ref| covers the BF16 rounding of D (2^-9, RNE) with margin; 2^-9 S covers FP32
    promotion every 128 K and the tensor core's ~14-bit internal accumulation of FP8 products
    (a few 2^-14 S at most). A single weight decoded wrong by even one E2M1 step changes D by
    about S / 32 when only its block is active (the isolated-block tests), far above the bound.
    """
    err = (got.double() - ref64).abs()
    bound = ref64.abs() * 2.0**-8 + abs64 * 2.0**-9 + 2.0**-130
    bad = ~(err <= bound)
    if bad.any():
        idx = bad.nonzero()[0].tolist()
        raise AssertionError(
            f"{what}: {int(bad.sum())} elements off, first at {idx}: got "
            f"{got[tuple(idx)].item()!r}, ref {ref64[tuple(idx)].item()!r}, "
            f"bound {bound[tuple(idx)].item()!r}"
        )
