"""PNG figures from the benchmarks' --json results, readable at a glance.

    python benchmarks/plot.py RESULT.json [RESULT.json ...] --out DIR

Which benchmark wrote a file is read from its content:

  bench_bf16.py      per family (m-grouped contiguous, m-grouped masked, k-grouped) and weight
                     shape (N, K): weight GB/s and TFLOP/s against rows per group (log x), ours
                     and every in-run peer as a line, the run's copy and cuBLAS ceilings as
                     horizontal lines
  bench_fp8_fp4.py   the same per weight shape, one line per implementation and layout (ours
                     prepared and raw, moegemm BF16, DeepGEMM FP8 where it ran, torch FP8)
  bench_moe.py       per model: µs per call and roofline ÷ time against tokens, ours and the
                     two compositions, the roofline max(weight bytes / copy, FLOPs / cuBLAS)
  bench_bf16_gemm.py dense TFLOP/s per case, moegemm beside cuBLAS

Every rate is the benchmark's own work (the record's rate × ours µs) over each implementation's
µs, so peers are compared on the same bytes and FLOPs. Titles give the GPU, date and commit the
JSON records, "unknown" where it has none. A file that cannot be read or is not one of these:
one line on stderr, exit 2, nothing written.

The extraction (figures_for and below) is pure; matplotlib is imported only to render.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

UNKNOWN = "unknown"


class PlotError(Exception):
    """A JSON this script cannot read or does not recognize (reported in one line)."""


@dataclass
class Series:
    """One implementation's points; `key` picks its color (the same across figures), `role`
    its emphasis, `layout` its line style (FP8 x FP4 draws each API layout apart)."""

    label: str
    key: str
    points: list[tuple[float, float]] = field(default_factory=list)
    role: str = "peer"  # "ours", "peer", "bound" (roofline), "failed" (markers only)
    layout: str = ""


@dataclass
class Ceiling:
    label: str
    value: float


@dataclass
class Panel:
    ylabel: str
    series: list[Series]
    ceilings: list[Ceiling] = field(default_factory=list)
    ylog: bool = False
    note: str = ""  # what the panel lacks (a ceiling not measured, rows without timings)


@dataclass
class Figure:
    name: str  # file-name part, unique within one JSON
    title: str
    xlabel: str
    panels: list[Panel]
    categories: list[str] = field(default_factory=list)  # bar chart (dense) when set


# ----------------------------------------------------------------------------------------------
# Reading and recognizing a result


def load(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlotError(f"cannot read JSON: {one_line(exc)}") from None
    if not isinstance(data, dict):
        raise PlotError("not a benchmark result (the top level is not a JSON object)")
    return data


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


def _records_with(records: object, keys: set[str]) -> bool:
    return (
        isinstance(records, list)
        and bool(records)
        and all(isinstance(r, dict) for r in records)
        and keys <= records[0].keys()
    )


def detect(data: dict) -> str:
    """Which benchmark wrote `data`: "bf16", "fp8_fp4", "moe" or "dense"."""
    if _records_with(data.get("dense"), {"moegemm_us", "cublas_us"}) and "jit" in data:
        return "dense"
    if isinstance(data.get("ceilings"), dict) and _records_with(
        data.get("cases"), {"layout", "num_groups", "total_rows"}
    ):
        return "bf16"
    rows = data.get("rows")
    if "copy_gbps" in data and _records_with(rows, {"model", "tokens"}):
        return "moe"
    if isinstance(data.get("ceilings"), dict) and _records_with(rows, {"layout", "rows_nominal"}):
        return "fp8_fp4"
    raise PlotError(
        "not a result of bench_bf16.py, bench_fp8_fp4.py, bench_moe.py or bench_bf16_gemm.py"
    )


def run_line(data: dict) -> str:
    """GPU, date and commit as the JSON records them; never guessed."""
    gpu = data.get("gpu") or UNKNOWN
    date = data.get("date_utc")
    commit = data.get("commit") or UNKNOWN
    when = f"{date} UTC" if date else f"date {UNKNOWN}"
    return f"GPU {gpu} | {when} | commit {commit}"


def figures_for(data: dict) -> list[Figure]:
    kind = detect(data)
    try:
        return EXTRACTORS[kind](data)
    except (KeyError, TypeError, ValueError, ZeroDivisionError) as exc:
        raise PlotError(f"malformed {kind} result: {one_line(exc)}") from None


# ----------------------------------------------------------------------------------------------
# Shared pieces of the GEMM families


@dataclass(frozen=True)
class Impl:
    """One timed implementation: the record's µs column and how it is drawn."""

    us_key: str
    label: str
    key: str
    role: str = "peer"


