"""How close the SM90 heuristic's config pick comes to the best measured config.

For each case (default: a representative subset of the moe_shapes.json suites; --all for every
case): enumerate the legal configs for the problem, keep at most --max-configs of them (the
heuristic's pick, the best-ranked others by the cycle model, and a spread of block sizes),
compile them all first in parallel, check each against an FP32 reference (a config that fails
is excluded), time each with the config forced, re-time the pick and the fastest few, and
report best_time / pick_time. Targets: geometric mean >= 97%, every case >= 90%.

Case ids: SUITE/INDEX/LAYOUT, with LAYOUT offs or idx (m_indices) for the decode and prefill
suites, masked for masked and kgrp for k_grouped; --cases takes a regex over ids and names.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import re
import sys
import time
import traceback
from dataclasses import dataclass

import torch
from bench_bf16 import (
    ALIGN,
    Case,
    Timer,
    geomean,
    group_layouts,
    load_cases,
    nan_tensor,
    precompile,
    randn_bf16,
    rotating,
    round_up,
    spec_for,
    weight_sets,
)

import moegemm
from moegemm.families import enumerate_configs, estimate_cycles, is_legal
from moegemm.heuristics import GemmDesc
from moegemm.heuristics.sm90_bf16 import CLUSTER_SHAPES, storage_of, walk_stripe_m
from moegemm.launch.plans import build_plan
from moegemm.testing import calc_diff

TARGET_GEOMEAN, TARGET_EVERY = 0.97, 0.90
TOL = 1e-5

# The default subset: (suite, index in the suite, layout).
DEFAULT_CASES = [
    ("decode", 0, "offs"),  # deepseek_v3 linear1, 32 groups, ragged ~8 rows
    ("decode", 9, "offs"),  # qwen3_30b linear1, 128 groups x 4 rows
    ("decode", 12, "offs"),  # mixtral linear1, 8 groups x 4 rows, N 28672
    ("decode", 0, "idx"),
    ("prefill", 0, "offs"),  # deepseek_v3 linear1, 32 x 1024
    ("prefill", 11, "offs"),  # qwen3_30b linear2, 128 x 1024, K 768
    ("prefill", 15, "offs"),  # gpt_oss_120b linear1, K 2880, ragged
    ("prefill", 0, "idx"),
    ("masked", 0, "masked"),  # deepseek_v3 linear1, max_m 1024, ~36 rows
    ("masked", 6, "masked"),  # deepseek_v4_flash linear1, ~190 rows
    ("masked", 13, "masked"),  # llama4_maverick, N 16384, 16 rows
    ("k_grouped", 0, "kgrp"),  # deepseek_v3 wgrad 4 groups
    ("k_grouped", 8, "kgrp"),  # qwen3_30b 1536 x 2048
    ("k_grouped", 13, "kgrp"),  # gpt_oss_120b 5760 x 2880
]


@dataclass
class QCase:
    case: Case
    layout: str  # offs, idx, masked, kgrp

    @property
    def id(self) -> str:
        return f"{self.case.suite}/{self.case.index}/{self.layout}"

    @property
    def label(self) -> str:
        return f"{self.id} {self.case.name.split(':', 1)[-1]}"


def all_qcases() -> list[QCase]:
    out = []
    for c in load_cases(("decode", "prefill", "masked", "k_grouped")):
        if c.layout == "contiguous":
            out += [QCase(c, "offs"), QCase(c, "idx")]
        else:
            out.append(QCase(c, "masked" if c.layout == "masked" else "kgrp"))
    return out


def desc_for(q: QCase) -> GemmDesc:
    """The GemmDesc the API builds for this case and layout."""
    c = q.case
    g, n, k, total = c.num_groups, c.n, c.k, c.total_rows
    if q.layout == "offs":
        return GemmDesc("m_grouped_offsets", total, n, k, g, expected_m=math.ceil(total / g))
    if q.layout == "idx":
        return GemmDesc("m_grouped_contiguous", sum(round_up(r, ALIGN) for r in c.rows), n, k, g)
    if q.layout == "masked":
        return GemmDesc("m_grouped_masked", c.max_m, n, k, g, expected_m=min(c.expected_m, c.max_m))
    return GemmDesc("k_grouped", n, k, math.ceil(total / g), g, d_dtype="fp32", with_c=True)


def _n_bucket(block_n: int) -> int:
    return (block_n - 1) // 64  # 16-64, 80-128, 144-192, 208-256


def with_cluster_twins(cands: list, desc: GemmDesc, arch) -> list:
    """cands plus, for each, its legal twins of another cluster shape (the heuristics never
    enumerate clusters; they stay legal through config=). A cluster CTA loads its share of the
    operand it multicasts."""
    out = list(cands)
    for c in cands:
        lay = c.layout
        if lay.swap_ab or lay.cluster_size != 1:
            continue
        for cm, cn in CLUSTER_SHAPES:
            twin = dataclasses.replace(
                c,
                # The walk counts cluster m-blocks: the stripe rule as for a cluster pick.
                layout=dataclasses.replace(
                    lay, cluster_m=cm, cluster_n=cn, stripe_m=walk_stripe_m(desc, lay.block_m, cm)
                ),
                storage=storage_of(
                    lay.block_m, lay.block_n, (cm, cn), c.store_cols, desc.kind == "k_grouped"
                ),
            )
            if is_legal(twin, desc, arch) and twin not in out:
                out.append(twin)
    return out


def choose_candidates(
    desc: GemmDesc, arch, max_configs: int, twins: bool = False
) -> tuple[list, object]:
    """(candidates, pick): the pick first, then the best-ranked by the cycle model (half of
    the slots), then the best-ranked config of each kernel family (swapped or not) that is still
    missing, then a round-robin over (family, block_m, block_n range) buckets, each bucket's best
    first, so that the sample also spans tile shapes the model ranks low. max_configs <= 0:
    every legal config."""
    from moegemm.families import select_config

    legal = [c for c in enumerate_configs(desc, arch) if is_legal(c, desc, arch)]
    pick = select_config(desc, arch)
    est = {c: estimate_cycles(c, desc, arch) for c in legal}
    ranked = sorted(legal, key=lambda c: (est[c], -c.layout.block_m * c.layout.block_n))
    if max_configs <= 0 or max_configs >= len(legal):
        return [pick] + [c for c in ranked if c != pick], pick
    if twins:
        chosen, _ = choose_candidates(desc, arch, max_configs)
        return with_cluster_twins(chosen, desc, arch), pick
    chosen = [pick]
    top = max(0, (max_configs - 1 + 1) // 2)
    for c in ranked:
        if len(chosen) >= 1 + top:
            break
        if c not in chosen:
            chosen.append(c)
    # Decode cases have two kernels (swapped operands or not) whose tiles stream within a few
    # percent of each other; a sample without the other family cannot see the pick lose to it.
    for swap_ab in (False, True):
        family = next((c for c in ranked if c.layout.swap_ab == swap_ab), None)
        if family is not None and family not in chosen and len(chosen) < max_configs:
            chosen.append(family)
    buckets: dict[tuple, list] = {}
    for c in ranked:
        key = (c.layout.swap_ab, c.layout.block_m, _n_bucket(c.layout.block_n))
        buckets.setdefault(key, []).append(c)
    queues = [list(v) for v in buckets.values()]  # ordered by each bucket's best estimate
    while len(chosen) < max_configs and any(queues):
        for queue in queues:
            while queue and queue[0] in chosen:
                queue.pop(0)
            if queue and len(chosen) < max_configs:
                chosen.append(queue.pop(0))
    return chosen, pick


class Problem:
    """Inputs of one case and a runner that takes a forced config (None: the default path)."""

    def __init__(self, q: QCase):
        c = q.case
        self.layout = layout = q.layout
        g, n, k, rows = c.num_groups, c.n, c.k, c.rows
        if layout in ("offs", "idx"):
            lay = group_layouts(rows, ALIGN, device="cuda")
            a = randn_bf16(c.total_rows, k)
            self.bs = weight_sets(c)
            ref = torch.cat(
                [
                    a[s : s + r].float() @ self.bs[0][grp].float().t()
                    for grp, (r, s) in enumerate(zip(rows, lay["starts"]))
                    if r
                ]
            )
            api = moegemm.m_grouped_bf16_gemm_nt_contiguous
            if layout == "offs":
                d, offs = nan_tensor(c.total_rows, n), lay["offs"]
                self.run = lambda b, cfg: api(a, b, d, offs=offs, config=cfg)
                self.real = lambda: d
            else:
                a_pad = randn_bf16(lay["padded_total"], k)
                a_pad[lay["real_rows"]] = a
                d, mi, real = nan_tensor(lay["padded_total"], n), lay["m_indices"], lay["real_rows"]
                self.run = lambda b, cfg: api(a_pad, b, d, mi, config=cfg)
                self.real = lambda: d[real]
        elif layout == "masked":
            a = randn_bf16(g, c.max_m, k)
            self.bs = weight_sets(c)
            d = nan_tensor(g, c.max_m, n)
            masked_m = torch.tensor(rows, device="cuda", dtype=torch.int32)
            valid = torch.arange(c.max_m, device="cuda")[None, :] < masked_m[:, None]
            ref = torch.cat(
                [
                    a[grp, :r].float() @ self.bs[0][grp].float().t()
                    for grp, r in enumerate(rows)
                    if r
                ]
            )
            api, expected = moegemm.m_grouped_bf16_gemm_nt_masked, c.expected_m
            self.run = lambda b, cfg: api(a, b, d, masked_m, expected, config=cfg)
            self.real = lambda: d[valid]
        else:
            a, bk = randn_bf16(c.total_rows, n), randn_bf16(c.total_rows, k)
            lay = group_layouts(rows, device="cuda")
            offs = lay["offs"]
            c_in = torch.randn(g, n, k, device="cuda")
            ref = (
                torch.stack(
                    [
                        a[s : s + r].float().t() @ bk[s : s + r].float()
                        for r, s in zip(rows, lay["starts"])
                    ]
                )
                + c_in
            )
            d = nan_tensor(g, n, k, dtype=torch.float32)
            self.bs = [None]
            api = moegemm.k_grouped_bf16_gemm_tn_contiguous
            # Checked with a separate C; timed with C accumulated in place (DeepGEMM's form).
            self.run = lambda _b, cfg: api(a, bk, d, offs, c_in, config=cfg)
            self.run_timed = lambda _b, cfg: api(a, bk, d, offs, d, config=cfg)
            self.real = lambda: d
        self.ref = ref
        self.out = d

    def check(self, cfg) -> float:
        """calc_diff of the real rows (all groups together) against the FP32 reference."""
        self.out.fill_(float("nan"))
        self.run(self.bs[0], cfg)
        torch.cuda.synchronize()
        return calc_diff(self.real(), self.ref)

    def timed(self, cfg):
        """A no-argument callable for the timer (cfg None: the API's own pick and plan)."""
        if self.layout == "kgrp":
            self.out.normal_()
            return lambda: self.run_timed(None, cfg)
        return rotating(lambda b: self.run(b, cfg), self.bs)


def measure_case(q: QCase, arch, args, failed_specs: dict) -> dict:
    desc = desc_for(q)
    cands, pick = choose_candidates(desc, arch, args.max_configs, args.cluster_twins)
    names = {c: c.short_name() for c in cands}
    est = {c: estimate_cycles(c, desc, arch) for c in cands}
    row: dict = {
        "id": q.id,
        "case": q.label,
        "desc": str(desc),
        "pick": names[pick],
        "candidates": len(cands),
        "bad": {},
        "times_us": {},
        "est_cycles": {},
    }
    prob = Problem(q)
    timer = Timer(queued=args.timer == "queued", budget_ms=args.budget_ms, max_iters=args.max_iters)
    times: dict = {}
    for cfg in cands:
        name = names[cfg]
        row["est_cycles"][name] = round(est[cfg])
        err = failed_specs.get(spec_for(desc, cfg))
        if err:
            row["bad"][name] = "compile: " + err[:200]
            continue
        try:
            diff = prob.check(cfg)
            if not diff < TOL:
                row["bad"][name] = f"calc_diff {diff:.2e}"
                continue
            times[cfg] = timer(prob.timed(cfg))
        except Exception as exc:  # noqa: BLE001 - a config that cannot run is reported
            row["bad"][name] = f"{type(exc).__name__}: {exc}"[:200]
    if pick not in times:
        row["error"] = f"the pick {names[pick]} failed: {row['bad'].get(names[pick])}"
        return row
    # Re-time the pick and the fastest few, interleaved; keep each one's best median.
    finalists = [pick] + [c for c in sorted(times, key=times.get)[: args.retime] if c != pick]
    for _ in range(2):
        for cfg in finalists:
            times[cfg] = min(times[cfg], timer(prob.timed(cfg)))
    clustered = [c for c in times if c.layout.cluster_m * c.layout.cluster_n > 1]
    single = [c for c in times if c not in clustered]
    if clustered and single:
        row["best_single_us"] = min(times[c] for c in single)
        row["best_cluster_us"] = min(times[c] for c in clustered)
        # CTAs a cluster plan launches: co-resident clusters x cluster size, at most the SMs.
        device = torch.cuda.current_device()
        row["cluster_ctas"] = {
            names[c]: build_plan(device, desc, c).launch.num_blocks for c in clustered
        }
    default_us = timer(prob.timed(None))  # the plain API path (cached plan) for the pick
    best = min(times, key=times.get)
    order = sorted(times, key=times.get)
    row.update(
        {
            "best": names[best],
            "pick_us": times[pick],
            "best_us": times[best],
            "fraction": times[best] / times[pick],
            "pick_default_path_us": default_us,
            "pick_measured_rank": order.index(pick) + 1,
            "times_us": {
                names[c]: round(t, 2) for c, t in sorted(times.items(), key=lambda x: x[1])
            },
        }
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--all", action="store_true", help="every case of the suites")
    parser.add_argument("--cases", help="regex over case ids/names (applied after --all)")
    parser.add_argument(
        "--max-configs",
        type=int,
        default=12,
        help="candidates per case, the pick included (0: all legal)",
    )
    parser.add_argument(
        "--retime", type=int, default=3, help="fastest candidates re-timed with the pick"
    )
    parser.add_argument(
        "--timer",
        choices=("queued", "events"),
        default="queued",
        help="queued hides the host cost of forced-config calls (see "
        "bench_bf16.py); events: moegemm.testing.bench_us as is",
    )
    parser.add_argument(
        "--budget-ms", type=float, default=30.0, help="timed GPU time per measurement"
    )
    parser.add_argument("--max-iters", type=int, default=60)
    parser.add_argument("--jobs", type=int, default=None, help="parallel compiles")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument(
        "--list",
        action="store_true",
        help="list the cases and their candidates, then exit (no GPU needed)",
    )
    parser.add_argument(
        "--cluster-twins",
        action="store_true",
        help="also time each candidate's cluster-shape twins (prints single vs cluster)",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)

    qcases = all_qcases()
    if not args.all:
        by_key = {(q.case.suite, q.case.index, q.layout): q for q in qcases}
        qcases = [by_key[key] for key in DEFAULT_CASES if key in by_key]
    if args.cases:
        rx = re.compile(args.cases)
        qcases = [q for q in qcases if rx.search(q.label)]

    if args.list:
        for q in qcases:
            cands, pick = choose_candidates(
                desc_for(q), sm90_arch(), args.max_configs, args.cluster_twins
            )
            print(
                f"{q.label:70s} pick {pick.short_name():20s} "
                + " ".join(c.short_name() for c in cands[1:])
            )
        return 0
    if not torch.cuda.is_available():
        print("heuristic_quality: no CUDA device", file=sys.stderr)
        return 1
    from moegemm.launch.device import arch_for_device

    arch = arch_for_device(torch.cuda.current_device())
    if arch.name != "sm_90a":
        print(f"heuristic_quality: SM90 only (this device is {arch.name})", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    t0 = time.perf_counter()
    specs = []
    for q in qcases:
        desc = desc_for(q)
        cands = choose_candidates(desc, arch, args.max_configs, args.cluster_twins)[0]
        specs += [spec_for(desc, c) for c in cands]
    failed = precompile(specs, args.jobs)

    print(
        f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, timer {args.timer}, "
        f"max {args.max_configs} configs per case",
        flush=True,
    )
    print(
        f"{'case':70s} {'pick':>18s} {'best':>18s} {'pick us':>9s} {'best us':>9s} "
        f"{'frac':>6s} {'rank':>5s}",
        flush=True,
    )
    rows = []
    for q in qcases:
        try:
            row = measure_case(q, arch, args, failed)
        except Exception as exc:  # noqa: BLE001 - one failing case must not stop the rest
            row = {"id": q.id, "case": q.label, "error": f"{type(exc).__name__}: {exc}"[:300]}
            if args.verbose:
                traceback.print_exc()
        torch.cuda.empty_cache()
        rows.append(row)
        if "fraction" in row:
            print(
                f"{row['case'][:70]:70s} {row['pick']:>18s} {row['best']:>18s} "
                f"{row['pick_us']:9.1f} {row['best_us']:9.1f} {100 * row['fraction']:5.1f}% "
                f"{row['pick_measured_rank']:2d}/{len(row['times_us']):<2d}"
                + (f"  ({len(row['bad'])} bad)" if row.get("bad") else ""),
                flush=True,
            )
        else:
            print(f"{row['case'][:70]:70s} ERROR {row.get('error')}", flush=True)

    fractions = [r["fraction"] for r in rows if "fraction" in r]
    geo = geomean(fractions)
    worst = sorted((r for r in rows if "fraction" in r), key=lambda r: r["fraction"])[:5]
    errors = [r["id"] for r in rows if "fraction" not in r]
    print()
    if geo is not None:
        print(
            f"geometric mean {100 * geo:.1f}% (target {100 * TARGET_GEOMEAN:.0f}%): "
            f"{'PASS' if geo >= TARGET_GEOMEAN else 'MISS'}"
        )
        below = [r for r in rows if "fraction" in r and r["fraction"] < TARGET_EVERY]
        print(
            f"every case >= {100 * TARGET_EVERY:.0f}%: {'PASS' if not below else 'MISS'} "
            f"(min {100 * min(fractions):.1f}%, {len(below)} below)"
        )
        print(
            "worst: "
            + "; ".join(
                f"{r['id']} {100 * r['fraction']:.1f}% (pick {r['pick']}, best {r['best']})"
                for r in worst
            )
        )
    gains = [r["best_single_us"] / r["best_cluster_us"] for r in rows if "best_cluster_us" in r]
    if gains:
        print(
            f"clusters: best single-CTA time / best cluster time, geomean {geomean(gains):.3f} "
            f"over {len(gains)} cases (min {min(gains):.3f}, max {max(gains):.3f})"
        )
        for r in rows:
            if "best_cluster_us" in r:
                ctas = sorted(set(r["cluster_ctas"].values()))
                print(
                    f"  {r['case'][:60]:60s} single {r['best_single_us']:9.1f} us  "
                    f"cluster {r['best_cluster_us']:9.1f} us  (cluster plans launch {ctas} CTAs)"
                )
    if errors:
        print(f"errors in {len(errors)} cases: {', '.join(errors)}")
    elapsed = time.perf_counter() - t0
    print(f"# {len(rows)} cases in {elapsed:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "gpu": torch.cuda.get_device_name(),
                    "torch": torch.__version__,
                    "timer": args.timer,
                    "max_configs": args.max_configs,
                    "geomean": geo,
                    "min": min(fractions) if fractions else None,
                    "pass_geomean": geo is not None and geo >= TARGET_GEOMEAN,
                    "pass_every": bool(fractions) and min(fractions) >= TARGET_EVERY,
                    "errors": errors,
                    "cases": rows,
                    "elapsed_s": elapsed,
                },
                f,
                indent=1,
            )
    return 0


def sm90_arch():
    """The SM90 arch spec with the H200's 132 SMs (for --list without a GPU)."""
    from moegemm.heuristics import SM90

    return SM90


if __name__ == "__main__":
    sys.exit(main())
