"""Shared pieces of the BF16 grouped benchmarks (bench_bf16.py, heuristic_quality.py): the
descriptions and kernel specs a case builds, parallel precompilation, the timer, and inputs.
Importable without a GPU; the input helpers allocate on CUDA when called."""

from __future__ import annotations

import concurrent.futures
import datetime
import itertools
import math
import os
import subprocess
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch
from bf16_cases import ALIGN, Case, round_up

from moegemm.heuristics import GemmConfig, GemmDesc
from moegemm.testing import bench_us

T = TypeVar("T")
Thunk = Callable[[], object]  # one timed call

L2_BYTES = 60 * 2**20
ROTATE_BELOW = 3 * L2_BYTES  # weights smaller than this rotate among buffers (no L2 hits)
MAX_ROTATE = 16
TOL = 1e-5


def run_info() -> dict[str, str]:
    """What a result file needs to be placed in a table: GPU, torch, commit and UTC time. The
    commit is $TREE_COMMIT where set (tools/gpu_run.sh sets it: a copied tree may have no
    .git), else `git describe` of this checkout."""
    commit = os.environ.get("TREE_COMMIT", "")
    if not commit:
        repo = Path(__file__).resolve().parents[1]
        try:
            commit = subprocess.run(
                ["git", "-C", str(repo), "describe", "--always", "--dirty"],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout.strip()  # fmt: skip
        except (OSError, subprocess.SubprocessError):
            commit = "unknown"
    return {
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else "none",
        "torch": torch.__version__,
        "commit": commit,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
    }


def descs_for(case: Case) -> list[GemmDesc]:
    """The GemmDescs moegemm's API builds for this case (for parallel precompilation); for a
    contiguous case the `offs` one first, then the `m_indices` one."""
    g, n, k, total = case.num_groups, case.n, case.k, case.total_rows
    if case.layout == "contiguous":
        padded = sum(round_up(r, ALIGN) for r in case.rows)
        return [
            GemmDesc("m_grouped_offsets", total, n, k, g, expected_m=math.ceil(total / g)),
            GemmDesc("m_grouped_contiguous", padded, n, k, g),
        ]
    if case.layout == "masked":
        return [
            GemmDesc(
                "m_grouped_masked", case.max_m, n, k, g, expected_m=min(case.expected_m, case.max_m)
            )
        ]
    return [GemmDesc("k_grouped", n, k, math.ceil(total / g), g, d_dtype="fp32", with_c=True)]


def spec_for(desc: GemmDesc, config: GemmConfig) -> Hashable:
    """The kernel spec (the JIT cache's build request) a call of `desc` compiles for `config`:
    the API's own, so the precompile builds exactly what the timed calls load."""
    from moegemm.launch.plans import kernel_spec

    return kernel_spec(desc, config)


def precompile(
    specs: list[Hashable], jobs: int | None = None, quiet: bool = False
) -> dict[Hashable, str]:
    """Compile (or find cached) every spec in parallel; returns {spec: error string}."""
    from moegemm.jit.cache import build_or_load

    unique = list(dict.fromkeys(specs))
    errors: dict[Hashable, str] = {}
    if not unique:
        return errors
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 8) as pool:
        futures = {pool.submit(build_or_load, s): s for s in unique}
        for fut in concurrent.futures.as_completed(futures):
            try:
                fut.result()
            except Exception as exc:  # noqa: BLE001 - reported, the case then fails alone
                errors[futures[fut]] = f"{type(exc).__name__}: {exc}"[:2000]
    if not quiet:
        print(
            f"# precompiled {len(unique)} kernels in {time.perf_counter() - t0:.1f} s"
            f" ({len(errors)} failed)",
            flush=True,
        )
    return errors


# ----------------------------------------------------------------------------------------------
# Timing


@dataclass
class Timer:
    """Median µs per call of a no-argument callable; `queued` hides host gaps (see __call__)."""

    queued: bool = True
    budget_ms: float = 60.0
    max_iters: int = 100
    min_iters: int = 5

    def __call__(self, fn: Thunk) -> float:
        """Median µs per call of fn (CUDA events), iterations sized to the time budget."""
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        probe = 3
        t0 = time.perf_counter()
        start.record()
        for _ in range(probe):
            fn()
        end.record()
        host_us = (time.perf_counter() - t0) / probe * 1e6
        torch.cuda.synchronize()
        est_us = max(1.0, start.elapsed_time(end) * 1e3 / probe)
        iters = int(max(self.min_iters, min(self.max_iters, self.budget_ms * 1e3 / est_us)))
        warmup = max(2, min(10, iters // 5))
        if not self.queued or not hasattr(torch.cuda, "_sleep"):
            return bench_us(fn, warmup=warmup, iters=iters)
        # Keep the GPU busy while the host queues every timed launch: no host gaps are timed.
        sleep_us = min(200_000.0, host_us * iters * 1.5 + 200.0)
        return bench_us(fn, warmup=warmup, iters=iters, queue_ahead_us=sleep_us)


def rotating(fn: Callable[[T], object], buffers: list[T]) -> Thunk:
    """A no-argument callable that passes the next buffer of `buffers` to fn on every call."""
    cycle = itertools.cycle(buffers)
    return lambda: fn(next(cycle))


def rotation_count(weight_bytes: int) -> int:
    """How many weight sets to rotate among so that together they exceed ROTATE_BELOW."""
    if weight_bytes <= 0 or weight_bytes >= ROTATE_BELOW:
        return 1
    return max(2, min(MAX_ROTATE, math.ceil(ROTATE_BELOW / weight_bytes)))


# ----------------------------------------------------------------------------------------------
# Inputs and checks (GPU)


def randn_bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
    t = torch.randn(*shape, device="cuda", dtype=torch.bfloat16)
    return t.mul_(scale) if scale != 1.0 else t


def nan_tensor(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def touched_weight_bytes(case: Case) -> int:
    if case.layout == "k_grouped":
        return 0
    return sum(1 for r in case.rows if r) * case.n * case.k * 2


def weight_sets(case: Case) -> list[torch.Tensor]:
    count = rotation_count(touched_weight_bytes(case))
    return [randn_bf16(case.num_groups, case.n, case.k, scale=0.02) for _ in range(count)]


def worse(a: float, b: float) -> float:
    """max() that keeps NaN (a NaN diff is a failure, max(0.0, nan) would hide it)."""
    if math.isnan(a) or math.isnan(b):
        return float("nan")
    return max(a, b)


def try_time(timer: Timer, fn: Thunk, label: str, errors: dict[str, str]) -> float | None:
    """timer(fn), or None with the reason under errors[label] (a peer that cannot run)."""
    try:
        return timer(fn)
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run this case reads n/a
        errors[label] = f"{type(exc).__name__}: {exc}"[:300]
        torch.cuda.synchronize()
        return None


def probe_out_dtype(
    fn_fp32: Thunk, fn_bf16: Thunk, notes: dict[str, str], label: str
) -> tuple[Thunk, str] | tuple[None, None]:
    """The first of (fp32-out, bf16-out) variants that runs, with its dtype name; why a variant
    could not run goes to `notes`."""
    for fn, name in ((fn_fp32, "fp32"), (fn_bf16, "bf16")):
        try:
            fn()
            torch.cuda.synchronize()
            return fn, name
        except Exception as exc:  # noqa: BLE001
            notes[f"{label}_{name}"] = f"{type(exc).__name__}: {exc}"[:300]
    return None, None


def geomean(values: list[float | None]) -> float | None:
    """Geometric mean of the positive finite values (None, 0 and NaN are left out)."""
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None
