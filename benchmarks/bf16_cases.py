"""Benchmark cases of the BF16 grouped family: the DeepGEMM anchors (DeepGEMM at 54e2261 and
torch._grouped_mm timed in the same run, kept here as data) and the suites of
moe_shapes.json, with the rows and layouts each case runs on.
CPU-only logic, shared by bench_bf16.py and heuristic_quality.py."""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch

import moegemm

ALIGN = 128  # moegemm.get_mk_alignment_for_contiguous_layout() (checked at run time)
# The dense shapes of bench_bf16_gemm.py (and of build_twins.py): (name, m, n, k).
DENSE_CASES = [
    ("square 4096", 4096, 4096, 4096),
    ("square 8192", 8192, 8192, 8192),
    ("dsv3 shared L1 M=4096", 4096, 4096, 7168),
    ("gpt-oss K=2880 M=4096", 4096, 5760, 2880),
    ("decode M=16 N=4096 K=7168", 16, 4096, 7168),
]
SUITES = ("anchors", "decode", "prefill", "masked", "k_grouped")

# --- Anchor 1: DeepGEMM vs torch (BF16 columns). rows = the table's total real rows; each group
# gets int(expected_m * U(0.7, 1.3)) rows with random.seed(0). The table's totals are exactly
# what that rule gives for a round expected_m (1024, 4096, 256, ...), not for rows / G, so the
# round value is kept here and load_cases() checks that the generated total matches `rows`.
# max_m (masked only) is our choice: the buffer capacity is not in the table; DeepGEMM's
# v4 tests use 4096, the decode cases use the matching masked-suite capacity or 128.
# (layout, case, G, N, K, rows, expected_m, DeepGEMM us, torch._grouped_mm us,
#  DeepGEMM / torch speed, max_m)
# The DeepGEMM columns were timed on an H200: its ratio over torch prices DeepGEMM on that GPU
# only (on an H100 it made DeepGEMM's masked decode read weights faster than HBM can).
ANCHOR_GPU = "H200"
ANCHOR_CASES = [
    ("contiguous", "dsv3-ep8 L1 prefill", 32, 4096, 7168, 35044, 1024, 3101, 3207, 1.03, 0),
    ("contiguous", "dsv3-ep8 L2 prefill", 32, 7168, 2048, 35044, 1024, 1490, 1674, 1.12, 0),
    ("contiguous", "qwen3-30b L1 prefill", 128, 1536, 2048, 135787, 1024, 1322, 1457, 1.10, 0),
    ("contiguous", "qwen3-235b-ep8 L1", 16, 3072, 4096, 67158, 4096, 2419, 2584, 1.07, 0),
    ("contiguous", "mixtral L1 prefill", 8, 28672, 4096, 33464, 4096, 11138, 11716, 1.05, 0),
    ("contiguous", "gpt-oss-120b L1", 128, 5760, 2880, 33896, 256, 2172, 2542, 1.17, 0),
    ("contiguous", "dg-test v4pro L1", 4, 6144, 7168, 34151, 8192, 4170, 4544, 1.09, 0),
    ("contiguous", "dg-test v4flash L2", 8, 4096, 2048, 33464, 4096, 834, 853, 1.02, 0),
    ("masked", "dsv3-ep8 L1 decode", 32, 4096, 7168, 256, 8, 460, 657, 1.43, 256),
    ("masked", "dsv3-ep8 L2 decode", 32, 7168, 2048, 256, 8, 242, 348, 1.44, 256),
    ("masked", "dsv3-ep8 L1 decode32", 32, 4096, 7168, 1079, 32, 460, 641, 1.39, 1024),
    ("masked", "qwen3-30b L1 decode", 128, 1536, 2048, 466, 4, 218, 271, 1.24, 128),
    ("masked", "mixtral L1 decode", 8, 28672, 4096, 28, 4, 457, 749, 1.64, 128),
    ("masked", "gpt-oss L1 decode", 128, 5760, 2880, 466, 4, 1044, 1429, 1.37, 128),
    ("masked", "dg-test v4flash masked", 32, 4096, 4096, 6559, 192, 415, 425, 1.02, 4096),
    ("masked", "dg-test v4pro masked", 6, 6144, 7168, 6262, 1024, 825, 859, 1.04, 4096),
]