def failed_check(rec: dict) -> bool:
    """A wrong result: its speed is not plotted as ours (shown as a marker instead)."""
    return "check" in (rec.get("errors") or {})


def rates(rec: dict, bytes_key: str, us: float) -> tuple[float | None, float | None]:
    """(GB/s, TFLOP/s) of `us` on the record's own work: its rate columns are ours, so work =
    rate × ours µs; none when ours was not timed (no work known)."""
    ours = rec.get("ours_us")
    if not ours or not us:
        return None, None
    gbps = rec[bytes_key] * ours / us if rec.get(bytes_key) else None
    tflops = rec["tflops"] * ours / us if rec.get("tflops") else None
    return gbps, tflops


def rate_panels(
    records: list[dict],
    impls: list[Impl],
    x_of: Callable[[dict], float],
    bytes_key: str,
    bytes_label: str,
    ceilings: tuple[list[Ceiling], list[Ceiling]],
    layout_of: Callable[[dict], str] = lambda r: "",
    shared: tuple[str, ...] = (),
) -> list[Panel]:
    """A bytes panel and a FLOP panel: one series per (implementation, layout); the µs columns
    in `shared` are one peer timed once per case (kept once, without a layout)."""
    pairs: dict[tuple[str, str], tuple[Series, Series]] = {}
    failed = tuple(Series("ours: failed check", "failed", role="failed") for _ in range(2))
    seen: set[tuple[object, str]] = set()
    for rec in records:
        for impl in impls:
            gbps, tflops = rates(rec, bytes_key, rec.get(impl.us_key))
            if gbps is None and tflops is None:
                continue
            layout = layout_of(rec)
            if impl.us_key in shared:
                if (rec.get("case"), impl.us_key) in seen:
                    continue
                seen.add((rec.get("case"), impl.us_key))
                layout = ""
            if impl.role == "ours" and failed_check(rec):
                targets = failed  # a wrong result's speed is no point of ours' line
            else:
                targets = pairs.setdefault((impl.key, layout), series_pair(impl, layout))
            for s, y in zip(targets, (gbps, tflops)):
                if y is not None:
                    s.points.append((x_of(rec), y))
    by_bytes, by_flops = (
        [s for s in [pair[i] for pair in pairs.values()] + [failed[i]] if s.points] for i in (0, 1)
    )
    for s in by_bytes + by_flops:
        s.points.sort()
    copy, cublas = ceilings
    note = "" if cublas else "cuBLAS ceiling: not in this JSON"
    return [
        Panel(bytes_label, by_bytes, copy),
        Panel("TFLOP/s (real rows)", by_flops, cublas, note=note),
    ]


def series_pair(impl: Impl, layout: str) -> tuple[Series, Series]:
    """An implementation's (bytes, FLOP) series, labelled with its layout where it has one."""
    label = f"{impl.label} [{layout}]" if layout else impl.label
    return (
        Series(label, impl.key, role=impl.role, layout=layout),
        Series(label, impl.key, role=impl.role, layout=layout),
    )


def shape_groups(records: list[dict]) -> dict[tuple[int, int], list[dict]]:
    """Records by weight shape (N, K), in first-seen order; group counts may differ within a
    shape (rates per row are comparable across them)."""
    groups: dict[tuple[int, int], list[dict]] = {}
    for rec in records:
        groups.setdefault((int(rec["n"]), int(rec["k"])), []).append(rec)
    return groups


def group_counts(records: list[dict]) -> str:
    return ",".join(str(g) for g in sorted({int(r["num_groups"]) for r in records}))


