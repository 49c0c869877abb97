"""The BF16 grouped benchmark's ceilings, per-case metrics, table and summary (bench_bf16.py).
Everything but `Ceilings` is CPU logic, tested in benchmarks/tests/test_bench_cases.py."""

from __future__ import annotations

import statistics

import torch
from bench_common import Timer, geomean, randn_bf16, touched_weight_bytes
from bf16_cases import Case


class Ceilings:
    """The copy and cuBLAS ceilings, buffers kept so they can be re-measured beside a case."""

    COPY_BYTES, MM_SIZE = 1 << 30, 8192  # copy: 1 GiB read + 1 GiB written

    def __init__(self, timer: Timer) -> None:
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


def fmt(x: object, spec: str, width: int) -> str:
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
        # None (n/a) without a DeepGEMM ratio: no case compared is not a case passed.
        "vs_deepgemm_every_case>=1": [r["case"] for r in vs_dg if r["vs_dg"] < 1.0]
        if vs_dg
        else None,
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
        if val is None:
            status = "n/a"
        elif isinstance(val, list):
            status = "PASS" if not val else f"MISS ({len(val)}): " + ", ".join(val[:6])
            if val and len(val) > 6:
                status += ", ..."
        else:
            target = 1.02
            status = "n/a" if val is None else f"{'PASS' if val >= target else 'MISS'} ({val:.3f})"
        print(f"  {name:36s} {status}")