# --- Anchor 2: DeepGEMM masked BF16 on the `masked` suite, in suite order.
# (model, op, G, N, K, rows, DeepGEMM us, torch._grouped_mm us, weight-bytes floor us)
ANCHOR_MASKED_SUITE = [
    ("deepseek_v3", "linear1", 32, 4096, 7168, 1161, 461, 642, 441),
    ("deepseek_v3", "linear2", 32, 7168, 2048, 1006, 242, 321, 221),
    ("deepseek_v3", "linear1", 32, 4096, 7168, 256, 460, 626, 441),
    ("deepseek_v3", "linear2", 32, 7168, 2048, 2048, 243, 330, 221),
    ("kimi_k2", "linear1", 48, 4096, 7168, 1000, 685, 924, 662),
    ("kimi_k2", "linear2", 48, 7168, 2048, 1020, 358, 466, 331),
    ("deepseek_v4_flash", "linear1", 32, 4096, 4096, 6054, 427, 428, 252),
    ("deepseek_v4_flash", "linear2", 32, 4096, 2048, 632, 146, 183, 126),
    ("deepseek_v4_pro", "linear1", 6, 6144, 7168, 6644, 874, 946, 124),
    ("deepseek_v4_pro", "linear2", 6, 7168, 3072, 128, 78, 117, 62),
    ("qwen3_235b_a22b", "linear1", 16, 3072, 4096, 512, 112, 148, 95),
    ("qwen3_30b_a3b", "linear2", 16, 2048, 768, 512, 24, 34, 12),
    ("glm4_5", "linear1", 20, 3072, 5120, 952, 168, 224, 148),
    ("llama4_maverick", "linear1", 16, 16384, 5120, 256, 641, 964, 630),
    ("gpt_oss_120b", "linear1", 16, 5760, 2880, 512, 143, 196, 125),
    ("mixtral_8x22b", "linear1", 1, 32768, 6144, 128, 111, 124, 95),
]

# --- DeepGEMM k-grouped BF16 (FP32 D with C accumulated); rows per group = T / G.
# (G, M, N, T, DeepGEMM TFLOP/s, share of in-run cuBLAS dense)
ANCHOR_K_GROUPED = [
    (4, 4096, 7168, 33792, 654, 0.91),
    (8, 4096, 7168, 33024, 556, 0.78),
    (16, 7168, 2048, 32640, 446, 0.62),
    (16, 1536, 2048, 66176, 555, 0.78),
    (16, 2048, 768, 66176, 549, 0.77),
]

# Case indices per suite that --quick keeps (anchors: index into the anchor list, in which the
# k-grouped anchors follow the 16 m-grouped ones).
QUICK = {
    "anchors": [0, 5, 8, 12, 16],
    "decode": [0, 3, 9],
    "prefill": [0, 10, 15],
    "masked": [0, 6, 13],
    "k_grouped": [0, 8, 13],
}


# ----------------------------------------------------------------------------------------------
# Cases and input layouts (CPU-only logic: importable and testable without a GPU)


@dataclass
class Case:
    """One benchmark problem.

    layout "contiguous" / "masked": b is [G, n, k], a has k columns.
    layout "k_grouped": d[g] = a_g^T b_g is [n, k] (the forward weight's shape), a is [T, n],
    b is [T, k] (as moe_shapes.json: DeepGEMM's m = n, n = k, ks = rows).
    """

    suite: str
    index: int
    name: str
    layout: str
    num_groups: int
    n: int
    k: int
    rows: list[int]
    max_m: int = 0  # masked: per-group capacity
    expected_m: int = 0  # masked: the hint passed to the kernel
    anchor: dict = field(default_factory=dict)  # DeepGEMM / torch reference numbers, if any

    @property
    def total_rows(self) -> int:
        return sum(self.rows)

    @property
    def mean_rows(self) -> float:
        """Mean rows over the groups that have any (regime classification)."""
        busy = [r for r in self.rows if r]
        return sum(busy) / len(busy) if busy else 0.0

    @property
    def regime(self) -> str:
        if self.layout == "k_grouped":
            return "kgrp"
        if self.suite == "decode":
            return "decode"
        # The targets define prefill as >= 1024 rows per group: the prefill suite's cases with
        # fewer (EP1 with 128-256 experts, llama4-scout) count as "mid".
        if self.mean_rows <= 64 and self.suite != "prefill":
            return "decode"
        return "prefill" if self.mean_rows >= 1024 else "mid"


def rows_per_group(m_per_group: int | list[int], num_groups: int) -> list[int]:
    """A suite's `m_per_group`: an int is balanced, a list gives every group's rows."""
    if isinstance(m_per_group, int):
        return [m_per_group] * num_groups
    rows = [int(r) for r in m_per_group]
    if len(rows) != num_groups:
        raise ValueError(f"m_per_group has {len(rows)} entries for {num_groups} groups")
    return rows


def anchor_rows(expected_m: float, num_groups: int, seed: int = 0) -> list[int]:
    """The protocol's rows per group: int(expected_m * U(0.7, 1.3)) with random.seed(seed)
    (a private generator seeded the same way, so the global one is left alone)."""
    rng = random.Random(seed)
    return [int(expected_m * rng.uniform(0.7, 1.3)) for _ in range(num_groups)]


def balanced_rows(total: int, num_groups: int) -> list[int]:
    base, extra = divmod(total, num_groups)
    return [base + (g < extra) for g in range(num_groups)]


