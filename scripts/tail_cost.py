"""Times one config on synthetic offsets problems whose groups all hold the same rows, to
measure what a group's partial last m-block costs against a full one (no heuristics involved);
--ragged spreads the rows around the given mean instead. --twins also times each config's
build with split tails (MOEGEMM_EXPERIMENTAL_SPLIT_TAILS), each build with and without the
grouped walk's per-round rotation (stage variant 4), interleaved on the same inputs, and checks
that all four write the same bits.

    python3 scripts/tail_cost.py --groups 128 --n 5760 --k 2880 --rows 64 128 192 256 \\
        --configs m128n240k64s3w2c1x1e16 m64n240k64s5w1c1x1e16

Prints, per config and rows per group, the time and the time per m-block tile; equal times
for 64 and 128 rows mean a half-empty tile costs a full one.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from heuristic_quality import TOL, Case, Problem, QCase, Timer, desc_for, sm90, sm90_arch

UNROTATED_VARIANT = 4  # stage variant: the grouped walk without its per-round rotation


def twin_times(desc, cfg, per_group: list[int], n: int, k: int, timer) -> str:
    """The default build of `cfg` against its split-tails build, each with the walk's per-round
    rotation and without it (stage variant 4), interleaved on the same inputs; all four must
    write the same bits."""
    import os

    import torch

    from moegemm.api.plans import build_plan
    from moegemm.jit.codegen import SPLIT_TAILS_ENV

    rows, groups = sum(per_group), len(per_group)
    a = torch.randn(rows, k, device="cuda").bfloat16()
    b = (torch.randn(groups, n, k, device="cuda") * 0.02).bfloat16()
    offs = torch.tensor(per_group, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    stream = torch.cuda.current_stream().cuda_stream
    device = torch.cuda.current_device()
    plans = {}
    saved = os.environ.get(SPLIT_TAILS_ENV)
    try:
        for label, flag in (("default", "0"), ("split", "1")):
            os.environ[SPLIT_TAILS_ENV] = flag  # read when the kernel source is generated
            plans[label] = build_plan(device, desc, cfg)
            plans[label + "-unrotated"] = build_plan(device, desc, cfg, UNROTATED_VARIANT)
    finally:
        if saved is None:
            os.environ.pop(SPLIT_TAILS_ENV, None)
        else:
            os.environ[SPLIT_TAILS_ENV] = saved
    d = {label: torch.full((rows, n), float("nan"), device="cuda", dtype=torch.bfloat16)
         for label in plans}  # fmt: skip
    times: dict[str, list[float]] = {label: [] for label in plans}
    for _ in range(3):
        for label, plan in plans.items():
            args = (a.data_ptr(), b.data_ptr(), d[label].data_ptr(), 0, offs.data_ptr(), rows,
                    rows, n, k, groups, k, k, n * k, n, 0, stream)  # fmt: skip
            times[label].append(timer(lambda plan=plan, args=args: plan.launch(*args)))
    median = {label: sorted(t)[1] for label, t in times.items()}
    same = all(torch.equal(d["default"], out) for out in d.values())
    base = median["default-unrotated"]
    return ", ".join(f"{label} {us:.1f} us (x{base / us:.3f})" for label, us in median.items()) + (
        " (same bits)" if same else " (DIFFERENT BITS)"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=128)
    parser.add_argument("--n", type=int, default=5760)
    parser.add_argument("--k", type=int, default=2880)
    parser.add_argument("--rows", type=int, nargs="+", default=[64, 128, 192, 256])
    parser.add_argument("--configs", nargs="+", required=True)
    parser.add_argument(
        "--ragged", type=float, default=0.0, help="rows * U(1 - x, 1 + x) per group (seed 0)"
    )
    parser.add_argument("--twins", action="store_true", help="also time the build with split tails")
    args = parser.parse_args(argv)

    arch = sm90_arch()
    timer = Timer(queued=True, budget_ms=300, max_iters=60)
    print(f"# G{args.groups} N{args.n} K{args.k}, rows per group spread {args.ragged}")
    for rows in args.rows:
        rng = random.Random(0)
        spread = (1 - args.ragged, 1 + args.ragged)
        per_group = [round(rows * rng.uniform(*spread)) for _ in range(args.groups)]
        case = Case(
            "synthetic",
            rows,
            f"tail:{rows}",
            "contiguous",
            args.groups,
            args.n,
            args.k,
            per_group,
        )
        q = QCase(case, "offs")
        desc = desc_for(q)
        legal = {
            c.short_name(): c
            for c in sm90.enumerate_configs(desc, arch)
            if sm90.is_legal(c, desc, arch)
        }
        prob = Problem(q)
        for name in args.configs:
            cfg = legal.get(name)
            if cfg is None:
                print(f"rows {rows:5d} {name}: not legal")
                continue
            diff = prob.check(cfg)
            if not diff < TOL:
                print(f"rows {rows:5d} {name}: calc_diff {diff:.2e}")
                continue
            us = timer(prob.timed(cfg))
            tiles = sum(math.ceil(r / cfg.layout.block_m) for r in per_group)
            tiles *= math.ceil(args.n / cfg.layout.block_n)
            tflops = 2 * sum(per_group) * args.n * args.k / us / 1e6
            print(
                f"rows {rows:5d} {name:26s} {us:9.1f} us  {tflops:6.0f} TF/s  "
                f"{us / math.ceil(tiles / arch.num_sms):7.2f} us per wave of tiles"
            )
            if args.twins and not cfg.layout.swap_ab:
                print(f"           {twin_times(desc, cfg, per_group, args.n, args.k, timer)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
