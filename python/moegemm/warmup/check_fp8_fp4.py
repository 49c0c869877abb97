"""The warmup's GPU check of the FP8 x FP4 family (--weights mxfp4): the built kernels, called as
serving calls them, against an FP32 reference on the dequantized operands, and timed against
torch FP8 rowwise in the same run.

Per shape: weights drawn in BF16 and quantized with moegemm.quant.quantize_mxfp4, one group at a
time, then passed both ways a caller may pass them (the raw (b, sfb) pair and
prepare_mxfp4_weights' prepared form: the warmup built both). Activations are
per_token_cast_to_fp8 (gran_k 128) of random BF16 rows. The reference is FP32 on exactly what
the kernel reads: a.float() * sfa per 128 of K, times dequantize_mxfp4(b, sfb) (exact), so the
only error left is the kernel's accumulation and the BF16 output (calc_diff < 1e-4).
Routed shapes run offs, m_indices and masked (max_m = tokens) on rows = tokens x top_k of a
random top-k routing; one-group shapes the dense GEMM. Outputs are NaN-poisoned first.

Peers: torch._scaled_grouped_mm FP8 rowwise (torch._scaled_mm for dense) on the same real rows,
activations cast per token over all of K and weights per row, as benchmarks/bench_fp8_fp4.py
calls it; the packed-rows call times the m_indices and masked rows too (the same real rows and
weights). NaN where this torch has no such function or refuses the call. Second peer, in its own
columns: torch BF16 (torch._grouped_mm, torch.mm for dense) on the BF16 rows the activations
were cast from and the dequantized weights in BF16 (exact: E2M1 times a power of two), what a
model without FP8 or MXFP4 kernels runs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch

from ..measure import bench_us, calc_diff
from . import check_common as common

TOLERANCE = 1e-4  # calc_diff against the dequantized reference
SFA_BLOCK_K = 128  # activation scale granularity along K
LAYOUT_WIDTH = 14  # "m_indices/prep"
SECOND_PEER = "torch BF16"


class ShapeWeights:
    """One shape's MXFP4 weights in both forms, their FP8 rowwise cast for torch's peer and their
    dequantization in BF16 for the second peer."""

    def __init__(self, g: int, n: int, k: int, gen: torch.Generator) -> None:
        from ..quant import per_token_cast_to_fp8, quantize_mxfp4

        self.b = torch.empty(g, n, k // 2, device=common.DEVICE, dtype=torch.uint8)
        self.sfb = torch.empty(g, n, k // 32, device=common.DEVICE, dtype=torch.uint8)
        self.w8 = torch.empty(g, n, k, device=common.DEVICE, dtype=torch.float8_e4m3fn)
        self.ws = torch.empty(g, n, device=common.DEVICE, dtype=torch.float32)
        self.w16 = torch.empty(g, n, k, device=common.DEVICE, dtype=torch.bfloat16)
        for group in range(g):  # one group at a time: no FP32 copy of them all
            w = common.randn(n, k, gen=gen, scale=0.02)
            self.b[group], self.sfb[group] = quantize_mxfp4(w)
            self.w16[group] = self.dequantized(group)
            w8, ws = per_token_cast_to_fp8(w, gran_k=k)
            self.w8[group], self.ws[group] = w8, ws.squeeze(-1)
        import moegemm

        from ..api.mxfp4_weights import SM90_ROW_BLOCK

        # The prepared layout takes whole 64-row blocks; other N run the checkpoint form only.
        self.prepared = (
            moegemm.prepare_mxfp4_weights(self.b, self.sfb) if n % SM90_ROW_BLOCK == 0 else None
        )

    def forms(self, group: int | None = None) -> list[tuple[str, object]]:
        """(name, the second operand) for both forms (the checkpoint one only where N is no
        multiple of 64); `group` picks one group's 2-D weights."""
        prep = self.prepared
        if group is None:
            raw = [("raw", (self.b, self.sfb))]
            return raw if prep is None else [*raw, ("prepared", prep)]
        raw = [("raw", (self.b[group], self.sfb[group]))]
        if prep is None:
            return raw
        one = type(prep)(prep.b[group], prep.sfb[group], prepared=True, k=prep.k)
        return [*raw, ("prepared", one)]

    def dequantized(self, group: int) -> torch.Tensor:
        from ..quant import dequantize_mxfp4

        return dequantize_mxfp4(self.b[group], self.sfb[group])