def ceiling(label: str, value: object, unit: str, source: str) -> list[Ceiling]:
    if not isinstance(value, (int, float)) or not value:
        return []
    return [Ceiling(f"{label} {value:.0f} {unit} ({source})", float(value))]


# ----------------------------------------------------------------------------------------------
# bench_bf16.py

BF16_FAMILIES = {
    "contiguous": "BF16 m-grouped contiguous",
    "masked": "BF16 m-grouped masked",
    "k_grouped": "BF16 k-grouped",
}
BF16_IMPLS = {
    "contiguous": [
        Impl("ours_us", "moegemm offs", "ours", "ours"),
        Impl("ours_idx_us", "moegemm m_indices", "ours_alt"),
        Impl("torch_us", "torch._grouped_mm", "torch"),
        Impl("loop_us", "torch.mm per expert", "loop"),
    ],
    "masked": [
        Impl("ours_us", "moegemm masked", "ours", "ours"),
        Impl("torch_us", "torch._grouped_mm (valid rows)", "torch"),
        Impl("bmm_us", "torch.bmm (padded)", "bmm"),
        Impl("loop_us", "torch.mm per expert", "loop"),
    ],
    "k_grouped": [
        Impl("ours_us", "moegemm k-grouped", "ours", "ours"),
        Impl("torch_us", "torch._grouped_mm (a.t())", "torch"),
        Impl("loop_us", "torch.mm per group", "loop"),
    ],
}


def rows_per_group(rec: dict) -> float:
    return rec["total_rows"] / rec["num_groups"]


def bf16_ceilings(data: dict) -> tuple[list[Ceiling], list[Ceiling]]:
    """The run-median ceilings the headline shares use, else the start-of-run ones."""
    ceil = data["ceilings"]
    median = ceil.get("run_median")
    src, source = (median, "run median") if isinstance(median, dict) else (ceil, "start of run")
    return (
        ceiling("copy", src.get("copy_gbps"), "GB/s", source),
        ceiling("cuBLAS BF16 8192³", src.get("cublas_tflops"), "TFLOP/s", source),
    )


def bf16_figures(data: dict) -> list[Figure]:
    ceilings = bf16_ceilings(data)
    run = run_line(data)
    figures = []
    for layout, family in BF16_FAMILIES.items():
        records = [r for r in data["cases"] if r.get("layout") == layout]
        k_grouped = layout == "k_grouped"
        for (n, k), recs in shape_groups(records).items():
            bytes_key, bytes_label = (
                ("gbps_all", "operand bytes / time (GB/s)")
                if k_grouped
                else ("gbps_weights", "touched weight bytes / time (GB/s)")
            )
            panels = rate_panels(
                recs, BF16_IMPLS[layout], rows_per_group, bytes_key, bytes_label, ceilings
            )
            untimed = [r["case"] for r in recs if not r.get("ours_us")]
            if untimed:
                panels[0].note = f"not timed: {len(untimed)} case(s) (errors in the JSON)"
            figures.append(
                Figure(
                    f"bf16-{layout}-n{n}-k{k}",
                    f"{family}, N{n} K{k} (G {group_counts(recs)})\n{run}",
                    "rows per group (total rows ÷ groups)",
                    panels,
                )
            )
    return figures


# ----------------------------------------------------------------------------------------------
# bench_fp8_fp4.py

FP8_IMPLS = [
    Impl("prepared_us", "moegemm FP8 x FP4 prepared", "ours", "ours"),
    Impl("raw_us", "moegemm FP8 x FP4 raw", "ours_alt"),
    Impl("bf16_us", "moegemm BF16", "bf16"),
    Impl("deepgemm_us", "DeepGEMM FP8", "deepgemm"),
    Impl("torch_fp8_us", "torch FP8 rowwise", "torch"),
]


