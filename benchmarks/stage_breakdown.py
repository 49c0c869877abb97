"""Where an m-grouped BF16 kernel's time goes, measured by leaving stages out (METHOD.md's
"time variants that leave one stage out"): the full kernel, without the wgmma, without the
epilogue stores, and without both (TMA streaming and barriers alone). Same config (the
heuristics' pick), same inputs, same run; the variants' outputs are wrong by design.

    python benchmarks/stage_breakdown.py [--cases REGEX]
"""

from __future__ import annotations

import argparse
import math
import re

import torch

from moegemm.api.device import arch_for_device
from moegemm.api.plans import build_plan
from moegemm.heuristics import GemmDesc, select_config
from moegemm.heuristics.sm90 import enumerate_configs, store_cols
from moegemm.testing import bench_us

# (name, groups, rows per group, N, K): prefill and decode shapes of the suites.
CASES = [
    ("dsv3 L1 prefill", 32, 1024, 4096, 7168),
    ("dsv3 L2 prefill", 32, 1024, 7168, 2048),
    ("qwen3-30b L2 prefill", 128, 1024, 2048, 768),
    ("gpt-oss L1 prefill", 128, 256, 5760, 2880),
    ("dsv3 L1 decode", 32, 8, 4096, 7168),
    ("qwen3-30b L2 decode", 128, 4, 2048, 768),
]
VARIANTS = {0: "full", 2: "no epilogue", 1: "no wgmma", 3: "loads only"}


def time_variants(groups: int, per_group: int, n: int, k: int) -> dict[str, float]:
    rows = groups * per_group
    a = torch.randn(rows, k, device="cuda").bfloat16()
    b = (torch.randn(groups, n, k, device="cuda") * 0.02).bfloat16()
    d = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
    offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * per_group
    desc = GemmDesc("m_grouped_offsets", rows, n, k, groups, expected_m=math.ceil(rows / groups))
    stream = torch.cuda.current_stream().cuda_stream
    times = {}
    device = torch.cuda.current_device()
    pick = select_config(desc, arch_for_device(device))
    runs = [(variant, label, pick) for variant, label in VARIANTS.items()]
    if store_cols(pick):  # the same tile with register stores, for the epilogue's share
        twin = next(
            c
            for c in enumerate_configs(desc, arch_for_device(device))
            if c.layout == pick.layout and not store_cols(c)
        )
        runs.append((0, "full, reg stores", twin))
    for variant, label, config in runs:
        plan = build_plan(device, desc, config, stage_variant=variant)
        args = (
            a.data_ptr(),
            b.data_ptr(),
            d.data_ptr(),
            0,
            offs.data_ptr(),
            rows,
            rows,
            n,
            k,
            groups,
            k,
            k,
            n * k,
            n,
            0,
            stream,
        )
        times[label] = bench_us(lambda plan=plan, args=args: plan.launch(*args), iters=30)
    times["config"] = pick.short_name()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", help="regex over case names")
    args = parser.parse_args()
    labels = [*VARIANTS.values(), "full, reg stores"]
    print(f"{'case':24s} {'config':24s} " + " ".join(f"{v:>16s}" for v in labels))
    for name, groups, per_group, n, k in CASES:
        if args.cases and not re.search(args.cases, name):
            continue
        t = time_variants(groups, per_group, n, k)
        flops = 2 * groups * per_group * n * k
        cells = " ".join(f"{t[v]:13.1f} us" if v in t else f"{'-':>16s}" for v in labels)
        print(f"{name:24s} {t['config']:24s} {cells}   full {flops / t['full'] / 1e6:6.0f} TFLOP/s")


if __name__ == "__main__":
    main()