def _activations(rows: int, k: int, gen: torch.Generator):
    """(a, sfa) of random BF16 rows x, their FP32 dequantization, the rowwise cast for torch,
    and x (the second peer's rows)."""
    from ..quant import per_token_cast_to_fp8

    x = common.randn(rows, k, gen=gen)
    a, sfa = per_token_cast_to_fp8(x, gran_k=SFA_BLOCK_K)
    a_ref = a.float() * sfa.repeat_interleave(SFA_BLOCK_K, dim=-1)[:, :k]
    a8r, sar = per_token_cast_to_fp8(x, gran_k=k)
    return a, sfa, a_ref, a8r, sar.squeeze(-1).contiguous(), x


def _fp8_zeros(*shape: int) -> torch.Tensor:
    """FP8 zeros made as bytes (0x00 is +0 in E4M3): no FP8 fill kernel needed."""
    return torch.zeros(shape, device=common.DEVICE, dtype=torch.uint8).view(torch.float8_e4m3fn)


def torch_peer(fn_name: str, call: Callable[[Callable], object], packed: bool = False):
    """torch's FP8 rowwise peer (common.Peer, None where this torch lacks `fn_name` or refuses
    the call): BF16 rows out as the kernel writes, on FP8 weights instead of MXFP4 ones (the
    name says so); `packed`: the kernel's layout also holds padding rows, torch the real ones."""
    fn = getattr(torch, fn_name, None)
    if fn is None:  # an older torch: no FP8 peer
        return None
    name = f"torch.{fn_name} FP8 rowwise weights" + (" on the packed rows" if packed else "")
    return common.pick_peer(common.Peer(name, lambda: call(fn)))


def bf16_peer(name: str, call: Callable[[], object]) -> tuple[float, object]:
    """The second peer (torch BF16): its time and common.Peer, (NaN, None) where refused."""
    found = common.pick_peer(common.Peer(f"{name} BF16", call))
    return common.peer_us(found), found


def _row(rep: common.Report, layout: str, form: str, label: str, tokens: int, rows: int,
         diff: float, us: float, peer: tuple, second: tuple) -> None:  # fmt: skip
    """peer, second: (its time, the common.Peer) of torch FP8 rowwise and of torch BF16."""
    rep.row(f"{layout}/{form[:4]}", label, tokens, rows, diff, us, *peer, second=second)


def _timed(fn) -> float:
    return common.timed(fn, bench_us)  # this module's bench_us (a CPU test stands one in)


def check_dense(rep: common.Report, label: str, w: ShapeWeights, tokens: int, gen) -> None:
    import moegemm

    _, n, k2 = w.b.shape
    k = 2 * k2
    a, sfa, a_ref, a8r, sar, x = _activations(tokens, k, gen)
    ref = a_ref @ w.dequantized(0).t()
    w8t, ws = w.w8[0].t(), w.ws[0].unsqueeze(0)
    peer = torch_peer(
        "_scaled_mm",
        lambda f: f(a8r, w8t, scale_a=sar.unsqueeze(1), scale_b=ws, out_dtype=torch.bfloat16),
    )
    peer = (common.peer_us(peer), peer)
    w16t = w.w16[0].t()
    second = bf16_peer("torch.mm", lambda: torch.mm(x, w16t))
    for form, b in w.forms(0):
        with rep.guard(f"dense/{form[:4]}", label, tokens):
            d = common.poisoned(tokens, n)
            call = functools.partial(moegemm.fp8_fp4_gemm_nt, (a, sfa), b, d)
            call()
            diff = calc_diff(d, ref)
            us = _timed(call)
            _row(rep, "dense", form, label, tokens, tokens, diff, us, peer, second)