def round_up(x: int, align: int) -> int:
    return -(-x // align) * align


def group_layouts(rows: list[int], align: int = ALIGN, device: str = "cpu") -> dict:
    """Index tensors for the two contiguous layouts of `rows` (real rows per group).

    offs:          int32 [G], cumulative end row of each group (packed, torch._grouped_mm)
    starts:        packed start row of each group (python ints)
    padded_starts: start row of each group's segment in the m_indices layout (python ints)
    padded_total:  rows of the m_indices layout (each segment rounded up to `align`)
    m_indices:     int32 [padded_total], the group of each row, -1 for padding
    real_rows:     int64 [sum(rows)], position of each real row in the m_indices layout
    """
    starts, padded_starts, ends = [], [], []
    pos = ppos = 0
    for r in rows:
        if r < 0:
            raise ValueError(f"negative rows in {rows}")
        starts.append(pos)
        padded_starts.append(ppos)
        pos += r
        ppos += round_up(r, align)
        ends.append(pos)
    m_indices = torch.full((ppos,), -1, dtype=torch.int32)
    real = []
    for g, (r, ps) in enumerate(zip(rows, padded_starts)):
        m_indices[ps : ps + r] = g
        real.append(torch.arange(ps, ps + r, dtype=torch.int64))
    real_rows = torch.cat(real) if real else torch.zeros(0, dtype=torch.int64)
    return {
        "offs": torch.tensor(ends, dtype=torch.int32, device=device),
        "starts": starts,
        "padded_starts": padded_starts,
        "padded_total": ppos,
        "m_indices": m_indices.to(device),
        "real_rows": real_rows.to(device),
    }


def shapes_path() -> Path:
    return Path(moegemm.__file__).parent / "data" / "moe_shapes.json"


def _suite_name(suite: str, entry: dict, g: int, n: int, k: int, rows: list[int]) -> str:
    return f"{suite}:{entry['model']}.{entry['op']} G{g} N{n} K{k} m{sum(rows)}"


def load_cases(suites: tuple[str, ...] = SUITES, quick: bool = False) -> list[Case]:
    """The cases of the selected suites, anchors first."""
    data = json.loads(shapes_path().read_text())["suites"]
    cases: list[Case] = []
    if "anchors" in suites:
        anchors: list[Case] = []
        for layout, name, g, n, k, rows, exp_m, dg_us, torch_us, dg_x, max_m in ANCHOR_CASES:
            per_group = anchor_rows(exp_m, g)
            if sum(per_group) != rows:  # the table's rows come from this rule (see above)
                raise ValueError(f"anchor {name}: {sum(per_group)} rows generated, table {rows}")
            anchor = {
                "table_rows": rows,
                "expected_m": exp_m,
                "deepgemm_us": dg_us,
                "torch_us": torch_us,
                "deepgemm_x_torch": dg_x,
            }
            if max_m and max(per_group) > max_m:
                raise ValueError(f"anchor {name}: rows exceed max_m {max_m}")
            anchors.append(
                Case(
                    "anchors",
                    len(anchors),
                    f"anchor:{name}",
                    layout,
                    g,
                    n,
                    k,
                    per_group,
                    max_m=max_m,
                    expected_m=exp_m if max_m else 0,
                    anchor=anchor,
                )
            )
        for g, m, n, t, dg_tflops, dg_share in ANCHOR_K_GROUPED:
            anchors.append(
                Case(
                    "anchors",
                    len(anchors),
                    f"anchor:k-grouped G{g} M{m} N{n} T{t}",
                    "k_grouped",
                    g,
                    m,
                    n,
                    balanced_rows(t, g),
                    anchor={"deepgemm_tflops": dg_tflops, "deepgemm_share_cublas": dg_share},
                )
            )
        cases += [c for c in anchors if not quick or c.index in QUICK["anchors"]]
    for suite in ("decode", "prefill", "masked", "k_grouped"):
        if suite not in suites:
            continue
        for i, e in enumerate(data[suite]):
            if quick and i not in QUICK[suite]:
                continue
            g, n, k = e["num_groups"], e["n"], e["k"]
            rows = rows_per_group(e["m_per_group"], g)
            case = Case(
                suite,
                i,
                _suite_name(suite, e, g, n, k, rows),
                {"masked": "masked", "k_grouped": "k_grouped"}.get(suite, "contiguous"),
                g,
                n,
                k,
                rows,
            )
            if suite == "masked":
                case.max_m = int(e["max_m"])
                hint = e.get("expected_m") or sum(rows) / g
                case.expected_m = max(1, min(case.max_m, math.ceil(hint)))
                for ref in ANCHOR_MASKED_SUITE:
                    if ref[:6] == (e["model"], e["op"], g, n, k, sum(rows)):
                        case.anchor = {
                            "deepgemm_us": ref[6],
                            "torch_us": ref[7],
                            "deepgemm_x_torch": ref[7] / ref[6],
                            "weight_floor_us": ref[8],
                        }
                        break
            cases.append(case)
    return cases


def filter_cases(cases: list[Case], pattern: str | None) -> list[Case]:
    if not pattern:
        return cases
    rx = re.compile(pattern)
    return [c for c in cases if rx.search(c.name)]


# ----------------------------------------------------------------------------------------------
# Heuristic descriptions and ahead-of-time compilation
