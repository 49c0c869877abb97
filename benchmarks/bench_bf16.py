"""BF16 grouped GEMMs (m-grouped offs / m_indices / masked, k-grouped) against in-run peers.

Runs the DeepGEMM anchor cases of /work/shared/BENCHMARKS.md (their published numbers are kept
below as data) and the decode, prefill, masked and k_grouped suites of moe_shapes.json. For
each case: inputs per the protocol (random normal, weights x 0.02), a correctness check against
an FP32 reference on the real rows (outputs NaN-poisoned first, max calc_diff over groups),
then timings of moegemm and of the peers in the same process:

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

Prints one line per case and a geometric mean per ratio column; --json writes everything.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import itertools
import json
import math
import os
import random
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass

import torch
from bf16_cases import (
    ALIGN,
    SUITES,
    Case,
    filter_cases,
    group_layouts,
    load_cases,
    round_up,
)

import moegemm
from moegemm.testing import bench_us, calc_diff

L2_BYTES = 60 * 2**20
ROTATE_BELOW = 3 * L2_BYTES
MAX_ROTATE = 16
TOL = 1e-5
WALK_TWIN_ROUNDS = 2  # striped, whole, striped, whole, striped: medians of each


def descs_for(case: Case) -> list:
    """The GemmDescs moegemm's API builds for this case (for parallel precompilation)."""
    from moegemm.heuristics import GemmDesc

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


def spec_for(desc, config, stage_variant: int = 0):
    """The kernel spec `desc` builds with `config` (stage_variant: a timing build, see codegen)."""
    from moegemm.jit.codegen import sm90_bf16_gemm_spec, sm90_bf16_k_grouped_spec

    if desc.kind == "k_grouped":
        return sm90_bf16_k_grouped_spec(config, desc.with_c, stage_variant)
    return sm90_bf16_gemm_spec(config, desc.d_dtype, desc.with_c, desc.kind, stage_variant)


def walk_twins(case: Case):
    """(pick, whole-group twin) for a case whose `offs` or masked pick walks its groups in
    stripes, else None: the benchmark times both in the same run (WALK_TWIN_ROUNDS)."""
    import dataclasses

    from moegemm.api.device import arch_for_device
    from moegemm.heuristics import select_config

    if case.layout == "k_grouped":
        return None
    pick = select_config(descs_for(case)[0], arch_for_device(torch.cuda.current_device()))
    if not pick.layout.stripe_m:
        return None
    whole = dataclasses.replace(pick, layout=dataclasses.replace(pick.layout, stripe_m=0))
    return pick, whole


def walk_twin_columns(res: dict, timer, case_or_twins, weights: list, new_out, call) -> None:
    """For a striped pick (case_or_twins: the Case, or (pick, whole) already chosen): runs it
    and its whole-group twin once each on weights[0] into fresh NaN-poisoned outputs from
    new_out() and records whether they wrote the same bits (rows neither writes stay the same
    NaN), then times the two alternately (striped, whole, ...; both through `config=`, so both
    take the same host path) and records whole / striped time (> 1: stripes faster).
    call(b, out, config) runs the layout's API. A failure is reported under errors and leaves
    the row's other columns alone."""
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

        def run_with(config):
            return rotating(lambda b: call(b, out, config), weights)

        striped_us, whole_us = [], []
        for _ in range(WALK_TWIN_ROUNDS):
            striped_us.append(timer(run_with(pick)))
            whole_us.append(timer(run_with(whole)))
        striped_us.append(timer(run_with(pick)))
        res["walk_pick"] = pick.short_name()
        res["striped_us"] = statistics.median(striped_us)
        res["whole_walk_us"] = statistics.median(whole_us)
        res["whole_over_striped"] = res["whole_walk_us"] / res["striped_us"]
    except Exception as exc:  # noqa: BLE001 - the row keeps its other columns
        errors["walk_twin"] = f"{type(exc).__name__}: {exc}"[:300]
        with contextlib.suppress(Exception):
            torch.cuda.synchronize()


def precompile(specs: list, jobs: int | None = None, quiet: bool = False) -> dict:
    """Compile (or find cached) every spec in parallel; returns {spec: error string}."""
    from moegemm.jit.cache import build_or_load

    unique = list(dict.fromkeys(specs))
    errors: dict = {}
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
    queued: bool = True
    budget_ms: float = 60.0
    max_iters: int = 100
    min_iters: int = 5

    def __call__(self, fn) -> float:
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