def check_routed(rep: common.Report, label: str, w: ShapeWeights, tokens: int, top_k: int,
                 gen) -> None:  # fmt: skip
    import moegemm

    g, n, k2 = w.b.shape
    k = 2 * k2
    counts = common.routing(tokens, top_k, g, gen)
    rows = int(counts.sum())
    a, sfa, a_ref, a8r, sar, x = _activations(rows, k, gen)
    ends = counts.cumsum(0)
    offs = ends.to(torch.int32)
    starts, sizes = (ends - counts).tolist(), counts.tolist()
    ref = torch.zeros(rows, n, device=common.DEVICE)
    for group, (start, size) in enumerate(zip(starts, sizes)):
        if size:  # dequantize only the groups that have rows
            ref[start : start + size] = a_ref[start : start + size] @ w.dequantized(group).t()
    w8t = w.w8.transpose(-2, -1)  # [G, K, N], column-major per group, as torch takes it

    def grouped(f: Callable) -> object:
        return f(a8r, w8t, sar, w.ws, offs=offs, out_dtype=torch.bfloat16)

    found = torch_peer("_scaled_grouped_mm", grouped)
    peer = (common.peer_us(found), found)
    # The same call and time, named for the padded layouts.
    padded_peer = (peer[0], found and torch_peer("_scaled_grouped_mm", grouped, packed=True))
    w16t = w.w16.transpose(-2, -1)
    second = bf16_peer("torch._grouped_mm", lambda: torch._grouped_mm(x, w16t, offs=offs))
    contiguous = moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous
    for form, b in w.forms():
        with rep.guard(f"offs/{form[:4]}", label, tokens):
            d = common.poisoned(rows, n)
            call = functools.partial(contiguous, (a, sfa), b, d, offs=offs)
            call()
            diff = calc_diff(d, ref)
            us = _timed(call)
            _row(rep, "offs", form, label, tokens, rows, diff, us, peer, second)

    # m_indices: each group's rows copied to a segment aligned to ALIGN rows; padding rows -1.
    padded = [math.ceil(size / common.ALIGN) * common.ALIGN for size in sizes]
    pad_starts = [sum(padded[:i]) for i in range(g)]
    total = max(common.ALIGN, sum(padded))
    real = torch.cat(
        [torch.arange(s, s + size, device=common.DEVICE) for s, size in zip(pad_starts, sizes)]
    )
    m_indices = torch.full((total,), -1, device=common.DEVICE, dtype=torch.int32)
    m_indices[real] = torch.repeat_interleave(torch.arange(g, device=common.DEVICE), counts).int()
    a_pad = _fp8_zeros(total, k)
    sfa_pad = torch.ones(total, sfa.shape[1], device=common.DEVICE, dtype=sfa.dtype)
    a_pad.view(torch.uint8)[real] = a.view(torch.uint8)  # byte indexing: any torch has it
    sfa_pad[real] = sfa
    for form, b in w.forms():
        with rep.guard(f"m_indices/{form[:4]}", label, tokens):
            d = common.poisoned(total, n)
            call = functools.partial(contiguous, (a_pad, sfa_pad), b, d, m_indices)
            call()
            diff = calc_diff(d[real], ref)
            us = _timed(call)
            _row(rep, "m_indices", form, label, tokens, rows, diff, us, padded_peer, second)

    # masked: a [G, max_m, K] buffer with max_m = tokens (holds any routing).
    max_m = tokens
    if g * max_m * max(n, k) * 4 > common.MAX_BUFFER_BYTES:
        print(f"{'masked':{LAYOUT_WIDTH}s} {label:26s} {tokens:6d} skipped (a tensor > 32 GiB)",
              file=rep.out)  # fmt: skip
        return
    a_masked = _fp8_zeros(g, max_m, k)
    sfa_masked = torch.ones(g, max_m, sfa.shape[1], device=common.DEVICE, dtype=sfa.dtype)
    valid = torch.zeros(g, max_m, dtype=torch.bool, device=common.DEVICE)
    for group, (start, size) in enumerate(zip(starts, sizes)):
        a_masked[group, :size] = a[start : start + size]
        sfa_masked[group, :size] = sfa[start : start + size]
        valid[group, :size] = True
    masked_m = counts.to(torch.int32)
    expected = min(max_m, math.ceil(tokens * top_k / g))
    masked = moegemm.m_grouped_fp8_fp4_gemm_nt_masked
    for form, b in w.forms():
        with rep.guard(f"masked/{form[:4]}", label, tokens):
            d = common.poisoned(g, max_m, n)
            call = functools.partial(masked, (a_masked, sfa_masked), b, d, masked_m, expected)
            call()
            diff = calc_diff(d[valid], ref)  # valid rows in group order = the packed rows
            us = _timed(call)
            _row(rep, "masked", form, label, tokens, rows, diff, us, padded_peer, second)


def weights_fit(g: int, n: int, k: int) -> bool:
    """Whether one shape's weights (the BF16 peer copy is the largest) stay within the limit."""
    return g * n * k * 2 <= common.MAX_BUFFER_BYTES