def fp8_fp4_figures(data: dict) -> list[Figure]:
    ceil = data["ceilings"]
    median = ceil.get("copy_gbps_median")
    copy = ceiling("copy", median or ceil.get("copy_gbps"), "GB/s",
                   "run median" if median else "start of run")  # fmt: skip
    run = run_line(data)
    figures = []
    for (n, k), recs in shape_groups(data["rows"]).items():
        panels = rate_panels(
            recs,
            FP8_IMPLS,
            lambda r: float(r["rows_nominal"]),
            "gbps_fp4",
            "FP4 weight + scale bytes / time (GB/s)",
            (copy, []),
            layout_of=lambda r: r["layout"],
            shared=("torch_fp8_us",),  # one packed-rows peer per case, on every layout's row
        )
        names = sorted({r["sweep_shape"] for r in recs if r.get("sweep_shape")})
        label = f" {'/'.join(names)}" if names else ""
        figures.append(
            Figure(
                f"fp8_fp4-n{n}-k{k}",
                f"FP8 x FP4 (MXFP4 weights){label}, N{n} K{k} (G {group_counts(recs)})\n{run}",
                "rows per group (nominal)",
                panels,
            )
        )
    return figures


# ----------------------------------------------------------------------------------------------
# bench_moe.py

MOE_IMPLS = [
    Impl("ours_us", "moegemm fused_moe", "ours", "ours"),
    Impl("torch_us", "torch composition", "torch"),
    Impl("moegemm_comp_us", "moegemm composition", "comp"),
]


def roofline_us(row: dict, copy_gbps: float, cublas_tflops: float) -> float | None:
    """max(touched weight bytes / copy, real FLOPs / cuBLAS) in µs; None without the row's
    bytes and FLOPs (a row that failed before timing)."""
    if not (row.get("touched_bytes") and row.get("flops")):
        return None
    return max(row["touched_bytes"] / copy_gbps / 1e3, row["flops"] / cublas_tflops / 1e6)


def moe_figures(data: dict) -> list[Figure]:
    copy, cublas = float(data["copy_gbps"]), float(data["cublas_tflops"])
    run = run_line(data)
    groups: dict[tuple[str, str], list[dict]] = {}
    for row in data["rows"]:
        groups.setdefault((row.get("weights") or "bf16", row["model"]), []).append(row)
    figures = []
    for (weights, model), rows in groups.items():
        times = [Series(i.label, i.key, role=i.role) for i in MOE_IMPLS]
        fractions = [Series(i.label, i.key, role=i.role) for i in MOE_IMPLS]
        bound = Series("roofline bound", "roofline", role="bound")
        for row in sorted(rows, key=lambda r: r["tokens"]):
            roof = roofline_us(row, copy, cublas)
            if roof is not None:
                bound.points.append((row["tokens"], roof))
            for impl, t_series, f_series in zip(MOE_IMPLS, times, fractions):
                us = row.get(impl.us_key)
                if not us or row.get("error"):
                    continue
                t_series.points.append((row["tokens"], us))
                if roof is not None:
                    f_series.points.append((row["tokens"], roof / us))
        untimed = [f"T{r['tokens']}" for r in rows if r.get("error") or not r.get("ours_us")]
        note = f"no timing (error): {', '.join(untimed)}" if untimed else ""
        figures.append(
            Figure(
                f"moe-{weights}-{slug(model)}",
                f"Fused MoE layer, {model} ({weights} experts); copy {copy:.0f} GB/s, "
                f"cuBLAS {cublas:.0f} TFLOP/s\n{run}",
                "tokens",
                [
                    Panel("µs per call", [s for s in times + [bound] if s.points], [], True, note),
                    Panel(
                        "roofline ÷ time (1 = at the bound)",
                        [s for s in fractions if s.points],
                        [Ceiling("roofline", 1.0)],
                    ),
                ],
            )
        )
    return figures


# ----------------------------------------------------------------------------------------------
# bench_bf16_gemm.py


def dense_figures(data: dict) -> list[Figure]:
    rows = data["dense"]
    ours = Series("moegemm bf16_gemm_nt", "ours", role="ours")
    cublas = Series("cuBLAS (torch.mm)", "torch")
    for i, r in enumerate(rows):
        ours.points.append((i, r["moegemm_tflops"]))
        cublas.points.append((i, r["cublas_tflops"]))
    return [
        Figure(
            "dense",
            f"Dense BF16 bf16_gemm_nt against cuBLAS\n{run_line(data)}",
            "case",
            [Panel("TFLOP/s", [ours, cublas])],
            categories=[r["case"] for r in rows],
        )
    ]


