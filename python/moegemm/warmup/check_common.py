"""What the warmup's self-checks share (check.py for BF16, check_fp8_fp4.py for FP8 x FP4): where
their tensors live, the size bound, random routings and operands, torch's time for a peer and
the report table."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Peer:
    """A torch call timed against a kernel: its name in the table, the call, and whether it
    writes what the kernel writes (the same rows, the same output dtype); the table says what
    differs where it does not, and only like-for-like ratios enter the geomean."""

    name: str
    call: Callable[[], object]
    same_output: bool = True
    differs: str = ""  # what differs from the kernel, where same_output is False


def pick_peer(*peers: Peer) -> Peer | None:
    """The first of `peers` this torch build accepts (one trial call), None where it refuses
    them all: the like-for-like ones come first, a different-output fallback last."""
    for peer in peers:
        try:
            peer.call()
        except (RuntimeError, TypeError, ValueError, NotImplementedError):
            continue
        return peer
    return None


def peer_label(peer: Peer | None) -> str:
    """The table's peer column: the peer's name, and what differs from the kernel if anything."""
    if peer is None:
        return "none (this torch refused every peer)"
    return peer.name if peer.same_output else f"{peer.name} [differs: {peer.differs}]"


def timed(fn: Callable[[], object], bench: Callable[[Callable], float] | None = None) -> float:
    """bench(fn) (default bench_us), NaN where timing raised: a time is information, never a
    check failure."""
    try:
        return (bench or bench_us)(fn)
    except (RuntimeError, TypeError, ValueError):
        return math.nan


def peer_us(peer: Peer | None) -> float:
    """torch's time by `peer`, NaN where there is none or its timing raised."""
    return math.nan if peer is None else timed(peer.call)


def speedup(us: float, peer: float) -> float:
    """peer / us where both are positive finite times, else NaN (no ratio, no failure)."""
    if not (math.isfinite(us) and math.isfinite(peer)) or us <= 0 or peer <= 0:
        return math.nan
    return peer / us


def geomean(ratios: list[float]) -> float:
    good = [r for r in ratios if math.isfinite(r) and r > 0]
    return math.exp(sum(math.log(r) for r in good) / len(good)) if good else math.nan


@dataclass(frozen=True)
class Result:
    """One checked call: where (layout, shape label, tokens), its calc_diff against the FP32
    reference, or the exception it raised."""

    layout: str
    label: str
    tokens: int
    diff: float = math.nan
    error: str | None = None


def failure(result: Result, tolerance: float) -> str | None:
    """Why `result` fails, in one line naming the call, or None where it passes. Only the
    output decides (a raise, or calc_diff not below its bound: NaN and inf fail); times and
    ratios never do."""
    where = f"{result.layout.strip()} {result.label.strip()} tokens={result.tokens}"
    if result.error is not None:
        return f"{where}: raised {result.error}"
    if not result.diff < tolerance:
        return f"{where}: calc_diff {result.diff:.3e} not below the bound {tolerance:.0e}"
    return None


def exception_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return type(exc).__name__ + (f": {text[0]}" if text else "")


class Report:
    """The check's table, one row per call. `second` names a second torch peer timed on every
    row (the FP8 x FP4 check: torch BF16 beside torch FP8 rowwise); it gets its own two columns,
    ratios and summary line."""

    def __init__(self, out: TextIO, tolerance: float = TOLERANCE, layout_width: int = 9,
                 second: str = "") -> None:  # fmt: skip
        self.out, self.ratios, self.failures = out, [], []
        self.second, self.second_ratios = second, []
        self.tolerance, self.width = tolerance, layout_width
        extra = f" {second + ' us':>14s} {'x ' + second:>13s}" if second else ""
        print(
            f"{'layout':{layout_width}s} {'shape':26s} {'tokens':>6s} {'rows':>7s} {'diff':>8s} "
            f"{'us':>9s} {'torch us':>9s} {'x torch':>7s}{extra}  torch peer",
            file=out,
        )

    @property
    def ok(self) -> bool:
        return not self.failures

    def row(self, layout: str, label: str, tokens: int, rows: int, diff: float, us: float,
            peer_us: float, peer: Peer | None = None,
            second: tuple[float, Peer | None] | None = None) -> None:  # fmt: skip
        """second: (time, Peer) of the second peer, on a report that has one."""
        why = failure(Result(layout, label, tokens, diff), self.tolerance)
        speed = speedup(us, peer_us)
        if not math.isnan(speed) and (peer is None or peer.same_output):
            self.ratios.append(speed)
        extra = ""
        if self.second:
            second_us, second_peer = second if second is not None else (math.nan, None)
            second_speed = speedup(us, second_us)
            if not math.isnan(second_speed) and (second_peer is None or second_peer.same_output):
                self.second_ratios.append(second_speed)
            extra = f" {second_us:14.1f} {second_speed:13.3f}"
        print(
            f"{layout:{self.width}s} {label:26s} {tokens:6d} {rows:7d} {diff:8.1e} {us:9.1f} "
            f"{peer_us:9.1f} {speed:7.3f}{extra}  {peer_label(peer)}"
            + ("" if why is None else "  FAILED"),  # the summary gives the reason
            file=self.out,
        )
        if why is not None:
            self.failures.append(why)

    @contextmanager
    def guard(self, layout: str, label: str, tokens: int) -> Iterator[None]:
        """Runs one call's check; an exception there fails that call with one line naming it,
        and the check goes on with the next (Ctrl-C and SIGTERM still stop it)."""
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - any error of a kernel call is its failure
            why = failure(Result(layout, label, tokens, error=exception_line(exc)), self.tolerance)
            print(f"{layout:{self.width}s} {label:26s} {tokens:6d} FAILED: {why}", file=self.out)
            self.failures.append(why)


def summary_lines(rep: Report) -> list[str]:
    """The check's last lines: its verdict with the like-for-like geomean, with a second peer
    that peer's geomean, least ratio and rows slower than it, then one line per failure (the
    reason the command exits 1)."""
    verdict = "all passed" if rep.ok else f"FAILED ({len(rep.failures)} calls)"
    geo = geomean(rep.ratios)
    speed = "" if math.isnan(geo) else f"; {geo:.3f} x torch (geomean, like-for-like peers)"
    lines = [f"check: {verdict}{speed}"]
    second = [r for r in rep.second_ratios if math.isfinite(r) and r > 0]
    if second:
        slower = sum(r < 1.0 for r in second)
        lines.append(
            f"check: {geomean(second):.3f} x {rep.second} (geomean), {min(second):.3f} at least; "
            f"{slower} of {len(second)} rows slower than {rep.second}"
        )
    return [*lines, *(f"check failed: {why}" for why in rep.failures)]
