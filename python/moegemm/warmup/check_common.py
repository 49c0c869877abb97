"""What the warmup's self-checks share (check.py for BF16, check_fp8_fp4.py for FP8 x FP4): where
their tensors live, the size bound, random routings and operands, torch's time for a peer and
the report table."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TextIO

import torch

from ..measure import bench_us

TOLERANCE = 1e-5
DEVICE = "cuda"  # where the check's tensors live (a CPU test of the FP8 x FP4 plumbing swaps it)
# A call whose largest tensor (FP32 reference or output included) exceeds this is skipped: a
# check, not a stress test. DeepSeek-V3's k-grouped output (256 x 4096 x 7168 FP32) is 28 GiB.
MAX_BUFFER_BYTES = 32 << 30
ALIGN = 128  # get_mk_alignment_for_contiguous_layout()


def routing(tokens: int, top_k: int, groups: int, gen: torch.Generator) -> torch.Tensor:
    """Rows per group of a random top-k routing (each token to top_k distinct experts)."""
    scores = torch.rand(tokens, groups, generator=gen, device=DEVICE)
    experts = scores.topk(min(top_k, groups), dim=1).indices.flatten()
    return torch.bincount(experts, minlength=groups).to(torch.int64)


def poisoned(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.full(shape, float("nan"), device=DEVICE, dtype=dtype)


def randn(*shape: int, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen, device=DEVICE) * scale).bfloat16()


def peer_us(*fns: Callable[[], object]) -> float:
    """torch's time for the same problem by the first of fns this torch build accepts, NaN where
    it refuses them all."""
    for fn in fns:
        try:
            fn()
        except (RuntimeError, TypeError, ValueError):
            continue
        return bench_us(fn)
    return math.nan


class Report:
    def __init__(self, out: TextIO, tolerance: float = TOLERANCE, layout_width: int = 9) -> None:
        self.out, self.ok, self.ratios = out, True, []
        self.tolerance, self.width = tolerance, layout_width
        print(
            f"{'layout':{layout_width}s} {'shape':26s} {'tokens':>6s} {'rows':>7s} {'diff':>8s} "
            f"{'us':>9s} {'torch us':>9s} {'x torch':>7s}",
            file=out,
        )

    def row(self, layout: str, label: str, tokens: int, rows: int, diff: float, us: float,
            peer: float) -> None:  # fmt: skip
        passed = diff < self.tolerance  # NaN (an unwritten row) fails too
        self.ok &= passed
        speed = peer / us  # NaN where torch refused the problem
        if not math.isnan(speed):
            self.ratios.append(speed)
        print(
            f"{layout:{self.width}s} {label:26s} {tokens:6d} {rows:7d} {diff:8.1e} {us:9.1f} {peer:9.1f} "
            f"{speed:7.3f}" + ("" if passed else "  FAILED"),
            file=self.out,
        )