def rotating(fn, buffers: list):
    """A no-argument callable that passes the next buffer of `buffers` to fn on every call."""
    cycle = itertools.cycle(buffers)
    return lambda: fn(next(cycle))


def rotation_count(weight_bytes: int) -> int:
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


def try_time(timer: Timer, fn, label: str, errors: dict) -> float | None:
    try:
        return timer(fn)
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run this case reads n/a
        errors[label] = f"{type(exc).__name__}: {exc}"[:300]
        torch.cuda.synchronize()
        return None


def probe_out_dtype(fn_fp32, fn_bf16, notes: dict, label: str):
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

        def loop(b):
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

        def loop(b):
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


# ----------------------------------------------------------------------------------------------
# Ceilings, metrics, report


class Ceilings:
    """The copy and cuBLAS ceilings, buffers kept so they can be re-measured beside a case."""

    COPY_BYTES, MM_SIZE = 1 << 30, 8192  # copy: 1 GiB read + 1 GiB written

    def __init__(self, timer: Timer):
        self.timer = timer
        self.samples: dict[str, list[float]] = {"copy_gbps": [], "cublas_tflops": []}
        self.src = torch.empty(self.COPY_BYTES, dtype=torch.uint8, device="cuda").random_(0, 255)
        self.dst = torch.empty_like(self.src)
        size = self.MM_SIZE
        self.a, self.b = randn_bf16(size, size), randn_bf16(size, size)
        self.out = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)

    def copy_gbps(self) -> float:
        return 2 * self.COPY_BYTES / self.timer(lambda: self.dst.copy_(self.src)) / 1e3

    def cublas_tflops(self) -> float:
        us = self.timer(lambda: torch.mm(self.a, self.b.t(), out=self.out))
        return 2 * self.MM_SIZE**3 / us / 1e6

    def measure(self) -> dict:
        return {"copy_gbps": self.copy_gbps(), "cublas_tflops": self.cublas_tflops()}

    def for_regime(self, regime: str) -> dict:
        """The ceiling a case of `regime` is judged by, measured now and kept as a sample."""
        key = "copy_gbps" if regime == "decode" else "cublas_tflops"
        value = self.copy_gbps() if regime == "decode" else self.cublas_tflops()
        self.samples[key].append(value)
        return {key: value}

    def run_medians(self, start: dict) -> dict:
        """Median of the samples taken beside the cases (the start-of-run value if none)."""
        return {
            key: statistics.median(vals) if vals else start[key]
            for key, vals in self.samples.items()
        }


def apply_run_medians(cases: list[Case], results: list[dict], medians: dict) -> None:
    """Make the run-median shares the headline pct_cublas / pct_copy (and DeepGEMM's share
    ratio) of every result that has timings."""
    for case, r in zip(cases, results):
        if not r.get("tflops"):
            continue
        add_shares(r, medians, "_run_median")
        r["pct_cublas"] = r["pct_cublas_run_median"]
        if "pct_copy_run_median" in r:
            r["pct_copy"] = r["pct_copy_run_median"]
        if "deepgemm_share_cublas" in case.anchor:
            r["vs_dg_share"] = r["pct_cublas"] / case.anchor["deepgemm_share_cublas"]


def adjacent_ceilings(before: dict, after: dict) -> dict:
    return {key: (before[key] + after[key]) / 2 for key in before}


def add_shares(res: dict, ceilings: dict, suffix: str = "") -> None:
    """res's TFLOP/s and weight GB/s as shares of the ceilings present, under `suffix`."""
    if res.get("tflops") and "cublas_tflops" in ceilings:
        res["pct_cublas" + suffix] = res["tflops"] / ceilings["cublas_tflops"]
    if res.get("gbps_weights") and "copy_gbps" in ceilings:
        res["pct_copy" + suffix] = res["gbps_weights"] / ceilings["copy_gbps"]


