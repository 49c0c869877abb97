"""Configs of one case timed in sustained runs, with the SM clock and board power beside them.

    python3 scripts/sustained_twins.py [--cases REGEX] [--seconds 1.0] [--configs 2]

Compute-bound kernels on the H200 run at its 700 W limit, where the clock follows the energy a
kernel spends per FLOP (scripts/power_probe.py). Interleaved twin timing (cluster_twins.py) runs
short bursts whose clock is set by the mix of all twins, so a config that does the same work per
SM cycle with fewer bytes moved cannot show its gain there. This script runs each build back to
back for --seconds (forward, then in reverse order) and prints µs, median SM clock, power and
FLOP per SM cycle per SM. Builds per case: the heuristic's pick, its 1x2 and 2x1 cluster twins
(A or B multicast) and the next --configs single-CTA configs of the model's ranking. Every build
is checked against the FP32 reference first. GPU only.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from bench_bf16 import geomean, precompile, spec_for
from cluster_twins import SHAPES, twin
from heuristic_quality import TOL, Problem, all_qcases, desc_for, sm90, sm90_arch
from power_probe import sustained

from moegemm.heuristics import select_config


def builds_for(desc, arch, extra: int) -> dict:
    pick = select_config(desc, arch)
    legal = [c for c in sm90.enumerate_configs(desc, arch) if sm90.is_legal(c, desc, arch)]
    single = [c for c in legal if not c.layout.swap_ab and c.layout.cluster_size == 1]
    ranked = sorted(single, key=lambda c: sm90._rank_key(c, desc, arch))
    builds = {"pick": pick}
    base = pick
    if pick.layout.cluster_size > 1:
        base = next(
            (
                c
                for c in ranked
                if c.layout.block_m == pick.layout.block_m
                and c.layout.block_n == pick.layout.block_n
            ),
            ranked[0],
        )
        builds["single"] = base
    for shape in SHAPES:
        other = twin(base, shape, desc, arch)
        if other is not None and other != pick:
            builds[f"{shape[0]}x{shape[1]}"] = other
    for i, c in enumerate(x for x in ranked if x not in builds.values()):
        if i >= extra:
            break
        builds[f"rank{i + 1}"] = c
    return builds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=r"prefill/(13|15|1|5)/offs", help="regex over labels")
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--configs", type=int, default=2, help="extra ranked single configs")
    parser.add_argument(
        "--variants",
        default="",
        help="comma-separated stage variants of the pick to add as builds (timing twins with "
        "right results, e.g. 4: the grouped walk without the per-round rotation)",
    )
    args = parser.parse_args(argv)

    os.environ[sm90.EXPERIMENTAL_CLUSTERS_ENV] = "1"
    arch = sm90_arch()
    variants = [int(v) for v in args.variants.split(",") if v]
    # A build key "vN" is the pick built with stage variant N: forced configs build through
    # plans.build_plan on every call, so switching the variant before each call switches builds.
    import moegemm.api.plans as plans_mod

    real_build = plans_mod.build_plan
    current = {"variant": 0}

    def build_with_variant(device, desc, config=None, stage_variant=0):
        return real_build(device, desc, config, stage_variant or current["variant"])

    plans_mod.build_plan = build_with_variant

    def variant_of(key: str) -> int:
        return int(key[1:]) if key.startswith("v") else 0

    def select(key: str) -> None:
        current["variant"] = variant_of(key)

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    work = []
    for q in all_qcases():
        if re.fullmatch(args.cases, q.label.split(" ")[0]):
            desc = desc_for(q)
            builds = builds_for(desc, arch, args.configs)
            builds.update({f"v{v}": builds["pick"] for v in variants})
            work.append((q, desc, builds))
    precompile([spec_for(desc, c, variant_of(k)) for _, desc, b in work for k, c in b.items()])
    ratios: dict[str, list[float]] = {}
    for q, _desc, builds in work:
        prob = Problem(q)
        bad = []
        for key, cfg in builds.items():
            select(key)
            if not prob.check(cfg) < TOL:
                bad.append(key)
        if bad:
            print(f"{q.label}: FAILED {bad}")
            continue
        c = q.case
        flops = 2.0 * c.total_rows * c.n * c.k
        runs: dict[str, list[tuple[float, float, float]]] = {k: [] for k in builds}
        for order in (list(builds), list(reversed(builds))):
            for key in order:
                select(key)
                us, samples = sustained(prob.timed(builds[key]), args.seconds)
                clock = statistics.median(s[0] for s in samples) if samples else float("nan")
                power = statistics.median(s[1] for s in samples) if samples else float("nan")
                runs[key].append((us, clock, power))
        print(f"== {q.label}")
        base_us = statistics.mean(r[0] for r in runs["pick"])
        for key, cfg in builds.items():
            us = statistics.mean(r[0] for r in runs[key])
            clock = statistics.mean(r[1] for r in runs[key])
            power = statistics.mean(r[2] for r in runs[key])
            tflops = flops / (us * 1e-6) / 1e12
            per_clk = tflops * 1e12 / (clock * 1e6 * sms)
            ratio = base_us / us
            if key != "pick":
                ratios.setdefault(key, []).append(ratio)
            print(
                f"  {key:6s} {cfg.short_name():26s} {us:9.1f} us ({runs[key][0][0]:.1f} / "
                f"{runs[key][1][0]:.1f}) {tflops:6.1f} TF/s {clock:6.0f} MHz {power:5.0f} W "
                f"{per_clk:7.1f} FLOP/clk/SM  pick/this x{ratio:.3f}",
                flush=True,
            )
    for key, r in ratios.items():
        print(
            f"{key}: pick time / this time geomean {geomean(r):.3f} over {len(r)} cases "
            f"(min {min(r):.3f}, max {max(r):.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
