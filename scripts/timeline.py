"""Where a short kernel's time goes: per-CTA timer stamps of the timeline build (stage variant bit
3, include/moegemm/common/timeline_probe.cuh) beside the event time of the production build.

    python3 scripts/timeline.py masked/11/masked m64n256k64s5w1c1x1 m48n128k64s8w2c1x1t

For each config (default: the heuristic's pick): the production build is checked against FP32 and
timed with CUDA events (queued launches, as bench_bf16.py); the timeline build is checked too
(its results stay right), then launched --launches times, each alone between synchronizations,
and its printf lines are parsed. Reported, in µs from the launch's first CTA entry (min / median
/ max over CTAs): entry, ready (barriers set up), first tile (layout integers read), first data
(first stage landed), last mainloop end and exit; the span (last exit - first entry) beside
the event time; the weight bytes over the span against a copy that moves as many bytes, timed
the same way. --json writes every number.

With several tiles per CTA the spans came out 1.8-2.9x the event time (masked/7, masked/9):
unreliable there, cause not isolated (the printing, or launches timed alone instead of queued).
Single-wave kernels and the intra-CTA cycle counts are what was read.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from profile_case import configs_by_name, find_case

from moegemm.jit.codegen import TIMELINE_VARIANT

PRODUCER_POINTS = ("entry", "ready", "first_tile", "last_issue")
MATH_POINTS = ("entry", "first_data", "last_mainloop_end", "exit")


def parse_lines(text: str) -> dict[str, dict[int, list[int]]]:
    """{'P'|'M': {cta: [ns0..ns3, clk0..clk3, tiles]}} from one launch's printf output."""
    out: dict[str, dict[int, list[int]]] = {"P": {}, "M": {}}
    for line in text.splitlines():
        if not line.startswith("TL") or len(line) < 4:
            continue
        fields = line[4:].split()
        if len(fields) != 10:
            continue
        out[line[2]][int(fields[0])] = [int(x) for x in fields[1:]]
    return out


def summarize(launch: dict[str, dict[int, list[int]]]) -> dict:
    """Stamps relative to the first CTA entry (µs), min/median/max over CTAs; SM-clock
    durations per CTA (median cycles)."""
    prod, math_ = launch["P"], launch["M"]
    t0 = min(v[0] for v in list(prod.values()) + list(math_.values()))

    def spread(values: list[float]) -> list[float]:
        return [min(values), statistics.median(values), max(values)]

    points = {}
    for i, name in enumerate(PRODUCER_POINTS):
        vals = [(v[i] - t0) / 1e3 for v in prod.values() if v[i]]  # 0: a CTA without tiles
        if vals:
            points[f"P.{name}"] = spread(vals)
    for i, name in enumerate(MATH_POINTS):
        vals = [(v[i] - t0) / 1e3 for v in math_.values() if v[i]]
        if vals:
            points[f"M.{name}"] = spread(vals)
    cycles = {
        "P.entry->ready": statistics.median(v[5] - v[4] for v in prod.values()),
        "P.ready->first_tile": statistics.median(v[6] - v[5] for v in prod.values() if v[2]),
        "M.entry->first_data": statistics.median(v[5] - v[4] for v in math_.values() if v[1]),
        "M.last_mainloop_end->exit": statistics.median(v[7] - v[6] for v in math_.values() if v[2]),
    }
    span = max(v[3] for v in math_.values()) - t0
    tiles = sorted(v[8] for v in math_.values())
    return {
        "ctas": len(math_),
        "span_us": span / 1e3,
        "points_us": points,
        "median_cycles": cycles,
        "tiles_min_max": [tiles[0], tiles[-1]],
    }


