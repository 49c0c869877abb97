"""Times 2-CTA clusters against one CTA per tile, interleaved on the same inputs: for each case
of the suites (default: the offs prefill cases) and its best-ranked unswapped configs, the
single-CTA build, its 1x2 twin (A multicast to neighbouring n-blocks) and, where the layout has
one, its 2x1 twin (B multicast to neighbouring m-blocks). Every build is checked against the
FP32 reference first. GPU only.

    python3 scripts/cluster_twins.py [--cases REGEX] [--configs 2]

Prints per case and config the three times and the ratios single / cluster (> 1: the cluster
is faster), then the geometric means per cluster shape.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from heuristic_quality import Problem, Timer, all_qcases, desc_for, sm90, sm90_arch
from twin_timing import check_and_time

SHAPES = ((1, 2), (2, 1))


def twin(config, shape: tuple[int, int], desc, arch):
    """`config` with another cluster shape, if that is legal for `desc`."""
    cluster_m, cluster_n = shape
    lay = dataclasses.replace(config.layout, cluster_m=cluster_m, cluster_n=cluster_n)
    storage = dataclasses.replace(
        config.storage,
        load_box_a=(lay.block_k, lay.block_m // cluster_n),
        load_box_b=(lay.block_k, lay.block_n // cluster_m),
    )
    other = dataclasses.replace(config, layout=lay, storage=storage)
    return other if sm90.is_legal(other, desc, arch) else None


def main(argv: list[str] | None = None) -> int:
    import re

    from bench_bf16 import geomean, precompile, spec_for

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default=r"prefill/.*/offs", help="regex over case labels")
    parser.add_argument("--configs", type=int, default=2, help="single-CTA configs per case")
    parser.add_argument("--budget-ms", type=float, default=100.0)
    args = parser.parse_args(argv)

    os.environ[sm90.EXPERIMENTAL_CLUSTERS_ENV] = "1"
    arch = sm90_arch()
    timer = Timer(queued=True, budget_ms=args.budget_ms, max_iters=60)
    work = []
    for q in all_qcases():
        if not re.search(args.cases, q.label):
            continue
        desc = desc_for(q)
        legal = [c for c in sm90.enumerate_configs(desc, arch) if sm90.is_legal(c, desc, arch)]
        single = [c for c in legal if not c.layout.swap_ab and c.layout.cluster_size == 1]
        ranked = sorted(single, key=lambda c: sm90._rank_key(c, desc, arch))[: args.configs]
        for cfg in ranked:
            twins = {s: twin(cfg, s, desc, arch) for s in SHAPES}
            work.append((q, desc, cfg, {s: t for s, t in twins.items() if t is not None}))
    precompile([spec_for(desc, c) for _, desc, cfg, twins in work for c in (cfg, *twins.values())])
    ratios: dict[tuple[int, int], list[float]] = {s: [] for s in SHAPES}
    first: dict[tuple[int, int], list[float]] = {s: [] for s in SHAPES}
    print(f"{'case':58s} {'config':24s} {'1x1 us':>9s} {'1x2 us':>9s} {'2x1 us':>9s}  ratios")
    seen_cases: set[str] = set()
    prob, prob_label = None, None
    for q, _desc, cfg, twins in work:
        if prob_label != q.label:
            prob, prob_label = Problem(q), q.label
        med, bad = check_and_time(prob, timer, {(1, 1): cfg, **twins})
        if bad:
            print(f"{q.label[:58]:58s} {cfg.short_name():24s} FAILED {'; '.join(bad)}")
            continue
        cells, notes = [], []
        for shape in SHAPES:
            if shape in med:
                r = med[(1, 1)] / med[shape]
                ratios[shape].append(r)
                if q.label not in seen_cases:
                    first[shape].append(r)
                cells.append(f"{med[shape]:9.1f}")
                notes.append(f"{shape[0]}x{shape[1]} x{r:.3f}")
            else:
                cells.append(f"{'-':>9s}")
        seen_cases.add(q.label)
        print(
            f"{q.label[:58]:58s} {cfg.short_name():24s} {med[(1, 1)]:9.1f} "
            + " ".join(cells)
            + "  "
            + ", ".join(notes),
            flush=True,
        )
    for shape in SHAPES:
        if ratios[shape]:
            r = ratios[shape]
            print(
                f"{shape[0]}x{shape[1]}: single / cluster geomean {geomean(r):.3f} over "
                f"{len(r)} configs (min {min(r):.3f}, max {max(r):.3f}); first-ranked "
                f"{geomean(first[shape]):.3f} over {len(first[shape])} cases"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
