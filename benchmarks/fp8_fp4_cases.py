"""Benchmark cases of the FP8 x FP4 (MXFP4 weights) grouped family, the measured anchors they
are judged through, and the report maths (per-row rates and ratios, the issue's targets, the
tables). CPU-only logic, used by bench_fp8_fp4.py and tests/test_bench_fp8_fp4.py.

Cases: the 16 m-grouped DeepGEMM anchors (bf16_cases.ANCHOR_CASES: the same rows), the decode,
prefill and masked suites of moe_shapes.json, and a rows-per-group sweep (SWEEP_ROWS) on six
shapes. Each case carries its nominal rows per group (the expected_m of its suite or anchor, the
sweep's r), which the regimes of the targets are defined on (decode <= 32 rows per
group, the 64-256 band, every rows per group).

Anchors (data, from ../shared/BENCHMARKS.md, measured on the H200 on 2026-11-29 and 2026-12-01):
- ANCHOR_FP8: "Anchor: DeepGEMM (deepseek-ai/DeepGEMM at 54e2261) vs torch", its FP8 columns
  (DeepGEMM FP8 us, torch FP8 rowwise us, DeepGEMM FP8 / torch FP8 speed).
- FP8_SWEEP: "FP8 sweep: DeepGEMM FP8 (1x128 activation, 128x128 weight scales) against torch,
  by rows per group" (masked up to 256 rows per group, contiguous from 256).
- MXFP4_ENGINE: "The MXFP4 kernel engines run for gpt-oss on Hopper today" (OpenAI
  triton_kernels 3.6 matmul_ogs, BF16 activations x MXFP4 weights), for information.
A benchmark run reaches DeepGEMM FP8 through its speed ratio over torch FP8 in the anchor run:
ours / DeepGEMM = (torch FP8 us / ours us) in this run / (DeepGEMM FP8 / torch FP8 speed).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from bench_common import descs_for, geomean, spec_for, worse
from bf16_cases import ANCHOR_CASES, Case, anchor_rows, rows_per_group, shapes_path

from moegemm.heuristics import GemmDesc

SUITES = ("anchors", "decode", "prefill", "masked", "sweep")
LAYOUTS = ("offs", "m_indices", "masked")
WEIGHTS = ("raw", "prepared")
# The GemmDesc kind the API builds for each layout.
KINDS = {
    "offs": "m_grouped_offsets",
    "m_indices": "m_grouped_contiguous",
    "masked": "m_grouped_masked",
}
TOL = 1e-4  # FP8 x FP4 against FP32 on the dequantized operands (protocol)


def sm100_weights(weights: tuple[str, ...]) -> tuple[tuple[str, ...], str | None]:
    """The weight layouts an SM100 run can time and a note on what was dropped: SM100 takes
    only weights prepared for it (prepare_mxfp4_weights(..., arch="sm_100f")), so "raw" goes."""
    kept = tuple(w for w in weights if w != "raw")
    if kept == weights:
        return kept, None
    if not kept:
        return kept, "SM100 takes only prepared MXFP4 weights: --weights raw has nothing to run"
    return kept, "SM100 takes only prepared MXFP4 weights (arch sm_100f): raw not timed"


SOURCE = "../shared/BENCHMARKS.md (H200, 2026-11-29 / 2026-12-01)"  # ANCHOR_GPU's runs

# --- "Anchor: DeepGEMM ... vs torch", FP8 columns, keyed by bf16_cases.ANCHOR_CASES' names.
# name: (DeepGEMM FP8 us, torch FP8 rowwise us, DeepGEMM FP8 / torch FP8 speed)
ANCHOR_FP8 = {
    "dsv3-ep8 L1 prefill": (1750, 2134, 1.22),
    "dsv3-ep8 L2 prefill": (921, 1264, 1.37),
    "qwen3-30b L1 prefill": (763, 2606, 3.42),
    "qwen3-235b-ep8 L1": (1324, 1724, 1.30),
    "mixtral L1 prefill": (6442, 7949, 1.23),
    "gpt-oss-120b L1": (1288, 1884, 1.46),
    "dg-test v4pro L1": (2371, 3076, 1.30),
    "dg-test v4flash L2": (499, 640, 1.28),
    "dsv3-ep8 L1 decode": (248, 344, 1.39),
    "dsv3-ep8 L2 decode": (138, 190, 1.38),
    "dsv3-ep8 L1 decode32": (248, 344, 1.39),
    "qwen3-30b L1 decode": (123, 169, 1.37),
    "mixtral L1 decode": (243, 360, 1.48),
    "gpt-oss L1 decode": (575, 809, 1.41),
    "dg-test v4flash masked": (251, 304, 1.21),
    "dg-test v4pro masked": (434, 590, 1.36),
}

# --- The sweep's shapes: (label, G, N, K). G is the FP8 sweep's (where its anchors exist);
# the two shapes it did not time (gpt-oss L2, qwen3-30b L2) use their L1's group count.
SWEEP_SHAPES = (
    ("dsv3 L1", 32, 4096, 7168),
    ("dsv3 L2", 32, 7168, 2048),
    ("gpt-oss L1", 32, 5760, 2880),
    ("gpt-oss L2", 32, 2880, 2880),
    ("qwen3-30b L1", 128, 1536, 2048),
    ("qwen3-30b L2", 128, 2048, 768),
)
SWEEP_ROWS = (1, 8, 32, 64, 128, 256, 1024, 4096)
MASKED_UP_TO = 256  # the FP8 sweep's layouts: masked up to here, contiguous from here


def sweep_layouts(rows: int) -> tuple[str, ...]:
    """The layouts the FP8 sweep timed DeepGEMM on at `rows` per group (both at 256)."""
    out = ("masked",) if rows <= MASKED_UP_TO else ()
    return out + (("contiguous",) if rows >= MASKED_UP_TO else ())


# --- FP8 sweep: (G, N, K, rows per group, layout, DeepGEMM FP8 us, torch FP8 us, torch BF16 us,
#     DeepGEMM FP8 / torch FP8 speed)
_M, _C = "masked", "contiguous"
FP8_SWEEP = [
    (32, 4096, 7168, 1, _M, 162, 233, 427, 1.44),
    (32, 4096, 7168, 8, _M, 248, 345, 645, 1.39),
    (32, 4096, 7168, 32, _M, 248, 347, 628, 1.40),
    (32, 4096, 7168, 64, _M, 278, 355, 591, 1.28),
    (32, 4096, 7168, 128, _M, 343, 484, 720, 1.41),
    (32, 4096, 7168, 256, _M, 583, 764, 1139, 1.31),
    (32, 4096, 7168, 256, _C, 546, 761, 1135, 1.39),
    (32, 4096, 7168, 1024, _C, 1819, 2118, 3312, 1.16),
    (32, 4096, 7168, 4096, _C, 6995, 8211, 12668, 1.17),
    (32, 7168, 2048, 1, _M, 92, 133, 245, 1.44),
    (32, 7168, 2048, 8, _M, 139, 191, 346, 1.38),
    (32, 7168, 2048, 32, _M, 139, 192, 322, 1.39),
    (32, 7168, 2048, 64, _M, 152, 195, 316, 1.28),
    (32, 7168, 2048, 128, _M, 192, 289, 380, 1.51),
    (32, 7168, 2048, 256, _M, 300, 440, 602, 1.47),
    (32, 7168, 2048, 256, _C, 287, 430, 597, 1.50),
    (32, 7168, 2048, 1024, _C, 967, 1224, 1719, 1.27),
    (32, 7168, 2048, 4096, _C, 3685, 4549, 6376, 1.23),
    (32, 5760, 2880, 1, _M, 107, 149, 270, 1.39),
    (32, 5760, 2880, 8, _M, 158, 220, 405, 1.39),
    (32, 5760, 2880, 32, _M, 158, 222, 390, 1.41),
    (32, 5760, 2880, 64, _M, 170, 225, 359, 1.32),
    (32, 5760, 2880, 128, _M, 220, 318, 441, 1.44),
    (32, 5760, 2880, 256, _M, 334, 482, 672, 1.44),
    (32, 5760, 2880, 256, _C, 333, 483, 663, 1.45),
    (32, 5760, 2880, 1024, _C, 1061, 1364, 1946, 1.29),
    (32, 5760, 2880, 4096, _C, 4165, 5080, 7343, 1.22),
    (128, 1536, 2048, 1, _M, 83, 111, 184, 1.34),
    (128, 1536, 2048, 8, _M, 124, 171, 266, 1.37),
    (128, 1536, 2048, 32, _M, 124, 173, 263, 1.40),
    (128, 1536, 2048, 64, _M, 137, 176, 266, 1.29),
    (128, 1536, 2048, 128, _M, 174, 632, 333, 3.64),
    (128, 1536, 2048, 256, _M, 242, 948, 516, 3.93),
    (128, 1536, 2048, 256, _C, 251, 950, 516, 3.78),
    (128, 1536, 2048, 1024, _C, 770, 2592, 1495, 3.37),
    (128, 1536, 2048, 4096, _C, 2910, 3823, 5542, 1.31),
]

# --- The MXFP4 engine kernel (triton_kernels matmul_ogs) on the DeepSeek-V3 shapes with 32
# experts, every expert given the same rows (the table's "N per group"); its gpt-oss rows
# route tokens over 128 experts, no case of ours matches them. Information only.
# (G, N, K, rows per group, MXFP4 us, % HBM, torch FP8 us, torch BF16 us, MXFP4 / torch FP8)
MXFP4_ENGINE = [
    (32, 4096, 7168, 8, 172, 0.68, 347, 634, 2.02),
    (32, 4096, 7168, 32, 277, 0.42, 349, 641, 1.26),
    (32, 4096, 7168, 256, 827, 0.14, 524, 720, 0.63),
    (32, 4096, 7168, 1024, 3362, 0.03, 1879, 2680, 0.56),
    (32, 7168, 2048, 8, 94, 0.62, 192, 322, 2.04),
    (32, 7168, 2048, 32, 150, 0.39, 193, 330, 1.29),
    (32, 7168, 2048, 256, 448, 0.13, 305, 386, 0.68),
    (32, 7168, 2048, 1024, 1724, 0.03, 1060, 1393, 0.61),
]

# Cases --quick keeps, per suite: anchors / suites by index, the sweep by (shape label, rows).
QUICK = {
    "anchors": [5, 8],  # gpt-oss-120b L1 (contiguous, 256 rows/group), dsv3-ep8 L1 decode
    "decode": [14],  # gpt_oss_120b linear1, 2 rows per group
    "prefill": [16],  # gpt_oss_120b linear2, 1024 rows per group
    "masked": [14],  # gpt_oss_120b linear1, 32 rows per group
    "sweep": [("dsv3 L1", 8), ("dsv3 L2", 128), ("gpt-oss L1", 1024)],
}


@dataclass
class Fp4Case(Case):
    """A bf16_cases.Case (the same layouts, rows and BF16 peer descriptions) with the nominal
    rows per group the targets' regimes are defined on, and the DeepGEMM FP8 anchor, if any."""

    rows_nominal: float = 0.0
    dg_fp8: dict = field(default_factory=dict)  # dg_us, torch_us, dg_x_torch, source
    mxfp4_engine: dict = field(default_factory=dict)  # information only

    @property
    def regime(self) -> str:
        return regime_for(self.rows_nominal)

    def layouts(self, selected: tuple[str, ...] = LAYOUTS) -> list[str]:
        """This case's API layouts among `selected` (offs / m_indices / masked)."""
        own = ("masked",) if self.layout == "masked" else ("offs", "m_indices")
        return [lay for lay in own if lay in selected]