def add_metrics(case: Case, res: dict, ceilings: dict) -> None:
    """Rates of res's timings, their shares of the ceilings, and the ratios to the peers."""
    us = res.get("ours_us")
    if not us:
        return
    if case.layout == "k_grouped":
        flops = 2 * case.n * case.k * case.total_rows
        out_bytes = case.num_groups * case.n * case.k * 4 * (2 if res.get("with_c") else 1)
        res["gbps_all"] = ((case.n + case.k) * case.total_rows * 2 + out_bytes) / us / 1e3
    else:
        flops = 2 * case.total_rows * case.n * case.k
        wbytes = touched_weight_bytes(case)
        res["gbps_weights"] = wbytes / us / 1e3
    res["tflops"] = flops / us / 1e6
    add_shares(res, ceilings)
    for peer in ("torch", "loop", "bmm"):
        if res.get(f"{peer}_us"):
            res[f"x_{peer}"] = res[f"{peer}_us"] / us
    if res.get("ours_idx_us"):
        res["offs_over_idx"] = res["ours_idx_us"] / us  # > 1: offs faster
        if res.get("torch_us"):
            res["x_torch_idx"] = res["torch_us"] / res["ours_idx_us"]
    dg = case.anchor
    if "deepgemm_x_torch" in dg:
        res["dg_x_torch"] = dg["deepgemm_x_torch"]
        if res.get("x_torch"):
            res["vs_dg"] = res["x_torch"] / dg["deepgemm_x_torch"]
        if res.get("x_torch_idx"):
            res["vs_dg_idx"] = res["x_torch_idx"] / dg["deepgemm_x_torch"]
    if "deepgemm_share_cublas" in dg:
        res["vs_dg_share"] = res["pct_cublas"] / dg["deepgemm_share_cublas"]


RATIO_COLUMNS = (
    "x_torch",
    "x_torch_idx",
    "offs_over_idx",
    "x_loop",
    "x_bmm",
    "dg_x_torch",
    "vs_dg",
    "vs_dg_idx",
    "vs_dg_share",
    "whole_over_striped",
)


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def fmt(x, spec: str, width: int) -> str:
    return format(x, spec).rjust(width) if isinstance(x, (int, float)) else "-".rjust(width)


HEADER = (
    f"{'case':58s} {'reg':>7s} {'rows':>7s} {'ours us':>9s} {'idx us':>9s} {'TF/s':>6s} "
    f"{'GB/s w':>7s} {'%copy':>6s} {'%cuBL':>6s} {'xtorch':>6s} {'offs/i':>6s} "
    f"{'xloop':>6s} {'xbmm':>6s} {'DGx':>5s} {'vsDG':>5s} {'wh/st':>5s} {'diff':>8s}"
)


def format_row(r: dict) -> str:
    regime = r["regime"]
    pct_copy = r.get("pct_copy") if regime == "decode" else None
    pct_cublas = r.get("pct_cublas") if regime in ("prefill", "kgrp", "mid") else None
    line = (
        f"{r['case'][:58]:58s} {regime:>7s} {r['total_rows']:7d} "
        f"{fmt(r.get('ours_us'), '.1f', 9)} {fmt(r.get('ours_idx_us'), '.1f', 9)} "
        f"{fmt(r.get('tflops'), '.0f', 6)} {fmt(r.get('gbps_weights'), '.0f', 7)} "
        f"{fmt(pct_copy and 100 * pct_copy, '.1f', 6)} "
        f"{fmt(pct_cublas and 100 * pct_cublas, '.1f', 6)} "
        f"{fmt(r.get('x_torch'), '.3f', 6)} {fmt(r.get('offs_over_idx'), '.3f', 6)} "
        f"{fmt(r.get('x_loop'), '.3f', 6)} {fmt(r.get('x_bmm'), '.3f', 6)} "
        f"{fmt(r.get('dg_x_torch'), '.2f', 5)} "
        f"{fmt(r.get('vs_dg', r.get('vs_dg_share')), '.3f', 5)} "
        f"{fmt(r.get('whole_over_striped'), '.3f', 5)} "
        f"{fmt(r.get('calc_diff'), '.1e', 8)}"
    )
    errs = r.get("errors") or {}
    if errs:
        line += "  ! " + "; ".join(f"{k}: {v}" for k, v in errs.items())[:300]
    return line


