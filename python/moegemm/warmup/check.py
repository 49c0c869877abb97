"""The GPU check the warmup CLI runs after a build on an SM90 GPU: the model's kernels, called as
serving calls them, checked against an FP32 reference and timed against torch in the same run.
This module checks the BF16 kernels; with weights="mxfp4" run_check checks the FP8 x FP4 ones
instead (check_fp8_fp4.py).

For each shape and a few token counts: routed shapes (num_groups > 1) run every m-grouped layout
(packed `offs`, aligned `m_indices`, `masked` with max_m = tokens) on rows = tokens x top_k
routed by a random top-k choice, and the k-grouped weight gradient on the same routing; one-group
shapes run the dense GEMM. Operands are fresh random data, outputs are NaN-poisoned first, so a
row the kernel fails to write fails the check. Peers (the table's last column names each):
torch.mm for dense, torch._grouped_mm on the packed rows for every m-grouped layout, and for
k-grouped an FP32-output peer (as the kernel writes) where this torch has one, else the
BF16-output call marked as differing and left out of the geomean. A call fails on its output
alone (calc_diff not below the bound, or a raise), each failure printed as one line; times
and ratios never fail the check.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import TextIO

import torch

from ..measure import bench_us, calc_diff
from . import check_common as common
from . import check_fp8_fp4
from .check_common import Peer
from .specs import (
    DEFAULT_MAX_TOKENS,
    check_arguments,
    check_mxfp4_shape,
    check_shape,
    check_weights,
)

DEFAULT_CHECK_TOKENS = (1, 64, 1024, 4096)


def _weights(g: int, n: int, k: int, gen: torch.Generator) -> torch.Tensor:
    """[G, N, K] BF16 weights, drawn one group at a time (no FP32 copy of them all)."""
    b = torch.empty(g, n, k, device=common.DEVICE, dtype=torch.bfloat16)
    for group in range(g):
        b[group] = common.randn(n, k, gen=gen, scale=0.02)
    return b


class _Diff:
    """calc_diff(x, y) accumulated over pieces, so no full FP32 reference is held."""

    def __init__(self) -> None:
        self.xy = self.sq = 0.0

    def add(self, x: torch.Tensor, y: torch.Tensor) -> None:
        x, y = x.double(), y.double()
        self.xy += float((x * y).sum())
        self.sq += float((x * x + y * y).sum())

    def value(self) -> float:
        return 0.0 if self.sq == 0 else 1 - 2 * self.xy / self.sq


def _timed(fn) -> float:
    return common.timed(fn, bench_us)  # this module's bench_us (a CPU test stands one in)


def _skipped(out: TextIO, layout: str, label: str, tokens: int) -> None:
    print(f"{layout:9s} {label:26s} {tokens:6d} skipped (a tensor > 32 GiB)", file=out)


def _check_dense(rep: common.Report, label: str, n: int, k: int, tokens: int, gen) -> None:
    import moegemm

    with rep.guard("dense", label, tokens):
        a, b = common.randn(tokens, k, gen=gen), common.randn(n, k, gen=gen, scale=0.02)
        d = common.poisoned(tokens, n)
        moegemm.bf16_gemm_nt(a, b, d)
        diff = calc_diff(d, a.float() @ b.float().t())
        us = _timed(lambda: moegemm.bf16_gemm_nt(a, b, d))
        peer = common.pick_peer(common.Peer("torch.mm", lambda: torch.mm(a, b.t(), out=d)))
        rep.row("dense", label, tokens, tokens, diff, us, common.peer_us(peer), peer)


def packed_peer(a: torch.Tensor, bt: torch.Tensor, offs: torch.Tensor, padded: bool) -> Peer:
    """torch._grouped_mm on the packed real rows, the peer of every m-grouped layout: the same
    BF16 rows out. For m_indices and masked the kernel's layout also holds padding rows (and
    a masked call reads masked_m on the device), which the label says."""
    name = "torch._grouped_mm" + (" on the packed rows" if padded else "")
    return Peer(name, lambda: torch._grouped_mm(a, bt, offs=offs))


def k_grouped_peers(dy_t: torch.Tensor, x: torch.Tensor, offs: torch.Tensor,
                    bounds: list[tuple[int, int]]) -> tuple[Peer, ...]:  # fmt: skip
    """The k-grouped kernel's peers, most like it first: it writes FP32 [G, M, N] (the
    weight-gradient contract), so an FP32-output grouped GEMM, else one FP32-output torch.mm
    per group (a launch each), else the BF16-output grouped GEMM, labeled as such: it writes
    half the bytes and rounds, so its ratio says little and stays out of the geomean."""
    fp32 = torch.float32

    def per_group() -> None:
        for start, end in bounds:
            torch.mm(dy_t[:, start:end], x[start:end], out_dtype=fp32)

    return (
        Peer("torch._grouped_mm FP32 out",
             lambda: torch._grouped_mm(dy_t, x, offs=offs, out_dtype=fp32)),
        Peer("torch.mm per group FP32 out", per_group),
        Peer("torch._grouped_mm", lambda: torch._grouped_mm(dy_t, x, offs=offs), False,
             "BF16 out, the kernel FP32"),
    )  # fmt: skip


def _check_routed(rep: common.Report, label: str, b: torch.Tensor, tokens: int, top_k: int,
                  gen) -> None:  # fmt: skip
    import moegemm

    g, n, k = b.shape
    counts = common.routing(tokens, top_k, g, gen)
    rows = int(counts.sum())
    bt = b.transpose(-2, -1)  # torch._grouped_mm takes [G, K, N]
    a = common.randn(rows, k, gen=gen)
    ends = counts.cumsum(0)
    offs = ends.to(torch.int32)
    ref = torch.empty(rows, n, device=common.DEVICE)
    starts = (ends - counts).tolist()
    for group, (start, size) in enumerate(zip(starts, counts.tolist())):
        ref[start : start + size] = a[start : start + size].float() @ b[group].float().t()
    peer = common.pick_peer(packed_peer(a, bt, offs, False))
    peer_time = common.peer_us(peer)

    with rep.guard("offs", label, tokens):
        d = common.poisoned(rows, n)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)
        us = _timed(lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs))
        rep.row("offs", label, tokens, rows, calc_diff(d, ref), us, peer_time, peer)

    padded_peer = None if peer is None else packed_peer(a, bt, offs, True)
    with rep.guard("m_indices", label, tokens):
        # Each group's rows copied to a segment aligned to ALIGN rows; padding rows -1.
        padded = [math.ceil(size / common.ALIGN) * common.ALIGN for size in counts.tolist()]
        pad_starts = [sum(padded[:i]) for i in range(g)]
        total = max(common.ALIGN, sum(padded))
        real = torch.cat(
            [
                torch.arange(s, s + size, device=common.DEVICE)
                for s, size in zip(pad_starts, counts.tolist())
            ]
        )
        m_indices = torch.full((total,), -1, device=common.DEVICE, dtype=torch.int32)
        groups = torch.arange(g, device=common.DEVICE)
        m_indices[real] = torch.repeat_interleave(groups, counts).int()
        a_pad = torch.zeros(total, k, device=common.DEVICE, dtype=torch.bfloat16)
        a_pad[real] = a
        d = common.poisoned(total, n)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a_pad, b, d, m_indices)
        us = _timed(lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(a_pad, b, d, m_indices))
        rep.row("m_indices", label, tokens, rows, calc_diff(d[real], ref), us, peer_time,
                padded_peer)  # fmt: skip

    # masked: a [G, max_m, K] buffer with max_m = tokens (holds any routing). Its peer is the
    # packed call on the same real rows: torch's batched call over the whole buffer would
    # compute G x max_m rows, most of them padding the kernel skips.
    max_m = tokens
    if g * max_m * max(n, k) * 4 > common.MAX_BUFFER_BYTES:
        _skipped(rep.out, "masked", label, tokens)
    else:
        with rep.guard("masked", label, tokens):
            a_masked = torch.zeros(g, max_m, k, device=common.DEVICE, dtype=torch.bfloat16)
            ref_masked = torch.zeros(g, max_m, n, device=common.DEVICE)
            valid = torch.zeros(g, max_m, dtype=torch.bool, device=common.DEVICE)
            for group, (start, size) in enumerate(zip(starts, counts.tolist())):
                a_masked[group, :size] = a[start : start + size]
                ref_masked[group, :size] = ref[start : start + size]
                valid[group, :size] = True
            masked_m = counts.to(torch.int32)
            expected = min(max_m, math.ceil(tokens * top_k / g))
            d = common.poisoned(g, max_m, n)

            def masked() -> None:
                moegemm.m_grouped_bf16_gemm_nt_masked(a_masked, b, d, masked_m, expected)

            masked()
            us = _timed(masked)
            rep.row("masked", label, tokens, rows, calc_diff(d[valid], ref_masked[valid]), us,
                    peer_time, padded_peer)  # fmt: skip

    # k-grouped weight gradient of this shape: d[g] = dy_g^T x_g, M = n, N = k, FP32 out.
    if g * n * k * 4 > common.MAX_BUFFER_BYTES:
        _skipped(rep.out, "k-grouped", label, tokens)
        return
    with rep.guard("k-grouped", label, tokens):
        dy, x = common.randn(rows, n, gen=gen), common.randn(rows, k, gen=gen)
        d = common.poisoned(g, n, k, dtype=torch.float32)
        moegemm.k_grouped_bf16_gemm_tn_contiguous(dy, x, d, offs)
        diff = _Diff()
        for group, (start, size) in enumerate(zip(starts, counts.tolist())):
            want = dy[start : start + size].float().t() @ x[start : start + size].float()
            diff.add(d[group], want)
        us = _timed(lambda: moegemm.k_grouped_bf16_gemm_tn_contiguous(dy, x, d, offs))
        bounds = [(start, start + size) for start, size in zip(starts, counts.tolist())]
        k_peer = common.pick_peer(*k_grouped_peers(dy.t(), x, offs, bounds))
        rep.row("k-grouped", label, tokens, rows, diff.value(), us, common.peer_us(k_peer),
                k_peer)  # fmt: skip


def run_check(
    shapes: list[dict],
    top_k: int,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    *,
    token_counts: Sequence[int] | None = None,
    out: TextIO | None = None,
    seed: int = 0,
    weights: str = "bf16",
) -> bool:
    """Check and time the kernels of `shapes` (the warmup's shape dicts) on the current SM90 GPU
    at `token_counts` (default: those of DEFAULT_CHECK_TOKENS up to max_tokens, and max_tokens if
    fewer remain), with `top_k` experts per token. Prints one line per call to `out` (default
    stdout) and a summary; returns True when every output matched the FP32 reference
    (calc_diff < TOLERANCE). Calls whose operands exceed MAX_BUFFER_BYTES (32 GiB) are skipped.
    weights="mxfp4" checks the FP8 x FP4 kernels instead (check_fp8_fp4.py: both weight forms,
    the dequantized reference, calc_diff < 1e-4, torch FP8 rowwise as the peer and torch BF16 as
    the second)."""
    if token_counts is None:
        token_counts = [t for t in DEFAULT_CHECK_TOKENS if t <= max_tokens] or [max_tokens]
    check_arguments(list(token_counts), top_k, 1)
    check_weights(weights)
    checked = [(shape, *check_shape(shape)) for shape in shapes]
    if weights == "mxfp4":
        for shape, _, k, _ in checked:
            check_mxfp4_shape(shape, k)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        raise RuntimeError("run_check needs an SM90 (Hopper) GPU")
    out = out or sys.stdout
    gen = torch.Generator(device=common.DEVICE)
    gen.manual_seed(seed)
    if weights == "mxfp4":
        fp4_rep = _fp8_fp4_report(out)
        _check_fp8_fp4(checked, token_counts, top_k, gen, fp4_rep)
        return _summary(fp4_rep)
    rep = common.Report(out)
    for shape, n, k, g in checked:
        label = f"{shape.get('op', '')} n={n} k={k}" + (f" G={g}" if g > 1 else "")
        b = _weights(g, n, k, gen) if 1 < g and g * n * k * 2 <= common.MAX_BUFFER_BYTES else None
        for tokens in token_counts:
            rows = tokens * (top_k if g > 1 else 1)
            if (
                max(rows * max(n, k) * 4, g * n * k * 2) > common.MAX_BUFFER_BYTES
            ):  # reference, weights
                _skipped(out, "all", label, tokens)
                continue
            if g == 1:
                _check_dense(rep, label, n, k, tokens, gen)
            else:
                _check_routed(rep, label, b, tokens, top_k, gen)
        del b
        torch.cuda.empty_cache()
    return _summary(rep)


def _summary(rep: common.Report) -> bool:
    """Prints the verdict and one line per failed call; True when none failed. Only outputs
    (calc_diff, a raise) decide: times and ratios are information."""
    for line in common.summary_lines(rep):
        print(line, file=rep.out)
    return rep.ok


def _fp8_fp4_report(out: TextIO) -> common.Report:
    return common.Report(
        out, check_fp8_fp4.TOLERANCE, check_fp8_fp4.LAYOUT_WIDTH, second=check_fp8_fp4.SECOND_PEER
    )


def _check_fp8_fp4(checked: list, token_counts: Sequence[int], top_k: int,
                   gen: torch.Generator, rep: common.Report) -> None:  # fmt: skip
    """run_check's FP8 x FP4 path: per shape, its MXFP4 weights once, then every token count."""
    fp4 = check_fp8_fp4
    for shape, n, k, g in checked:
        label = f"{shape.get('op', '')} n={n} k={k}" + (f" G={g}" if g > 1 else "")
        w = fp4.ShapeWeights(g, n, k, gen) if fp4.weights_fit(g, n, k) else None
        for tokens in token_counts:
            rows = tokens * (top_k if g > 1 else 1)
            if w is None or rows * max(n, k) * 4 > common.MAX_BUFFER_BYTES:  # reference, weights
                _skipped(rep.out, "all", label, tokens)
            elif g == 1:
                fp4.check_dense(rep, label, w, tokens, gen)
            else:
                fp4.check_routed(rep, label, w, tokens, top_k, gen)
        del w
        torch.cuda.empty_cache()
