"""Times the heuristics' pick against the decode kernel's configs on FP8 x FP4 problems.

    python3 tools/fp8_fp4_config_sweep.py [--problems NAME,...] [--configs NAME,...] [--json PATH]

For each problem (a grouped GEMM with uniform rows per group, or "ragged": the benchmark protocol's
int(rows * U(0.7, 1.3)); operands as in profile_fp8_fp4.py): the heuristics' pick, and every decode
config (impls/sm90_fp8_fp4_swap_ab_gemm.cuh) whose token tile holds the mean rows up to the largest
group's (the smallest of each), with 1..4 math warpgroups, and any config --configs names (short
names, where legal), compiled in parallel first. Each config is checked against FP32 on the
dequantized operands (a failure is reported and not timed), then timed (median µs, weights larger
than L2 so no call reads them from it). The table: µs per config, the pick marked, and the best
decode config's speed over the pick's. This is how the decode kernel's cost in the heuristics is
calibrated.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from profile_fp8_fp4 import Problem, desc_of, group_rows, legal_configs

from moegemm.families import select_config
from moegemm.heuristics import SM90, sm90_fp8_fp4_decode, sm90_fp8_fp4_table

# name: (groups, n, k, rows per group, layout[, ragged[, active groups]]); every weight set
# exceeds 3 x L2, but the few-experts ones (decode at one or two tokens: the fused layer's
# offsets layout, top-k experts of E hit), which fall back on L2 after the first call
PROBLEMS = {
    "dsv3-l1-r8-masked-ragged": (32, 4096, 7168, 8, "masked", True),
    "dsv3-l1-r32-masked-ragged": (32, 4096, 7168, 32, "masked", True),
    "dsv3-l1-r8-offs-ragged": (32, 4096, 7168, 8, "offs", True),
    "dsv3-l1-r64-masked-ragged": (32, 4096, 7168, 64, "masked", True),
    "dsv3-l1-r128-masked-ragged": (32, 4096, 7168, 128, "masked", True),
    "dsv3-l2-r64-masked-ragged": (32, 7168, 2048, 64, "masked", True),
    "qwen3-l2-r64-masked-ragged": (128, 2048, 768, 64, "masked", True),
    "gptoss-l1-r128-masked-ragged": (32, 5760, 2880, 128, "masked", True),
    "dsv3-l1-r256-offs-ragged": (32, 4096, 7168, 256, "offs", True),
    "qwen3-l1-r256-offs-ragged": (128, 1536, 2048, 256, "offs", True),
    "dsv3-l1-r1024-offs": (32, 4096, 7168, 1024, "offs"),
    "gptoss-l1-r8-masked-ragged": (32, 5760, 2880, 8, "masked", True),
    "qwen3-l2-r32-masked-ragged": (128, 2048, 768, 32, "masked", True),
    "dsv3-l2-r32-masked-ragged": (32, 7168, 2048, 32, "masked", True),
    "gptoss-l1-r32-masked-ragged": (32, 5760, 2880, 32, "masked", True),
    "gptoss-l2-r32-masked-ragged": (32, 2880, 2880, 32, "masked", True),
    "dsv3-l1-r1-masked-ragged": (32, 4096, 7168, 1, "masked", True),
    "dsv3-l1-r1-masked": (32, 4096, 7168, 1, "masked"),
    "dsv3-l1-r8-masked": (32, 4096, 7168, 8, "masked"),
    "dsv3-l1-r8-offs": (32, 4096, 7168, 8, "offs"),
    "dsv3-l1-r32-offs": (32, 4096, 7168, 32, "offs"),
    "dsv3-l1-r64-offs": (32, 4096, 7168, 64, "offs"),
    "dsv3-l2-r8-masked": (32, 7168, 2048, 8, "masked"),
    "gptoss-l1-r8-offs": (32, 5760, 2880, 8, "offs"),
    "qwen3-l1-r4-offs": (128, 1536, 2048, 4, "offs"),
    "qwen3-l1-t1-offs": (128, 1536, 2048, 1, "offs", False, 8),
    "qwen3-l2-t1-offs": (128, 2048, 768, 1, "offs", False, 8),
    "qwen3-l2-t2-offs": (128, 2048, 768, 1, "offs", False, 16),
    "gptoss-l1-t1-offs": (32, 5760, 2880, 1, "offs", False, 4),
    "gptoss-l2-t1-offs": (32, 2880, 2880, 1, "offs", False, 4),
    "dsv3-l1-t1-offs": (64, 4096, 7168, 1, "offs", False, 8),  # 64 of 256: the same view
    "dsv3-l2-t1-offs": (64, 7168, 2048, 1, "offs", False, 8),
    "dsv3-l1-r320-masked": (32, 4096, 7168, 320, "masked"),
    "dsv3-l1-r4096-offs": (32, 4096, 7168, 4096, "offs"),
    # the convert-ahead kernel on DeepGEMM's layout
    "dsv3-l1-r1024-midx": (32, 4096, 7168, 1024, "m_indices"),
    "dsv3-l1-r4096-midx": (32, 4096, 7168, 4096, "m_indices"),
    "gptoss-l1-r4096-midx": (32, 5760, 2880, 4096, "m_indices"),
    "qwen3-l2-r4096-midx": (128, 2048, 768, 4096, "m_indices"),
    "gptoss-l1-r1024-offs-ragged": (32, 5760, 2880, 1024, "offs", True),
    "qwen3-l2-r128-offs-ragged": (128, 2048, 768, 128, "offs", True),
    "qwen3-l2-r256-masked-ragged": (128, 2048, 768, 256, "masked", True),
    "qwen3-l2-r1024-offs-ragged": (128, 2048, 768, 1024, "offs", True),
    # the convert-ahead kernel's crossover with the table kernels
    "dsv3-l1-r512-offs-ragged": (32, 4096, 7168, 512, "offs", True),
    "gptoss-l1-r512-offs-ragged": (32, 5760, 2880, 512, "offs", True),
    "qwen3-l2-r512-offs-ragged": (128, 2048, 768, 512, "offs", True),
}


def candidates(args: argparse.Namespace, named: list[str]) -> list:
    desc = desc_of(args)
    legal = legal_configs(desc)
    # The decode kernel's token blocks on its weights' layout (prepared: up to 160).
    module = sm90_fp8_fp4_table if args.weights == "prepared" else sm90_fp8_fp4_decode
    choices = module.TOKEN_CHOICES

    def tile_for(rows: int) -> int:
        return next(t for t in choices if t >= min(rows, choices[-1]))

    lo, hi = tile_for(args.rows), tile_for(max(group_rows(args)))
    # One math warpgroup only where few groups hold rows (its small tiles fill the SMs).
    min_wg = 1 if getattr(args, "active", 0) else 2
    decode = [
        c
        for c in legal.values()
        if c.layout.swap_ab
        and not c.layout.split_tail  # split ones where named
        and lo <= c.layout.block_m <= hi
        and c.launch.num_math_warpgroups >= min_wg
    ]
    decode += [legal[name] for name in named if name in legal]
    decode = list(dict.fromkeys(decode))
    pick = select_config(desc, SM90)
    return [pick, *(c for c in decode if c != pick)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", default=",".join(PROBLEMS))
    parser.add_argument("--weights", choices=("raw", "prepared"), default="prepared")
    parser.add_argument("--configs", default="", help="more configs to time, by short name")
    parser.add_argument("--json", type=Path)
    opts = parser.parse_args(argv)
    names = opts.problems.split(",")
    unknown = [n for n in names if n not in PROBLEMS]
    if unknown:
        parser.error(f"unknown problems {unknown}; known: {', '.join(PROBLEMS)}")

    named = list(dict.fromkeys(c for c in opts.configs.split(",") if c))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bench_common import Timer, precompile, spec_for

    plans = []
    for name in names:
        g, n, k, r, layout, *rest = PROBLEMS[name]
        ragged, active = (*rest, False, 0)[:2]
        args = argparse.Namespace(
            groups=g, n=n, k=k, rows=r, layout=layout, weights=opts.weights, ragged=ragged,
            active=active,
        )  # fmt: skip
        plans.append((name, args, candidates(args, named)))
    timed = {c.short_name() for _, _, configs in plans for c in configs}
    if any(c not in timed for c in named):
        parser.error(f"--configs: {[c for c in named if c not in timed]} legal in no problem")
    precompile([spec_for(desc_of(a), c) for _, a, cs in plans for c in cs])

    timer, results = Timer(), []
    for name, args, configs in plans:
        problem = Problem(args)
        row = {"problem": name, "pick": configs[0].short_name(), "us": {}, "errors": {}}
        for config in configs:
            label = config.short_name()
            print(f"{name}: {label} ...", end=" ", flush=True)  # a hang names its config
            try:
                diff = problem.check(config)
                if not diff < 1e-4:
                    row["errors"][label] = f"calc_diff {diff:.2e}"
                    continue
                row["us"][label] = timer(lambda c=config, p=problem: p.call(c))
            except Exception as exc:  # noqa: BLE001 - reported per config
                row["errors"][label] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"{row['us'].get(label, float('nan')):.1f} us", flush=True)
        decode = {c: t for c, t in row["us"].items() if c.endswith("t") and c != row["pick"]}
        pick_us = row["us"].get(row["pick"])
        if decode and pick_us:
            best = min(decode, key=decode.get)
            row["best_decode"], row["speedup"] = best, pick_us / decode[best]
        results.append(row)
        del problem
        for c, e in row["errors"].items():
            print(f"  !! {c}: {e}", flush=True)

    print(f"\n{'problem':22} {'pick us':>9} {'best decode':>22} {'us':>9} {'pick/best':>9}")
    for row in results:
        pick_us = row["us"].get(row["pick"], float("nan"))
        best = row.get("best_decode", "-")
        best_us = row["us"].get(best, float("nan"))
        speed = row.get("speedup", float("nan"))
        print(f"{row['problem']:22} {pick_us:9.1f} {best:>22} {best_us:9.1f} {speed:9.3f}")
    if opts.json:
        opts.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
