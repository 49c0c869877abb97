"""Times the tile orders of the grouped kernels against their round-robin twins, interleaved on
the same inputs, for the cases of the suites (default: every k-grouped case) and a few configs
each (the cycle model's best-ranked ones without swapped operands: the first is the
heuristic's pick unless the pick swaps operands):
  k-grouped: largest groups first, rounds snaking over the CTAs, against stage variant 16
             (tiles round-robin in group order);
  offs / masked (the grouped walk): rounds rotated over the CTAs, against stage variant 4 (not
             rotated). Swapped-operand configs are skipped.
--variant V times stage variant V as the twin instead (any timing variant with right results;
8 on offs / masked cases builds the printing timeline probe, not a useful twin).
Both builds are checked against the FP32 reference first.

    python3 scripts/order_twins.py [--cases REGEX] [--configs 3] [--variant V]

Prints per case and config: the twin's us, the default build's us, and their ratio (> 1: the
default is faster), then the geometric means.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from heuristic_quality import Problem, Timer, all_qcases, desc_for, sm90, sm90_arch
from twin_timing import check_and_time

ROUND_ROBIN_VARIANT = {"kgrp": 16, "offs": 4, "masked": 4}


def main(argv: list[str] | None = None) -> int:
    import re

    from bench_bf16 import geomean, precompile, spec_for

    import moegemm.api.plans as plans_mod

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", help="regex over case ids/names")
    parser.add_argument("--configs", type=int, default=3, help="configs per case")
    parser.add_argument("--variant", type=int, help="the twin's stage variant (see above)")
    args = parser.parse_args(argv)
    twin_variant = ROUND_ROBIN_VARIANT
    if args.variant is not None:
        twin_variant = dict.fromkeys(ROUND_ROBIN_VARIANT, args.variant)

    arch = sm90_arch()
    timer = Timer(queued=True, budget_ms=300, max_iters=60)
    real_build = plans_mod.build_plan
    variant = {"value": 0}

    def build_with_variant(device, desc, config=None, stage_variant=0):
        return real_build(device, desc, config, stage_variant or variant["value"])

    plans_mod.build_plan = build_with_variant  # forced configs build through get_plan
    ratios, ratios_first = [], []
    qcases = [q for q in all_qcases() if q.layout in ROUND_ROBIN_VARIANT]
    qcases = [q for q in qcases if re.search(args.cases or "kgrp", q.label)]
    work = []
    for q in qcases:
        desc = desc_for(q)
        legal = [c for c in sm90.enumerate_configs(desc, arch) if sm90.is_legal(c, desc, arch)]
        legal = [c for c in legal if not c.layout.swap_ab]
        ranked = sorted(legal, key=lambda c: sm90._rank_key(c, desc, arch))
        work.append((q, desc, ranked[: args.configs]))
    precompile([spec_for(desc, c, v) for q, desc, cfgs in work for c in cfgs
                for v in (0, twin_variant[q.layout])])  # fmt: skip
    twin_name = "round-robin" if args.variant is None else f"variant {args.variant}"
    print(f"{'case':62s} {'config':26s} {twin_name:>11s} {'default':>11s}  ratio")
    for q, _desc, cfgs in work:
        prob = Problem(q)
        rr_variant = twin_variant[q.layout]
        for rank, cfg in enumerate(cfgs):
            med, bad = check_and_time(
                prob,
                timer,
                {0: cfg, rr_variant: cfg},
                select=lambda v: variant.__setitem__("value", v),
            )
            if bad:
                print(f"{q.label[:62]:62s} {cfg.short_name():26s} FAILED {'; '.join(bad)}")
                continue
            old, new = med[rr_variant], med[0]
            ratios.append(old / new)
            if rank == 0:
                ratios_first.append(old / new)
            print(
                f"{q.label[:62]:62s} {cfg.short_name():26s} {old:11.1f} {new:11.1f}  "
                f"x{old / new:.3f}"
            )
    variant["value"] = 0
    plans_mod.build_plan = real_build
    if ratios:
        print(
            f"geomean {twin_name} / default: all {geomean(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f}); first-ranked {geomean(ratios_first):.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