def regime_for(rows_nominal: float) -> str:
    """decode: <= 32 rows per group (the targets' decode); prefill: >= 1024; mid between."""
    if rows_nominal <= 32:
        return "decode"
    return "prefill" if rows_nominal >= 1024 else "mid"


def in_band(rows_nominal: float) -> bool:
    """The 64-256 rows per group band of the >= 1.1 x DeepGEMM FP8 target."""
    return 64 <= rows_nominal <= 256


def dg_fp8_for(g: int, n: int, k: int, rows: float, layout: str) -> dict:
    """The FP8 sweep's entry for this shape and rows per group: the same layout first, else the
    other one at that rows per group (the sweep has masked only up to 256 and contiguous only
    from 256: at 8 rows DeepGEMM's masked kernel, its best there, stands in for a contiguous
    case, and the source says so). {} where the sweep has no such entry."""
    hits = [e for e in FP8_SWEEP if e[:3] == (g, n, k) and e[3] == rows]
    hits.sort(key=lambda e: e[4] != layout)
    if not hits:
        return {}
    g, n, k, r, lay, dg_us, torch_us, _, ratio = hits[0]
    return {
        "dg_us": dg_us,
        "torch_us": torch_us,
        "dg_x_torch": ratio,
        "source": f"FP8 sweep G{g} N{n} K{k} {r} rows/group {lay}, {SOURCE}",
    }


