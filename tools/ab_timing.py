"""Interleaved A/B timing and its statistics for tools/build_twins.py.

The pure parts (interleave, compare, summarize, formatting) are tested on the CPU with a fake
timer (tools/tests/test_build_twins.py); on the GPU build_twins.py times with bench_common.Timer
(queued behind a GPU sleep, the method of bench_bf16.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence

LAYOUTS = ("dense", "m_indices", "offs", "masked", "k_grouped")  # BF16, the default
FP4_LAYOUTS = ("fp4_masked", "fp4_offs")  # FP8 x FP4 on prepared weights, on request
ALL_LAYOUTS = LAYOUTS + FP4_LAYOUTS
TARGET = 0.01  # |geomean(new / old) - 1| per layout


def interleave(
    timer: Callable[[Callable[[], object]], float],
    fns: Mapping[str, Callable[[], object]],
    rounds: int,
) -> dict[str, list[float]]:
    """`rounds` samples of each fn, the order reversed every round (A B, B A, A B, ...)."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    keys = list(fns)
    samples: dict[str, list[float]] = {key: [] for key in keys}
    for r in range(rounds):
        for key in keys if r % 2 == 0 else keys[::-1]:
            samples[key].append(timer(fns[key]))
    return samples


def spread(samples: Sequence[float]) -> float:
    return max(samples) / min(samples) - 1.0


def compare(new: Sequence[float], old: Sequence[float]) -> dict:
    """new / old of the medians, and whether it lies within the method's own spread."""
    new_us, old_us = statistics.median(new), statistics.median(old)
    ratio = new_us / old_us
    noise = max(spread(new), spread(old))
    return {
        "new_us": new_us,
        "old_us": old_us,
        "ratio": ratio,
        "noise": noise,
        "within_noise": abs(ratio - 1.0) <= noise,
        "new_samples": list(new),
        "old_samples": list(old),
    }


def geomean(values: Sequence[float]) -> float | None:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def summarize(rows: Sequence[dict]) -> dict:
    """Per layout: cases timed, geomean / min / max of new / old, how many moved beyond their
    spread, pick mismatches, check failures, and whether the geomean meets the target."""
    out: dict = {}
    for layout in (*ALL_LAYOUTS, "all"):
        mine = [r for r in rows if layout in ("all", r["layout"])]
        if not mine:
            continue
        ratios = [r["ratio"] for r in mine if r.get("ratio")]
        geo = geomean(ratios)
        out[layout] = {
            "problems": len(mine),
            "timed": len(ratios),
            "geomean": geo,
            "min": min(ratios) if ratios else None,
            "max": max(ratios) if ratios else None,
            "moved": sum(1 for r in mine if r.get("ratio") and not r["within_noise"]),
            "pick_mismatch": sum(1 for r in mine if r.get("same_pick") is False),
            "check_failed": sum(1 for r in mine if r.get("errors")),
            "pass": geo is not None and abs(geo - 1.0) <= TARGET and len(ratios) == len(mine),
        }
    return out


def fmt(x, spec: str, width: int) -> str:
    return format(x, spec).rjust(width) if isinstance(x, (int, float)) else "-".rjust(width)


def format_row(r: dict) -> str:
    picks = r.get("new_pick") or "?"
    if not r.get("same_pick"):
        picks += f" / {r.get('old_pick') or '?'}"
    line = (
        f"{r['problem'][:66]:66s} {fmt(r.get('new_us'), '.1f', 9)} {fmt(r.get('old_us'), '.1f', 9)}"
        f" {fmt(r.get('ratio'), '.4f', 7)} {fmt(r.get('noise'), '.3f', 6)}"
        f" {'' if r.get('within_noise', True) else '*':1s} {picks}"
    )
    if r.get("errors"):
        line += "  ! " + "; ".join(f"{k}: {v}" for k, v in r["errors"].items())[:300]
    return line


ROW_HEADER = (
    f"{'problem':66s} {'new us':>9s} {'old us':>9s} {'new/old':>7s} {'spread':>6s}   picks"
    " (* = moved beyond the spread)"
)


def format_summary(summary: dict) -> str:
    lines = [
        (
            f"{'layout':10s} {'probs':>5s} {'timed':>5s} {'geomean':>8s} {'min':>7s} {'max':>7s} "
            f"{'moved':>5s} {'picks!=':>7s} {'failed':>6s}  target 1.00 +- {TARGET:.2f}"
        )
    ]
    for layout, s in summary.items():
        lines.append(
            f"{layout:10s} {s['problems']:5d} {s['timed']:5d} {fmt(s['geomean'], '.4f', 8)} "
            f"{fmt(s['min'], '.3f', 7)} {fmt(s['max'], '.3f', 7)} {s['moved']:5d} "
            f"{s['pick_mismatch']:7d} {s['check_failed']:6d}  {'PASS' if s['pass'] else 'MISS'}"
        )
    return "\n".join(lines)
