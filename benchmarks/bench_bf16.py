"""BF16 grouped GEMMs (m-grouped offs / m_indices / masked, k-grouped) against in-run peers.

Runs the DeepGEMM anchor cases (bf16_cases.py keeps their published numbers as data) and the
decode, prefill, masked and k_grouped suites of moe_shapes.json. For each case: inputs per the
protocol (random normal, weights x 0.02), a correctness check against an FP32 reference on the
real rows (outputs NaN-poisoned first, max calc_diff over groups), then timings of moegemm and
of the peers in the same process:

  contiguous  moegemm `offs` (packed rows), moegemm `m_indices` (128-row padded segments),
              torch._grouped_mm on the packed rows, a per-expert torch.mm loop (G <= 32)
  masked      moegemm masked, torch._grouped_mm on the packed valid rows, padded torch.bmm
              over [G, max_m, K], a per-expert torch.mm loop (G <= 32)
  k_grouped   moegemm (FP32 D, C accumulated in place as in DeepGEMM's test),
              torch._grouped_mm(a.t(), b, offs=offs) (FP32 out if supported), per-group torch.mm

Ceilings: a device-to-device copy (bytes read + written) and cuBLAS dense BF16 8192^3, measured
at the start of the run and again right before and after every case. The H200's clocks drift
by up to 10% over a sustained run, and one ceiling measurement scatters by several percent, so
the targets use the median of all the samples taken beside the cases (the sustained state every
case ran in); each row's %copy / %cuBL column is against its own before/after mean, and the JSON
and the summary also give everything against the start-of-run ceilings (what runs before
2026-11-30 reported). --fixed-ceilings skips the samples beside the cases.

FLOPs count real rows only; "GB/s w" counts the weight bytes of the groups that have rows.
Timing is a CUDA-event median per call; by default the timed launches are queued behind a GPU
sleep so host overhead (ours and the peers') is hidden (--timer events uses
moegemm.testing.bench_us as is). Weights smaller than 3x the L2 rotate among buffers.

Walk twins: where the `offs` or masked pick walks its groups in stripes of m-blocks (K >= 4096,
groups of more than 8 m-blocks), it and the same config with the whole-group walk are checked
bitwise against each other and timed alternately through `config=`, after the peers (column
wh/st: whole-group time / striped time, > 1 = stripes faster).

Prints one line per case and a geometric mean per ratio column; --json PATH writes everything
there (nothing is written anywhere else). The helpers live in bench_common.py (inputs, timer,
precompilation) and bench_report.py (ceilings, metrics, table, summary).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import random
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict

import torch
from bench_common import (
    TOL,
    Timer,
    descs_for,
    geomean,  # noqa: F401 - heuristic_quality.py imports it from here
    nan_tensor,
    precompile,
    probe_out_dtype,
    randn_bf16,
    rotating,
    run_info,
    spec_for,
    try_time,
    weight_sets,
    worse,
)
from bench_report import (
    HEADER,
    Ceilings,
    add_metrics,
    add_shares,
    adjacent_ceilings,
    apply_run_medians,
    format_row,
    print_summary,
    summarize,
)
from bf16_cases import (
    ALIGN,
    ANCHOR_GPU,
    SUITES,
    Case,
    filter_cases,
    group_layouts,
    load_cases,
    round_up,  # noqa: F401 - heuristic_quality.py imports it from here
)

import moegemm
from moegemm.heuristics import GemmConfig
from moegemm.testing import calc_diff

WALK_TWIN_ROUNDS = 2  # striped, whole, striped, whole, striped: medians of each

# call(b, out, config) runs the layout's API with weights b into out, the config forced.
LayoutCall = Callable[[torch.Tensor, torch.Tensor, GemmConfig], object]


def whole_group_twin(config: GemmConfig) -> GemmConfig:
    """`config` with the whole-group walk (all of a group's m-blocks per n-block)."""
    return dataclasses.replace(config, layout=dataclasses.replace(config.layout, stripe_m=0))


def walk_twins(case: Case) -> tuple[GemmConfig, GemmConfig] | None:
    """(pick, whole-group twin) for a case whose `offs` or masked pick walks its groups in
    stripes, else None: the benchmark times both in the same run (WALK_TWIN_ROUNDS)."""
    from moegemm.families import select_config
    from moegemm.launch.device import arch_for_device

    if case.layout == "k_grouped":
        return None
    pick = select_config(descs_for(case)[0], arch_for_device(torch.cuda.current_device()))
    if not pick.layout.stripe_m:
        return None
    return pick, whole_group_twin(pick)


def walk_twin_columns(
    res: dict,
    timer: Callable[[Callable[[], object]], float],
    case_or_twins: Case | tuple[GemmConfig, GemmConfig],
    weights: list[torch.Tensor],
    new_out: Callable[[], torch.Tensor],
    call: LayoutCall,
) -> None:
    """For a striped pick (case_or_twins: the Case, or (pick, whole) already chosen): runs it
    and its whole-group twin once each on weights[0] into fresh NaN-poisoned outputs from
    new_out() and records whether they wrote the same bits (rows neither writes stay the same
    NaN), then times the two alternately (striped, whole, ...; both through `config=`, so both
    take the same host path) and records whole / striped time (> 1: stripes faster).
    A failure is reported under errors and leaves the row's other columns alone."""
    errors = res.setdefault("errors", {})
    try:
        twins = walk_twins(case_or_twins) if isinstance(case_or_twins, Case) else case_or_twins
        if not twins:
            return
        outs = []
        for config in twins:
            out = new_out()
            call(weights[0], out, config)
            outs.append(out)
        res["walk_twin_bitwise"] = bool(
            torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
        )
        del outs
        if not res["walk_twin_bitwise"]:
            errors["check"] = (
                errors.get("check", "") + " whole-group walk twin differs from the striped pick"
            ).strip()
        pick, whole = twins
        out = new_out()

        def run_with(config: GemmConfig) -> Callable[[], object]:
            return rotating(lambda b: call(b, out, config), weights)

        striped_us, whole_us = [], []
        for _ in range(WALK_TWIN_ROUNDS):
            striped_us.append(timer(run_with(pick)))
            whole_us.append(timer(run_with(whole)))
        striped_us.append(timer(run_with(pick)))
        res["walk_pick"], res["walk_whole"] = pick.short_name(), whole.short_name()
        res["striped_us"] = statistics.median(striped_us)
        res["whole_walk_us"] = statistics.median(whole_us)
        res["whole_over_striped"] = res["whole_walk_us"] / res["striped_us"]
    except Exception as exc:  # noqa: BLE001 - the row keeps its other columns
        errors["walk_twin"] = f"{type(exc).__name__}: {exc}"[:300]
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()


def run_contiguous(case: Case, timer: Timer, loop_max_groups: int) -> dict:
    g, n, k, rows = case.num_groups, case.n, case.k, case.rows
    lay = group_layouts(rows, ALIGN, device="cuda")
    total, padded = case.total_rows, lay["padded_total"]
    a = randn_bf16(total, k)
    bs = weight_sets(case)
    offs, m_indices = lay["offs"], lay["m_indices"]
    a_pad = randn_bf16(padded, k)  # padding rows stay random (never zeros)
    a_pad[lay["real_rows"]] = a
    d = nan_tensor(total, n)
    d_pad = nan_tensor(padded, n)
    api = moegemm.m_grouped_bf16_gemm_nt_contiguous
    api(a, bs[0], d, offs=offs)
    api(a_pad, bs[0], d_pad, m_indices)
    torch.cuda.synchronize()
    diff_offs = diff_idx = 0.0
    for grp, (r, s, ps) in enumerate(zip(rows, lay["starts"], lay["padded_starts"])):
        if r:
            ref = a[s : s + r].float() @ bs[0][grp].float().t()
            diff_offs = worse(diff_offs, calc_diff(d[s : s + r], ref))
            diff_idx = worse(diff_idx, calc_diff(d_pad[ps : ps + r], ref))
            del ref
    res: dict = {
        "calc_diff": diff_offs,
        "calc_diff_idx": diff_idx,
        "rotate": len(bs),
        "padded_rows": padded,
        "errors": {},
    }
    if not (diff_offs < TOL and diff_idx < TOL):
        res["errors"]["check"] = f"calc_diff offs {diff_offs:.2e} m_indices {diff_idx:.2e}"
    errors = res["errors"]
    res["ours_us"] = timer(rotating(lambda b: api(a, b, d, offs=offs), bs))
    res["ours_idx_us"] = timer(rotating(lambda b: api(a_pad, b, d_pad, m_indices), bs))
    res["torch_us"] = try_time(
        timer,
        rotating(lambda b: torch._grouped_mm(a, b.transpose(-2, -1), offs=offs), bs),
        "torch_grouped_mm",
        errors,
    )
    if g <= loop_max_groups:
        pieces = [
            (grp, a[s : s + r], d[s : s + r])
            for grp, (r, s) in enumerate(zip(rows, lay["starts"]))
            if r
        ]

        def loop(b: torch.Tensor) -> None:
            for grp, ag, dg in pieces:
                torch.mm(ag, b[grp].t(), out=dg)

        res["loop_us"] = try_time(timer, rotating(loop, bs), "loop", errors)
    # Last, so the extra bursts cannot heat the GPU for the peers above.
    walk_twin_columns(
        res,
        timer,
        case,
        bs,
        lambda: nan_tensor(total, n),
        lambda b, out, config: api(a, b, out, offs=offs, config=config),
    )
    return res


def run_masked(case: Case, timer: Timer, loop_max_groups: int) -> dict:
    g, n, k, rows, max_m = case.num_groups, case.n, case.k, case.rows, case.max_m
    a = randn_bf16(g, max_m, k)
    bs = weight_sets(case)
    d = nan_tensor(g, max_m, n)
    masked_m = torch.tensor(rows, device="cuda", dtype=torch.int32)
    api = moegemm.m_grouped_bf16_gemm_nt_masked
    api(a, bs[0], d, masked_m, case.expected_m)
    torch.cuda.synchronize()
    diff, untouched = 0.0, True
    for grp, r in enumerate(rows):
        if r:
            ref = a[grp, :r].float() @ bs[0][grp].float().t()
            diff = worse(diff, calc_diff(d[grp, :r], ref))
        untouched = untouched and bool(d[grp, r:].isnan().all())
    res: dict = {"calc_diff": diff, "untouched_ok": untouched, "rotate": len(bs), "errors": {}}
    if not (diff < TOL and untouched):
        res["errors"]["check"] = f"calc_diff {diff:.2e}, rows past masked_m untouched: {untouched}"
    errors = res["errors"]
    expected = case.expected_m
    res["ours_us"] = timer(rotating(lambda b: api(a, b, d, masked_m, expected), bs))
    a_packed = torch.cat([a[grp, :r] for grp, r in enumerate(rows)])
    offs = group_layouts(rows, device="cuda")["offs"]
    res["torch_us"] = try_time(
        timer,
        rotating(lambda b: torch._grouped_mm(a_packed, b.transpose(-2, -1), offs=offs), bs),
        "torch_grouped_mm",
        errors,
    )
    d_bmm = torch.empty(g, max_m, n, device="cuda", dtype=torch.bfloat16)
    res["bmm_us"] = try_time(
        timer, rotating(lambda b: torch.bmm(a, b.transpose(1, 2), out=d_bmm), bs), "bmm", errors
    )
    if g <= loop_max_groups:
        pieces = [(grp, a[grp, :r], d[grp, :r]) for grp, r in enumerate(rows) if r]

        def loop(b: torch.Tensor) -> None:
            for grp, ag, dg in pieces:
                torch.mm(ag, b[grp].t(), out=dg)

        res["loop_us"] = try_time(timer, rotating(loop, bs), "loop", errors)
    # Last, so the extra bursts cannot heat the GPU for the peers above.
    walk_twin_columns(
        res,
        timer,
        case,
        bs,
        lambda: nan_tensor(g, max_m, n),
        lambda b, out, config: api(a, b, out, masked_m, expected, config=config),
    )
    return res


def run_k_grouped(case: Case, timer: Timer, loop_max_groups: int, with_c: bool) -> dict:
    g, m_out, n_out, rows = case.num_groups, case.n, case.k, case.rows
    total = case.total_rows
    a = randn_bf16(total, m_out)
    b = randn_bf16(total, n_out)
    lay = group_layouts(rows, device="cuda")
    offs, starts = lay["offs"], lay["starts"]
    c = torch.randn(g, m_out, n_out, device="cuda")
    d = nan_tensor(g, m_out, n_out, dtype=torch.float32)
    api = moegemm.k_grouped_bf16_gemm_tn_contiguous
    api(a, b, d, offs, c)
    torch.cuda.synchronize()
    diff = 0.0
    for grp, (r, s) in enumerate(zip(rows, starts)):
        ref = a[s : s + r].float().t() @ b[s : s + r].float() + c[grp]
        diff = worse(diff, calc_diff(d[grp], ref))
        del ref
    del c
    res: dict = {"calc_diff": diff, "with_c": with_c, "errors": {}, "notes": {}}
    if not diff < TOL:
        res["errors"]["check"] = f"calc_diff {diff:.2e}"
    errors, notes = res["errors"], res["notes"]
    d.normal_()
    if with_c:  # accumulate into D in place, as DeepGEMM's k-grouped test does
        res["ours_us"] = timer(lambda: api(a, b, d, offs, d))
    else:
        res["ours_us"] = timer(lambda: api(a, b, d, offs))
    at = a.t()
    fn, dtype = probe_out_dtype(
        lambda: torch._grouped_mm(at, b, offs=offs, out_dtype=torch.float32),
        lambda: torch._grouped_mm(at, b, offs=offs),
        notes,
        "torch_grouped_mm",
    )
    res["torch_out_dtype"] = dtype
    res["torch_us"] = try_time(timer, fn, "torch_grouped_mm", errors) if fn else None
    if g <= loop_max_groups:
        pieces = [(a[s : s + r].t(), b[s : s + r]) for r, s in zip(rows, starts) if r]
        fn, dtype = probe_out_dtype(
            lambda: [torch.mm(x, y, out_dtype=torch.float32) for x, y in pieces],
            lambda: [torch.mm(x, y) for x, y in pieces],
            notes,
            "loop",
        )
        res["loop_out_dtype"] = dtype
        res["loop_us"] = try_time(timer, fn, "loop", errors) if fn else None
    return res


def run_case(
    case: Case, timer: Timer, args: argparse.Namespace, ceilings: Ceilings, start: dict
) -> dict:
    """One row: the layout's checks and timings, its metrics against the ceilings, or the
    exception that stopped it (one failing case must not kill the table)."""
    base = {
        "case": case.name,
        "suite": case.suite,
        "index": case.index,
        "layout": case.layout,
        "regime": case.regime,
        "num_groups": case.num_groups,
        "n": case.n,
        "k": case.k,
        "total_rows": case.total_rows,
        "min_rows": min(case.rows),
        "max_m": case.max_m,
        "expected_m": case.expected_m,
        "anchor": case.anchor,
    }
    try:
        before = start if args.fixed_ceilings else ceilings.for_regime(case.regime)
        if case.layout == "contiguous":
            res = run_contiguous(case, timer, args.loop_max_groups)
        elif case.layout == "masked":
            res = run_masked(case, timer, args.loop_max_groups)
        else:
            res = run_k_grouped(case, timer, args.loop_max_groups, not args.kg_no_c)
        after = start if args.fixed_ceilings else ceilings.for_regime(case.regime)
        # Only the regime's own ceiling is re-measured beside the case.
        res["ceilings_adjacent"] = adjacent_ceilings(before, after)
        add_metrics(case, res, {**start, **res["ceilings_adjacent"]})  # the row's columns
        add_shares(res, res["ceilings_adjacent"], "_adjacent")
        add_shares(res, start, "_start")
    except Exception as exc:  # noqa: BLE001 - one failing case must not kill the table
        res = {"errors": {"exception": f"{type(exc).__name__}: {exc}"[:500]}}
        if args.verbose:
            traceback.print_exc()
        with contextlib.suppress(Exception):  # a sticky CUDA error: later cases report it
            torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return {**base, **res}


ORDERS = ("natural", "reverse", "shuffle")


def order_cases(cases: list[Case], order: str, seed: int = 0) -> list[Case]:
    """The cases in the order to run them; shuffle is seeded, so a run can be repeated."""
    if order == "reverse":
        return cases[::-1]
    if order == "shuffle":
        shuffled = list(cases)
        random.Random(seed).shuffle(shuffled)
        return shuffled
    if order != "natural":
        raise ValueError(f"unknown order {order!r}; known: {ORDERS}")
    return list(cases)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", metavar="PATH", help="write all results to this JSON file")
    parser.add_argument(
        "--suite",
        action="append",
        choices=SUITES,
        help="run only this suite (repeatable; default: all)",
    )
    parser.add_argument("--cases", help="regex: run only cases whose name matches")
    parser.add_argument("--quick", action="store_true", help="a few cases per suite")
    parser.add_argument(
        "--order",
        choices=ORDERS,
        default="natural",
        help="case order (reverse or shuffle show whether a case's position in the run moves "
        "its timings)",
    )
    parser.add_argument(
        "--timer",
        choices=("queued", "events"),
        default="queued",
        help="queued: launches queued behind a GPU sleep (no host gaps); "
        "events: moegemm.testing.bench_us as is",
    )
    parser.add_argument(
        "--budget-ms",
        type=float,
        default=60.0,
        help="timed GPU time per measurement (sets the iteration count)",
    )
    parser.add_argument("--max-iters", type=int, default=100)
    parser.add_argument(
        "--loop-max-groups",
        type=int,
        default=32,
        help="run the per-expert torch.mm loop only up to this many groups",
    )
    parser.add_argument(
        "--kg-no-c",
        action="store_true",
        help="time k-grouped without C (default: C accumulated in place)",
    )
    parser.add_argument(
        "--pdl",
        action="store_true",
        help="launch moegemm kernels with programmatic dependent launch (moegemm.set_pdl)",
    )
    parser.add_argument(
        "--fixed-ceilings",
        action="store_true",
        help="judge every case by the ceilings measured at the start of the run only",
    )
    parser.add_argument("--jobs", type=int, default=None, help="parallel compiles")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="tracebacks of failures")
    return parser