def mxfp4_engine_for(g: int, n: int, k: int, rows: float) -> dict:
    for e in MXFP4_ENGINE:
        if e[:4] == (g, n, k, rows):
            return {"us": e[4], "pct_hbm": e[5], "torch_us": e[6], "x_torch": e[8]}
    return {}


def _anchor_cases() -> list[Fp4Case]:
    out: list[Fp4Case] = []
    for layout, name, g, n, k, rows, exp_m, _dg, _t, _x, max_m in ANCHOR_CASES:
        per_group = anchor_rows(exp_m, g)
        if sum(per_group) != rows:  # the table's rows come from this rule (bf16_cases)
            raise ValueError(f"anchor {name}: {sum(per_group)} rows generated, table {rows}")
        dg_us, torch_us, ratio = ANCHOR_FP8[name]
        out.append(
            Fp4Case(
                "anchors",
                len(out),
                f"anchor:{name}",
                layout,
                g,
                n,
                k,
                per_group,
                max_m=max_m,
                expected_m=exp_m if max_m else 0,
                rows_nominal=float(exp_m),
                dg_fp8={
                    "dg_us": dg_us,
                    "torch_us": torch_us,
                    "dg_x_torch": ratio,
                    "source": f"Anchor table '{name}', {SOURCE}",
                },
                mxfp4_engine=mxfp4_engine_for(g, n, k, exp_m),
            )
        )
    return out