def summarize(results: list[dict]) -> dict:
    geo = {col: geomean([r.get(col) for r in results]) for col in RATIO_COLUMNS}
    decode = [r for r in results if r["regime"] == "decode" and r.get("pct_copy")]
    prefill = [r for r in results if r["regime"] == "prefill" and r.get("pct_cublas")]
    kg = [
        r
        for r in results
        if r["regime"] == "kgrp" and r.get("pct_cublas") and r["min_rows"] >= 2048
    ]
    geo["pct_copy_decode"] = geomean([r["pct_copy"] for r in decode])
    geo["pct_cublas_prefill"] = geomean([r["pct_cublas"] for r in prefill])
    geo["pct_cublas_k_grouped"] = geomean([r["pct_cublas"] for r in kg])
    # The same against each case's own before/after ceilings and the start-of-run ones, and
    # over the whole prefill suite (its cases with fewer than 1024 rows per group count as
    # "mid" above, as the target defines prefill).
    for suffix in ("_adjacent", "_start"):
        geo["pct_copy_decode" + suffix] = geomean([r.get("pct_copy" + suffix) for r in decode])
        geo["pct_cublas_prefill" + suffix] = geomean(
            [r.get("pct_cublas" + suffix) for r in prefill]
        )
        geo["pct_cublas_k_grouped" + suffix] = geomean([r.get("pct_cublas" + suffix) for r in kg])
    geo["pct_cublas_prefill_suite"] = geomean(
        [r.get("pct_cublas") for r in results if r["suite"] == "prefill"]
    )
    vs_dg = [r for r in results if r.get("vs_dg")]
    checks = {
        "vs_deepgemm_every_case>=1": [r["case"] for r in vs_dg if r["vs_dg"] < 1.0],
        "vs_deepgemm_geomean>=1.02": geomean([r["vs_dg"] for r in vs_dg]),
        "decode_pct_copy>=0.95": [r["case"] for r in decode if r["pct_copy"] < 0.95],
        "prefill_pct_cublas>=0.92": [r["case"] for r in prefill if r["pct_cublas"] < 0.92],
        "offs_faster_than_idx_at_decode": [
            r["case"]
            for r in results
            if r["regime"] == "decode" and r.get("offs_over_idx", 2.0) <= 1.0
        ],
        "k_grouped_pct_cublas>=0.9": [r["case"] for r in kg if r["pct_cublas"] < 0.9],
        # The 640 TFLOP/s target comes with DeepGEMM's 518 on the gpt-oss anchor, a mid-size
        # case (~265 rows per group), so mid rows count too. Failed cases are reported above.
        "gpt_oss_k2880_tflops>=640": [
            r["case"]
            for r in results
            if r["k"] == 2880 and r["regime"] in ("prefill", "mid") and 0 < r.get("tflops", 0) < 640
        ],
        "correctness_failures": [
            r["case"]
            for r in results
            if "check" in (r.get("errors") or {}) or "exception" in (r.get("errors") or {})
        ],
    }
    return {"geomean": geo, "checks": checks}


def print_summary(summary: dict, ceilings: dict) -> None:
    geo = summary["geomean"]
    print(
        "\ngeometric means: " + ", ".join(f"{k} {v:.3f}" for k, v in geo.items() if v is not None)
    )
    end = ceilings.get("end", ceilings)
    med = ceilings.get("run_median", ceilings)
    print(
        f"ceilings at the start / median beside the cases / end: copy "
        f"{ceilings['copy_gbps']:.0f} / {med['copy_gbps']:.0f} / {end['copy_gbps']:.0f} GB/s "
        f"(read + written), cuBLAS BF16 8192^3 {ceilings['cublas_tflops']:.0f} / "
        f"{med['cublas_tflops']:.0f} / {end['cublas_tflops']:.0f} TFLOP/s; pct_* and the checks "
        f"below use the medians"
    )
    for name, val in summary["checks"].items():
        if isinstance(val, list):
            status = "PASS" if not val else f"MISS ({len(val)}): " + ", ".join(val[:6])
            if val and len(val) > 6:
                status += ", ..."
        else:
            target = 1.02
            status = "n/a" if val is None else f"{'PASS' if val >= target else 'MISS'} ({val:.3f})"
        print(f"  {name:36s} {status}")


def run_case(case: Case, timer: Timer, args, ceilings: Ceilings, start: dict) -> dict:
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


def order_cases(cases: list, order: str, seed: int = 0) -> list:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", help="write all results here")
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
    args = parser.parse_args(argv)

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

    from moegemm.api.device import arch_for_device
    from moegemm.heuristics import select_config

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
    precompile(specs, args.jobs)

    timer = Timer(queued=args.timer == "queued", budget_ms=args.budget_ms, max_iters=args.max_iters)
    ceiling_meter = Ceilings(timer)
    ceilings = ceiling_meter.measure()
    print(
        f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, timer {args.timer}, "
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
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
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