def precompile_cases(cases: list[Case], jobs: int | None) -> None:
    """Compiles (or finds cached) every kernel the cases will run, in parallel, before any
    timing: the picks of each layout and the whole-group walk twins."""
    from moegemm.families import select_config
    from moegemm.launch.device import arch_for_device

    arch = arch_for_device(torch.cuda.current_device())
    specs = []
    for c in cases:
        for desc in descs_for(c):
            try:
                specs.append(spec_for(desc, select_config(desc, arch)))
            except Exception as exc:  # noqa: BLE001 - the case reports it when it runs
                print(f"# no config for {c.name}: {exc}")
        with contextlib.suppress(Exception):  # the case reports a failure when it runs
            twins = walk_twins(c)
            if twins:
                specs.append(spec_for(descs_for(c)[0], twins[1]))
    precompile(specs, jobs)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    suites = tuple(args.suite) if args.suite else SUITES
    cases = order_cases(filter_cases(load_cases(suites, args.quick), args.cases), args.order)
    if args.list:
        for c in cases:
            print(f"{c.name:64s} {c.layout:10s} rows {c.total_rows} max_m {c.max_m}")
        return 0
    if not torch.cuda.is_available():
        print("bench_bf16: no CUDA device", file=sys.stderr)
        return 1
    if moegemm.get_mk_alignment_for_contiguous_layout() != ALIGN:
        print(
            f"bench_bf16: alignment is {moegemm.get_mk_alignment_for_contiguous_layout()}, "
            f"this script assumes {ALIGN}",
            file=sys.stderr,
        )
        return 1
    torch.manual_seed(0)
    moegemm.set_pdl(args.pdl)
    t_start = time.perf_counter()

    precompile_cases(cases, args.jobs)

    timer = Timer(queued=args.timer == "queued", budget_ms=args.budget_ms, max_iters=args.max_iters)
    ceiling_meter = Ceilings(timer)
    ceilings = ceiling_meter.measure()
    info = run_info()
    if ANCHOR_GPU not in info["gpu"]:
        # DeepGEMM is priced through ratios timed on another GPU: not comparable here.
        for case in cases:
            case.anchor.pop("deepgemm_x_torch", None)
            case.anchor.pop("deepgemm_share_cublas", None)
        print(f"# DeepGEMM anchors were timed on an {ANCHOR_GPU}, not this GPU: vs_dg n/a")
    print(
        f"# {info['gpu']}, torch {info['torch']}, commit {info['commit']}, {info['date_utc']} "
        f"UTC, timer {args.timer}, "
        f"PDL {'on' if args.pdl else 'off'}, order {args.order}; "
        f"copy {ceilings['copy_gbps']:.0f} GB/s, cuBLAS BF16 {ceilings['cublas_tflops']:.0f} "
        f"TFLOP/s at the start; "
        + ("every case judged by these" if args.fixed_ceilings else "each row's %copy / %cuBL "
           "against the same ceilings re-measured beside it; the summary against their "
           "run medians"),
        flush=True,
    )  # fmt: skip
    print(HEADER, flush=True)
    results = []
    for case in cases:
        r = run_case(case, timer, args, ceiling_meter, ceilings)
        results.append(r)
        print(format_row(r), flush=True)
    try:
        ceilings["end"] = ceiling_meter.measure()
    except Exception as exc:  # noqa: BLE001 - a sticky CUDA error must not lose the table
        print(f"# end-of-run ceilings not measured: {type(exc).__name__}: {exc}"[:300])
    ceilings["run_median"] = ceiling_meter.run_medians(ceilings)
    apply_run_medians(cases, results, ceilings["run_median"])
    summary = summarize(results)
    print_summary(summary, ceilings)
    elapsed = time.perf_counter() - t_start
    print(f"# {len(results)} cases in {elapsed:.0f} s")
    if args.json:
        out = {
            **info,
            "timer": args.timer,
            "pdl": args.pdl,
            "order": args.order,
            "ceilings": ceilings,
            "cases": results,
            **summary,
            "elapsed_s": elapsed,
            "case_defs": [asdict(c) for c in cases],
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