EXTRACTORS: dict[str, Callable[[dict], list[Figure]]] = {
    "bf16": bf16_figures,
    "fp8_fp4": fp8_fp4_figures,
    "moe": moe_figures,
    "dense": dense_figures,
}


# ----------------------------------------------------------------------------------------------
# Rendering (matplotlib)

COLORS = {
    "ours": "tab:blue",
    "ours_alt": "tab:cyan",
    "torch": "tab:orange",
    "loop": "tab:green",
    "bmm": "tab:purple",
    "bf16": "tab:brown",
    "deepgemm": "tab:red",
    "comp": "tab:green",
    "roofline": "black",
    "failed": "red",
}
LAYOUT_STYLES = {"": "-", "offs": "-", "masked": ":", "m_indices": "--"}


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "result"


def draw_lines(ax: object, panel: Panel, xlog: bool) -> None:
    for s in panel.series:
        xs, ys = zip(*s.points)
        color = COLORS.get(s.key)
        if s.role == "failed":  # a wrong result's speed: a marker, not part of ours' line
            ax.plot(xs, ys, "X", color=color, markersize=10, linestyle="none", label=s.label)
            continue
        style = "--" if s.role == "bound" else LAYOUT_STYLES.get(s.layout, "-")
        width = 2.4 if s.role == "ours" else 1.3
        ax.plot(xs, ys, style, color=color, marker="o" if s.role != "bound" else None,
                markersize=4, linewidth=width, label=s.label)  # fmt: skip
    for c in panel.ceilings:
        ax.axhline(c.value, color="gray", linestyle="-.", linewidth=1.2, label=c.label)
    if xlog:
        ax.set_xscale("log")
    if panel.ylog:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)  # rates against a ceiling read as shares from zero


def draw_bars(ax: object, panel: Panel, categories: list[str]) -> None:
    width = 0.8 / max(1, len(panel.series))
    for i, s in enumerate(panel.series):
        xs = [x + (i - (len(panel.series) - 1) / 2) * width for x, _ in s.points]
        ax.bar(xs, [y for _, y in s.points], width, color=COLORS.get(s.key), label=s.label)
    ax.set_xticks(range(len(categories)))
    ax.set_xticklabels(categories, rotation=20, ha="right", fontsize=8)


def render(fig: Figure, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on a GPU host
    import matplotlib.pyplot as plt

    n = len(fig.panels)
    figure, axes = plt.subplots(1, n, figsize=(7.0 * n, 5.2), squeeze=False)
    try:
        for ax, panel in zip(axes[0], fig.panels):
            if fig.categories:
                draw_bars(ax, panel, fig.categories)
            else:
                draw_lines(ax, panel, xlog=True)
            ax.set_xlabel(fig.xlabel)
            ax.set_ylabel(panel.ylabel)
            ax.grid(True, which="both", alpha=0.3)
            if panel.series or panel.ceilings:
                ax.legend(fontsize=7, loc="best")
            if panel.note:
                box = {"facecolor": "white", "edgecolor": "none", "alpha": 0.85}
                ax.text(0.99, 0.01, panel.note, transform=ax.transAxes, fontsize=7,
                        color="dimgray", va="bottom", ha="right", bbox=box)  # fmt: skip
        figure.suptitle(fig.title, fontsize=10)
        figure.tight_layout()
        figure.savefig(path, dpi=100)
    finally:
        plt.close(figure)


# ----------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("results", nargs="+", type=Path, metavar="RESULT.json")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR", help="PNG folder")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    plans = []
    for path in args.results:  # every file read and recognized before anything is written
        try:
            plans.append((path, figures_for(load(path))))
        except PlotError as exc:
            print(f"plot.py: {path}: {exc}", file=sys.stderr)
            return 2
    args.out.mkdir(parents=True, exist_ok=True)
    for path, figures in plans:
        for fig in figures:
            target = args.out / f"{slug(path.stem)}-{fig.name}.png"
            render(fig, target)
            print(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