def _suite_cases(suite: str, entries: list[dict]) -> list[Fp4Case]:
    out: list[Fp4Case] = []
    for i, e in enumerate(entries):
        g, n, k = e["num_groups"], e["n"], e["k"]
        rows = rows_per_group(e["m_per_group"], g)
        nominal = float(e.get("expected_m") or sum(rows) / g)
        layout = "masked" if suite == "masked" else "contiguous"
        case = Fp4Case(
            suite,
            i,
            f"{suite}:{e['model']}.{e['op']} G{g} N{n} K{k} m{sum(rows)}",
            layout,
            g,
            n,
            k,
            rows,
            rows_nominal=nominal,
            dg_fp8=dg_fp8_for(g, n, k, nominal, layout),
            mxfp4_engine=mxfp4_engine_for(g, n, k, nominal),
        )
        if suite == "masked":
            case.max_m = int(e["max_m"])
            case.expected_m = max(1, min(case.max_m, math.ceil(nominal)))
        out.append(case)
    return out


def _sweep_cases() -> list[Fp4Case]:
    out: list[Fp4Case] = []
    for label, g, n, k in SWEEP_SHAPES:
        for r in SWEEP_ROWS:
            rows = anchor_rows(r, g)
            for layout in sweep_layouts(r):
                case = Fp4Case(
                    "sweep",
                    len(out),
                    f"sweep:{label} G{g} N{n} K{k} r{r} {layout}",
                    layout,
                    g,
                    n,
                    k,
                    rows,
                    rows_nominal=float(r),
                    dg_fp8=dg_fp8_for(g, n, k, r, layout),
                    mxfp4_engine=mxfp4_engine_for(g, n, k, r),
                )
                if layout == "masked":  # the FP8 sweep's max_m: rounded up to 128
                    case.max_m = max(128, -(-max(rows) // 128) * 128)
                    case.expected_m = r
                case.anchor = {"sweep_shape": label, "sweep_rows": r}
                out.append(case)
    return out


def _quick_keep(case: Fp4Case) -> bool:
    keep = QUICK[case.suite]
    if case.suite == "sweep":
        return (case.anchor["sweep_shape"], case.anchor["sweep_rows"]) in keep
    return case.index in keep


def load_cases(suites: tuple[str, ...] = SUITES, quick: bool = False) -> list[Fp4Case]:
    """The cases of the selected suites, in SUITES order (k-grouped is not in this family)."""
    unknown = set(suites) - set(SUITES)
    if unknown:
        raise ValueError(f"unknown suites {sorted(unknown)}; known: {SUITES}")
    data = json.loads(shapes_path().read_text())["suites"]
    cases: list[Fp4Case] = []
    for suite in SUITES:
        if suite not in suites:
            continue
        if suite == "anchors":
            found = _anchor_cases()
        elif suite == "sweep":
            found = _sweep_cases()
        else:
            found = _suite_cases(suite, data[suite])
        cases += [c for c in found if not quick or _quick_keep(c)]
    return cases


def select_cases(
    cases: list[Fp4Case],
    pattern: str | None = None,
    layouts: tuple[str, ...] = LAYOUTS,
    max_cases: int | None = None,
) -> list[Fp4Case]:
    """Cases whose name matches `pattern` and that run at least one of `layouts`; then, with
    max_cases, that many spread evenly over the list (first and every len/max_cases-th), so a
    short run still samples every suite."""
    rx = re.compile(pattern) if pattern else None
    out = [c for c in cases if (rx is None or rx.search(c.name)) and c.layouts(layouts)]
    if max_cases is not None and 0 < max_cases < len(out):
        step = len(out) / max_cases
        out = [out[int(i * step)] for i in range(max_cases)]
    return out


# Kernels the cases load (precompiled in parallel before timing)


def fp8_fp4_desc(case: Fp4Case, layout: str, weights: str) -> GemmDesc:
    """The description the FP8 x FP4 API is expected to build: the BF16 one of the same layout
    (bench_common.descs_for) with ab_dtype fp8_fp4 and the weight layout."""
    bf16 = {d.kind: d for d in descs_for(case)}[KINDS[layout]]
    return dataclasses.replace(bf16, ab_dtype="fp8_fp4", weights=weights)


def kernel_specs(
    cases: list[Fp4Case], layouts: tuple[str, ...], weights: tuple[str, ...], arch: object
) -> tuple[list, set[str]]:
    """The kernel specs the cases' calls load: ours (both weight layouts) and the BF16 peers',
    as the heuristics pick them for `arch`; and why any could not be chosen."""
    from moegemm.families import select_config

    specs, failures = [], set()
    for c in cases:
        for layout in c.layouts(layouts):
            descs = [fp8_fp4_desc(c, layout, wl) for wl in weights]
            descs.append({d.kind: d for d in descs_for(c)}[KINDS[layout]])
            for desc in descs:
                try:
                    specs.append(spec_for(desc, select_config(desc, arch)))
                except Exception as exc:  # noqa: BLE001 - the case reports it when it runs
                    failures.add(f"{desc.ab_dtype} {desc.kind}: {type(exc).__name__}: {exc}"[:200])
    return specs, failures


def fp4_bytes(n: int, k: int) -> int:
    """MXFP4 bytes of one [n, k] weight: K/2 bytes of codes plus K/32 scale bytes per row."""
    return n * (k // 2 + k // 32)


# ----------------------------------------------------------------------------------------------
# Report maths (CPU: rows are plain dicts)


def add_metrics(row: dict, copy_gbps: float | None) -> None:
    """Rates and ratios of a row's timings; copy_gbps is the ceiling its share is taken of."""
    raw, prep = row.get("raw_us"), row.get("prepared_us")
    us = prep or raw
    row["ours_us"] = us
    if raw and prep:
        row["raw_over_prepared"] = raw / prep  # > 1: raw slower
    if not us:
        return
    row["tflops"] = 2 * row["total_rows"] * row["n"] * row["k"] / us / 1e6
    wbytes = row["touched_groups"] * fp4_bytes(row["n"], row["k"])
    row["gbps_fp4"] = wbytes / us / 1e3
    if copy_gbps:
        row["pct_copy"] = row["gbps_fp4"] / copy_gbps
    for peer in ("torch_fp8", "bf16"):
        if row.get(f"{peer}_us"):
            row[f"x_{peer}"] = row[f"{peer}_us"] / us
            if raw:
                row[f"x_{peer}_raw"] = row[f"{peer}_us"] / raw
    dg = row.get("dg_fp8") or {}
    if row.get("x_dg_inrun"):  # DeepGEMM timed in this run: the ratio itself, no estimate
        row["vs_dg"] = row["x_dg_inrun"]
        if row.get("x_dg_inrun_raw"):
            row["vs_dg_raw"] = row["x_dg_inrun_raw"]
    elif dg.get("dg_x_torch"):
        row["dg_x_torch"] = dg["dg_x_torch"]
        if row.get("x_torch_fp8"):
            row["vs_dg"] = row["x_torch_fp8"] / dg["dg_x_torch"]
        if row.get("x_torch_fp8_raw"):
            row["vs_dg_raw"] = row["x_torch_fp8_raw"] / dg["dg_x_torch"]
    eng = row.get("mxfp4_engine") or {}
    if eng.get("x_torch") and row.get("x_torch_fp8"):  # information: both over their torch FP8
        row["vs_mxfp4_engine"] = row["x_torch_fp8"] / eng["x_torch"]


def failed(row: dict) -> bool:
    errors = row.get("errors") or {}
    return "check" in errors or "exception" in errors


def judged_for_speed(row: dict) -> bool:
    """Whether the speed targets judge this row. Not an m_indices row at decode: it computes
    every group padded to 128 rows, and DeepGEMM's decode figures are its masked kernel's (no
    padding); reported, and judged for correctness and raw vs prepared. At mid and prefill
    sizes DeepGEMM's contiguous figures carry the same padding, so m_indices rows count."""
    return not (row["layout"] == "m_indices" and row["regime"] == "decode")


# (name, column, which rows, threshold, higher is better)
TARGETS: list[tuple[str, str, Callable[[dict], bool], float, bool]] = [
    ("decode: >= 1.8 x DeepGEMM FP8", "vs_dg", lambda r: r["regime"] == "decode", 1.8, True),
    (
        "decode: >= 85% of copy bw on FP4 bytes",
        "pct_copy",
        lambda r: r["regime"] == "decode",
        0.85,
        True,
    ),
    ("decode: >= 3 x moegemm BF16", "x_bf16", lambda r: r["regime"] == "decode", 3.0, True),
    ("every rows/group: >= 1.0 x DeepGEMM FP8", "vs_dg", lambda r: True, 1.0, True),
    (
        "64-256 rows/group: >= 1.1 x DeepGEMM FP8",
        "vs_dg",
        lambda r: in_band(r["rows_nominal"]),
        1.1,
        True,
    ),
    ("raw within 10% of prepared (time)", "raw_over_prepared", lambda r: True, 1.10, False),
]
GEOMEAN_COLUMNS = (
    "x_torch_fp8",
    "x_bf16",
    "vs_dg",
    "raw_over_prepared",
    "pct_copy",
    "x_torch_fp8_raw",
    "vs_dg_raw",
    "vs_mxfp4_engine",
)


def summarize(rows: list[dict]) -> dict:
    """Every target judged on the rows it applies to that have its column; a row whose check
    failed is a miss whatever its speed. Geometric means per column, overall and per regime."""
    targets = []
    for name, col, which, threshold, higher in TARGETS:
        speed = col != "raw_over_prepared"
        judged = [
            r
            for r in rows
            if which(r) and r.get(col) is not None and (judged_for_speed(r) or not speed)
        ]
        misses = [
            r for r in judged if failed(r) or (r[col] < threshold if higher else r[col] > threshold)
        ]
        values = [r[col] for r in judged]
        worst = (min if higher else max)(values) if values else None
        targets.append(
            {
                "target": name,
                "column": col,
                "threshold": threshold,
                "judged": len(judged),
                "missed": [f"{r['case']} [{r['layout']}] {r[col]:.3f}" for r in misses],
                "worst": worst,
                "geomean": geomean(values),
                "status": "n/a" if not judged else ("met" if not misses else "missed"),
            }
        )
    wrong = [f"{r['case']} [{r['layout']}]" for r in rows if failed(r)]
    diffs = [r["calc_diff"] for r in rows if r.get("calc_diff") is not None]
    targets.append(
        {
            "target": f"correct: calc_diff < {TOL:g} on every variant",
            "column": "calc_diff",
            "threshold": TOL,
            "judged": len(rows),
            "missed": wrong,
            "worst": functools.reduce(worse, diffs) if diffs else None,
            "geomean": None,
            "status": "n/a" if not rows else ("met" if not wrong else "missed"),
        }
    )
    geo: dict[str, float | None] = {c: geomean([r.get(c) for r in rows]) for c in GEOMEAN_COLUMNS}
    for regime in ("decode", "mid", "prefill"):
        sub = [r for r in rows if r["regime"] == regime]
        for c in ("x_torch_fp8", "x_bf16", "vs_dg", "pct_copy"):
            geo[f"{c}_{regime}"] = geomean([r.get(c) for r in sub])
    return {"targets": targets, "geomean": geo}


def fmt(x: object, spec: str, width: int) -> str:
    return format(x, spec).rjust(width) if isinstance(x, (int, float)) else "-".rjust(width)


HEADER = (
    f"{'case':50s} {'layout':>9s} {'reg':>7s} {'r/g':>6s} {'raw us':>8s} {'prep us':>8s} "
    f"{'t8 us':>8s} {'bf16 us':>8s} {'DG us':>8s} {'TF/s':>5s} {'%copy':>5s} {'xt8':>5s} {'xbf16':>5s} "
    f"{'r/p':>5s} {'DGx':>5s} {'xDG':>5s} {'diff':>7s}"
)
# xDG: DeepGEMM us / ours us where DeepGEMM ran in this process (DG us), else the anchor
# estimate (vs_dg) marked "~".


def format_row(r: dict) -> str:
    pct = r.get("pct_copy") if r["regime"] == "decode" else None
    if r.get("x_dg_inrun"):
        x_dg = fmt(r["x_dg_inrun"], ".2f", 5)
    elif r.get("vs_dg"):
        x_dg = ("~" + format(r["vs_dg"], ".2f")).rjust(5)
    else:
        x_dg = fmt(None, "", 5)
    line = (
        f"{r['case'][:50]:50s} {r['layout']:>9s} {r['regime']:>7s} {r['rows_nominal']:6.4g} "
        f"{fmt(r.get('raw_us'), '.1f', 8)} {fmt(r.get('prepared_us'), '.1f', 8)} "
        f"{fmt(r.get('torch_fp8_us'), '.1f', 8)} {fmt(r.get('bf16_us'), '.1f', 8)} "
        f"{fmt(r.get('deepgemm_us'), '.1f', 8)} "
        f"{fmt(r.get('tflops'), '.0f', 5)} {fmt(pct and 100 * pct, '.1f', 5)} "
        f"{fmt(r.get('x_torch_fp8'), '.2f', 5)} {fmt(r.get('x_bf16'), '.2f', 5)} "
        f"{fmt(r.get('raw_over_prepared'), '.2f', 5)} {fmt(r.get('dg_x_torch'), '.2f', 5)} "
        f"{x_dg} {fmt(r.get('calc_diff'), '.0e', 7)}"
    )
    errs = r.get("errors") or {}
    if errs:
        line += "  ! " + "; ".join(f"{k}: {v}" for k, v in errs.items())[:300]
    notes = {k: v for k, v in (r.get("notes") or {}).items() if k.startswith("torch_fp8")}
    if notes:  # the torch FP8 peer refused the call or looks wrong: its columns are suspect
        line += "  ~ " + "; ".join(f"{k}: {v}" for k, v in notes.items())[:120]
    return line


def sweep_matrix(rows: list[dict], column: str) -> list[str]:
    """One line per sweep shape, one cell per rows per group: the masked row up to 256, the
    offs row above (the FP8 sweep's layouts; at 256 both are in the JSON)."""
    cells: dict[tuple[str, int], float] = {}
    for r in rows:
        shape, rpg = r.get("sweep_shape"), r.get("sweep_rows")
        if shape is None or r.get(column) is None:
            continue
        want = "masked" if rpg <= 256 else "offs"
        if r["layout"] == want:
            cells[(shape, rpg)] = r[column]
    head = f"{column + ' by rows/group':24s}" + "".join(f"{rpg:>7d}" for rpg in SWEEP_ROWS)
    lines = [head]
    for label, g, n, k in SWEEP_SHAPES:
        vals = [cells.get((label, rpg)) for rpg in SWEEP_ROWS]
        if any(v is not None for v in vals):
            lines.append(f"{label:24s}" + "".join(fmt(v, ".2f", 7) for v in vals))
    return lines if len(lines) > 1 else []


def print_report(rows: list[dict], summary: dict, ceilings: dict) -> None:
    for col in ("vs_dg", "x_torch_fp8", "pct_copy"):
        lines = sweep_matrix(rows, col)
        if lines:
            print("\n" + "\n".join(lines))
    geo = summary["geomean"]
    print("\ngeometric means: " + ", ".join(f"{k} {v:.3f}" for k, v in geo.items() if v))
    copy = " / ".join(
        fmt(ceilings.get(k), ".0f", 0) for k in ("copy_gbps", "copy_gbps_median", "copy_gbps_end")
    )
    print(
        f"copy ceiling (read + written) at the start / median beside the cases / end: {copy} "
        "GB/s; %copy uses the median. m_indices rows at decode (128-row padding) are not "
        "judged for speed"
    )
    print(
        f"\n{'target':44s} {'status':>7s} {'judged':>6s} {'missed':>6s} {'worst':>7s} "
        f"{'geomean':>7s}"
    )
    for t in summary["targets"]:
        print(
            f"{t['target']:44s} {t['status']:>7s} {t['judged']:6d} {len(t['missed']):6d} "
            f"{fmt(t['worst'], '.3g', 7)} {fmt(t['geomean'], '.3f', 7)}"
        )
        for m in t["missed"][:4]:
            print(f"    missed: {m}")
        if len(t["missed"]) > 4:
            print(f"    ... and {len(t['missed']) - 4} more (JSON)")
