"""Correctness and timing measures shared by the warmup's self-check, the tests and the
benchmarks: calc_diff, the FP32 GEMM reference, CUDA-event and host timings."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import torch

SLEEP_CYCLES_PER_US = 1980  # torch.cuda._sleep counts clock cycles; H200 boost clock


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """1 - cosine-like similarity, as DeepGEMM defines it: 0 for equal tensors. NaN-poisoned
    (unwritten) or non-finite outputs give inf, never NaN: a NaN would pass `max(worst, diff)`
    unseen (Python's max keeps its first argument against a NaN)."""
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    if denominator == 0:
        return 0.0 if torch.equal(x, y) else 1.0
    diff = float(1 - 2 * (x * y).sum() / denominator)
    return diff if math.isfinite(diff) else math.inf


def reference_gemm_nt(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor | None = None
) -> torch.Tensor:
    """FP32 reference of D = A @ B^T (+ C) on the exact operands."""
    out = a.float() @ b.float().t()
    return out + c.float() if c is not None else out


def bench_us(
    fn: Callable[[], object], warmup: int = 10, iters: int = 50, queue_ahead_us: float = 0.0
) -> float:
    """Median time of `fn` in microseconds, timed with CUDA events per call.

    queue_ahead_us > 0 first parks the GPU in a sleep kernel that long (at ~2 GHz), so the host
    queues every timed launch before the first runs: the events then time the kernels alone,
    without the host gaps between launches."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    if queue_ahead_us > 0:
        torch.cuda._sleep(int(queue_ahead_us * SLEEP_CYCLES_PER_US))
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends))
    return times[len(times) // 2]


def host_us_per_call(fn: Callable[[], object], calls: int = 2000, rounds: int = 5) -> float:
    """Per-call time of `calls` back-to-back launch-bound calls (one sync at the end), best of
    `rounds` so that OS noise does not count."""
    best = float("inf")
    for _ in range(rounds):
        for _ in range(100):
            fn()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best
