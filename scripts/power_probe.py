"""Sustained runs of prefill shapes with the SM clock and board power sampled beside them.

    python scripts/power_probe.py [--seconds 2.0] [--json F]

Compute-bound kernels on the H200 run into its power limit: cuBLAS at 8192^3 was measured at
806 TFLOP/s at the start of a benchmark and 709 in its middle. Event times alone then cannot
tell a kernel that does less work per SM cycle from one that burns more power per FLOP (and so
runs at a lower clock). This script runs each candidate back to back for --seconds while
`nvidia-smi` samples clocks.sm and power.draw every 50 ms, and prints per candidate:
TFLOP/s over the window, median SM clock and power, and FLOP per SM cycle per SM (TFLOP/s over
clock x SMs), the clock-free efficiency. It also prints the name of cuBLAS's kernel (one
profiled call). Outputs are checked against FP32 before timing (the dense ones whole, the
grouped ones group by group). Windows shorter than 8 samples (--seconds below ~0.4) print no
clock or power: their times are valid, the samples would describe the idle GPU around them.
--profile-range runs each candidate once inside a profiler range instead, for
`ncu --profile-from-start off` (DRAM and L2 bytes per kernel).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_bf16 import TOL, nan_tensor, randn_bf16
from bf16_cases import anchor_rows, group_layouts

import moegemm
from moegemm.testing import calc_diff

# (name, groups, N, K, expected rows per group): the anchors' compute-bound grouped shapes,
# the three of the first run first.
CASES = [
    ("mixtral L1 prefill", 8, 28672, 4096, 4096),
    ("gpt-oss-120b L1", 128, 5760, 2880, 256),
    ("dsv3-ep8 L2 prefill", 32, 7168, 2048, 1024),
    ("dsv3-ep8 L1 prefill", 32, 4096, 7168, 1024),
    ("qwen3-30b L1 prefill", 128, 1536, 2048, 1024),
    ("qwen3-235b-ep8 L1", 16, 3072, 4096, 4096),
    ("dg-test v4pro L1", 4, 6144, 7168, 8192),
    ("dg-test v4flash L2", 8, 4096, 2048, 4096),
]


def other_walk_runner(a, b, d, offs):
    """(label, runner): the API's own pick for these operands with the other grouped walk
    (stripes of sm90.WALK_STRIPE_M m-blocks where the pick takes whole groups, and back)."""
    import dataclasses
    import math

    from moegemm.heuristics import GemmDesc, select_config, sm90
    from moegemm.heuristics.arch import arch_for

    total, k = a.shape
    groups, n, _ = b.shape
    desc = GemmDesc("m_grouped_offsets", total, n, k, groups, expected_m=math.ceil(total / groups))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    pick = select_config(desc, arch_for("sm_90a", sms))
    stripe = 0 if pick.layout.stripe_m else sm90.WALK_STRIPE_M
    config = dataclasses.replace(pick, layout=dataclasses.replace(pick.layout, stripe_m=stripe))
    api = moegemm.m_grouped_bf16_gemm_nt_contiguous
    label = f"ours_stripes{stripe}" if stripe else "ours_whole"
    return label, lambda: api(a, b, d, offs=offs, config=config)


class Sampler:
    """nvidia-smi in the background, one line of clock and power every 50 ms."""

    def __enter__(self) -> Sampler:  # noqa: PYI034
        self.proc = subprocess.Popen(
            [
                "nvidia-smi",
                "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                "--format=csv,noheader,nounits",
                "-lms",
                "50",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        out, _ = self.proc.communicate()
        self.rows = []
        for line in out.splitlines():
            parts = [p.strip() for p in line.split(",")]
            try:
                self.rows.append(tuple(float(p) for p in parts))
            except ValueError:
                continue


def sustained(fn, seconds: float) -> tuple[float, list[tuple[float, ...]]]:
    """µs per call over a back-to-back window of about `seconds`, and the samples taken in it."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(3):
        fn()
    end.record()
    torch.cuda.synchronize()
    per_call_ms = start.elapsed_time(end) / 3
    iters = max(5, int(seconds * 1e3 / per_call_ms))
    with Sampler() as sampler:
        time.sleep(0.15)  # the sampler's first lines describe the idle GPU
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        torch.cuda.synchronize()
    window_ms = start.elapsed_time(end)
    # Drop the first and last eighth of the samples: idle edges of the window. A window too
    # short for 8 samples (60 ms bursts) gives none: its clock and power are not known.
    rows = sampler.rows
    keep = rows[len(rows) // 8 : len(rows) - len(rows) // 8] if len(rows) >= 8 else []
    return window_ms * 1e3 / iters, keep


def kernel_names(fn) -> list[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sorted({e.name for e in prof.events() if e.device_type.name == "CUDA"})


def check_groups(a, b, d, rows: list[int], label: str) -> None:
    """Every group of the grouped output against FP32 (calc_diff < TOL)."""
    start = 0
    for grp, r in enumerate(rows):
        if r:
            ref = a[start : start + r].float() @ b[grp].float().t()
            if not calc_diff(d[start : start + r], ref) < TOL:
                raise SystemExit(f"{label}: group {grp} is wrong")
        start += r


def run_case(
    name: str,
    groups: int,
    n: int,
    k: int,
    expected_m: int,
    seconds: float,
    profile_range: bool,
    stripes: bool = False,
    skip: tuple[str, ...] = (),
) -> dict:
    rows = anchor_rows(expected_m, groups)
    total = sum(rows)
    a = randn_bf16(total, k)
    b = randn_bf16(groups, n, k, scale=0.02)
    w = b[0]
    d = nan_tensor(total, n)
    offs = group_layouts(rows, device="cuda")["offs"]
    moegemm.bf16_gemm_nt(a, w, d)
    if not calc_diff(d, a.float() @ w.float().t()) < TOL:
        raise SystemExit(f"{name}: ours_dense is wrong")
    d.fill_(float("nan"))
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)
    check_groups(a, b, d, rows, f"{name}: ours_grouped")
    fns = {
        "cublas_dense": lambda: torch.mm(a, w.t(), out=d),
        "ours_dense": lambda: moegemm.bf16_gemm_nt(a, w, d),
        "ours_grouped": lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs),
        "torch_grouped": lambda: torch._grouped_mm(a, b.transpose(-2, -1), offs=offs),
    }
    if stripes:
        label, fns[label] = other_walk_runner(a, b, d, offs)
        d.fill_(float("nan"))
        fns[label]()
        check_groups(a, b, d, rows, f"{name}: {label}")
    for label in skip:
        fns.pop(label, None)
    if profile_range:
        # One call of each inside a profiler range (run under ncu --profile-from-start off).
        for fn in fns.values():
            fn()
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for label, fn in fns.items():
            with torch.cuda.nvtx.range(label):
                fn()
            torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        return {"case": name, "rows": total, "kernels": {}, "runs": {}}
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flops = 2.0 * total * n * k
    out = {"case": name, "rows": total, "kernels": {}, "runs": {}}
    for label in ("cublas_dense",):
        out["kernels"][label] = kernel_names(fns[label])
    # Two passes in opposite orders, so that no candidate always runs on the hottest GPU.
    for order in (list(fns), list(reversed(fns))):
        for label in order:
            us, samples = sustained(fns[label], seconds)
            clock = statistics.median(s[0] for s in samples) if samples else float("nan")
            power = statistics.median(s[1] for s in samples) if samples else float("nan")
            temp = statistics.median(s[2] for s in samples) if samples else float("nan")
            tflops = flops / (us * 1e-6) / 1e12
            out["runs"].setdefault(label, []).append(
                {
                    "us": us,
                    "tflops": tflops,
                    "clock_mhz": clock,
                    "power_w": power,
                    "temp_c": temp,
                    "flop_per_clk_sm": tflops * 1e12 / (clock * 1e6 * sms),
                    "samples": len(samples),
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--cases", default=None, help="substring filter on the case names")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--profile-range",
        action="store_true",
        help="instead of timing, run each candidate once inside a profiler range (for ncu)",
    )
    parser.add_argument(
        "--stripes",
        action="store_true",
        help="also time the pick with the other grouped walk (stripes of 8 m-blocks or whole "
        "groups, whichever the pick does not take)",
    )
    parser.add_argument("--no-dense", action="store_true", help="leave out ours_dense (saves time)")
    args = parser.parse_args(argv)
    results = []
    for case in CASES:
        if args.cases and args.cases not in case[0]:
            continue
        res = run_case(
            *case, seconds=args.seconds, profile_range=args.profile_range, stripes=args.stripes,
            skip=("ours_dense",) if args.no_dense else (),
        )  # fmt: skip
        results.append(res)
        if args.profile_range:
            continue
        print(f"== {res['case']} ({res['rows']} rows)")
        for label, names in res["kernels"].items():
            print(f"  {label} kernels: {'; '.join(names)}")
        print(
            f"  {'candidate':14s} {'pass':>4s} {'us':>9s} {'TF/s':>6s} {'MHz':>6s} "
            f"{'W':>6s} {'C':>4s} {'FLOP/clk/SM':>11s}"
        )
        for label, runs in res["runs"].items():
            for i, r in enumerate(runs):
                print(
                    f"  {label:14s} {i:4d} {r['us']:9.1f} {r['tflops']:6.1f} "
                    f"{r['clock_mhz']:6.0f} {r['power_w']:6.1f} {r['temp_c']:4.0f} "
                    f"{r['flop_per_clk_sm']:11.1f}",
                    flush=True,
                )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