class CapturedStdout:
    """Redirects file descriptor 1 (where device printf lands) into a temporary file."""

    def __enter__(self):
        self.libc = ctypes.CDLL(None)
        sys.stdout.flush()
        self.libc.fflush(None)
        self.file = tempfile.TemporaryFile(mode="w+")
        self.saved = os.dup(1)
        os.dup2(self.file.fileno(), 1)
        return self

    def __exit__(self, *exc):
        self.libc.fflush(None)
        os.dup2(self.saved, 1)
        os.close(self.saved)
        self.file.seek(0)
        self.text = self.file.read()
        self.file.close()
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", help="a heuristic_quality case id, e.g. masked/11/masked")
    parser.add_argument("configs", nargs="*", help="config short names (default: the pick)")
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import torch
    from bench_bf16 import Timer, touched_weight_bytes
    from heuristic_quality import TOL, Problem, desc_for

    import moegemm.api.plans as plans_mod
    from moegemm.heuristics import SM90, select_config, sm90

    q = find_case(args.case)
    if q.layout not in ("offs", "idx", "masked"):
        raise SystemExit(
            f"{q.id}: the probe is in the m-grouped kernels only (bit 3 means "
            "something else to the k-grouped one)"
        )
    legal = configs_by_name(q)
    pick = select_config(desc_for(q), SM90)
    configs = [legal[name] for name in args.configs] if args.configs else [pick]
    prob = Problem(q)
    timer = Timer(queued=True)
    real_build = plans_mod.build_plan
    variant = {"value": 0}

    def build(device, desc, config=None, stage_variant=0):
        return real_build(device, desc, config, stage_variant or variant["value"])

    plans_mod.build_plan = build

    weight_bytes = touched_weight_bytes(q.case)
    half = max(1, weight_bytes // 4)  # BF16 elements: reads weight_bytes / 2, writes as many
    copies = [
        torch.empty(half, dtype=torch.bfloat16, device="cuda") for _ in range(len(prob.bs) + 1)
    ]
    copy_state = {"i": 0}

    def copy_once():
        i = copy_state["i"] = (copy_state["i"] + 1) % (len(copies) - 1)
        copies[i + 1].copy_(copies[i])

    copy_us = timer(copy_once)
    print(
        f"{q.id}: weight bytes {weight_bytes / 1e6:.1f} MB; a copy moving as many bytes "
        f"{copy_us:.1f} us ({weight_bytes / copy_us / 1e3:.0f} GB/s)"
    )
    report: dict = {
        "case": q.id,
        "weight_bytes": weight_bytes,
        "copy_same_bytes_us": copy_us,
        "configs": {},
    }
    for cfg in configs:
        name = cfg.short_name()
        variant["value"] = 0
        diff = prob.check(cfg)
        if not diff < TOL:
            raise SystemExit(f"{name}: calc_diff {diff:.2e}")
        event_us = timer(prob.timed(cfg))
        variant["value"] = TIMELINE_VARIANT
        with CapturedStdout():
            diff_tl = prob.check(cfg)
        if not diff_tl < TOL:
            raise SystemExit(f"{name} (timeline build): calc_diff {diff_tl:.2e}")
        run = prob.timed(cfg)
        launches = []
        for _ in range(args.launches):
            with CapturedStdout() as cap:
                run()
                torch.cuda.synchronize()
            launches.append(summarize(parse_lines(cap.text)))
        variant["value"] = 0
        spans = [s["span_us"] for s in launches]
        mid = launches[sorted(range(len(spans)), key=spans.__getitem__)[len(spans) // 2]]
        est = sm90.estimate_cycles(cfg, desc_for(q), SM90)
        print(
            f"\n{name}{' (pick)' if cfg == pick else ''}: event {event_us:.1f} us; span "
            f"{statistics.median(spans):.1f} us (launches {', '.join(f'{s:.1f}' for s in spans)});"
            f" {mid['ctas']} CTAs, tiles per CTA {mid['tiles_min_max']}; model {est:.0f} cyc"
        )
        print(
            f"  weight bytes / span: {weight_bytes / statistics.median(spans) / 1e3:.0f} GB/s;"
            f" / event: {weight_bytes / event_us / 1e3:.0f} GB/s"
        )
        print("  point (µs from first entry)      min   median      max   [median launch]")
        for point, (lo, med, hi) in mid["points_us"].items():
            print(f"  {point:28s} {lo:8.2f} {med:8.2f} {hi:8.2f}")
        for what, cyc in mid["median_cycles"].items():
            print(f"  {what:28s} {cyc:8.0f} cycles (median CTA)")
        report["configs"][name] = {
            "pick": cfg == pick,
            "event_us": event_us,
            "spans_us": spans,
            "median_launch": mid,
            "model_cycles": est,
        }
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
