"""Where a kernel's time goes, measured by leaving stages out (METHOD.md's "time variants that
leave one stage out"): the full kernel, without the wgmma, without the epilogue stores, without
both (TMA streaming and barriers alone), for the k-grouped kernel also without the zeroing of
group tails, and the same tile with the register-store epilogue instead of TMA stores. Same
config (the heuristics' pick), same inputs, same run; the variants' outputs are wrong by design.

    python benchmarks/stage_breakdown.py [--cases REGEX]
"""

from __future__ import annotations

import argparse
import math
import random
import re
from collections.abc import Callable

import torch

from moegemm.api.device import arch_for_device
from moegemm.api.plans import build_plan
from moegemm.heuristics import GemmConfig, GemmDesc, select_config
from moegemm.heuristics.sm90 import enumerate_configs, store_cols
from moegemm.testing import bench_us

# m-grouped (offs layout): (name, groups, rows per group, N, K, spread); spread > 0 gives each
# group int(rows * U(1 - spread, 1 + spread)) rows (random.Random(0), the anchors' rule).
M_GROUPED_CASES = [
    ("dsv3 L1 prefill", 32, 1024, 4096, 7168, 0.0),
    ("dsv3 L2 prefill", 32, 1024, 7168, 2048, 0.0),
    ("qwen3-30b L2 prefill", 128, 1024, 2048, 768, 0.0),
    ("gpt-oss L1 prefill", 128, 256, 5760, 2880, 0.0),
    ("gpt-oss L1 ragged 0.3", 128, 256, 5760, 2880, 0.3),
    ("dsv3 L1 decode", 32, 8, 4096, 7168, 0.0),
    ("qwen3-30b L2 decode", 128, 4, 2048, 768, 0.0),
]
# k-grouped (weight gradients): (name, groups, rows per group, M, N); rows not a multiple of 64
# so every group ends in a partial k-block (the tail-zeroing path).
K_GROUPED_CASES = [
    ("dsv3 wgrad L1", 8, 4100, 4096, 7168),
    ("dsv3 wgrad L2", 16, 2044, 7168, 2048),
    ("qwen3-30b wgrad L2", 16, 4100, 2048, 768),
]
COMMON_VARIANTS = {0: "full", 2: "no epilogue", 1: "no wgmma", 3: "loads only"}
K_GROUPED_VARIANTS = {**COMMON_VARIANTS, 4: "no tail zeroing", 8: "per-WG zeroing"}
TWIN = "full, reg stores"
# The register-store twin has no staging buffer, so it holds more stages: its loads-only build
# tells whether the loads are bound by the bytes in flight (more stages: faster) or not.
TWIN_LOADS = "loads, reg-st twin"


def register_store_twin(desc: GemmDesc, pick: GemmConfig, device: int) -> GemmConfig | None:
    if not store_cols(pick):
        return None
    for config in enumerate_configs(desc, arch_for_device(device)):
        if config.layout == pick.layout and not store_cols(config):
            return config
    return None


def time_runs(
    desc: GemmDesc, variants: dict[int, str], launch_args: Callable[[], tuple]
) -> dict[str, float | str]:
    device = torch.cuda.current_device()
    pick = select_config(desc, arch_for_device(device))
    runs = [(variant, label, pick) for variant, label in variants.items()]
    if pick.layout.swap_ab:  # the swapped decode kernel has no stage-breakdown builds
        runs = runs[:1]
    twin = register_store_twin(desc, pick, device)
    if twin is not None:
        runs.append((0, TWIN, twin))
        if desc.kind != "k_grouped":
            runs.append((3, TWIN_LOADS, twin))
    args = launch_args()
    times: dict[str, float | str] = {"config": pick.short_name()}
    for variant, label, config in runs:
        plan = build_plan(device, desc, config, stage_variant=variant)
        times[label] = bench_us(lambda plan=plan: plan.launch(*args), iters=30)
    return times


def group_rows(groups: int, per_group: int, spread: float) -> list[int]:
    if spread == 0:
        return [per_group] * groups
    rng = random.Random(0)
    return [int(per_group * rng.uniform(1 - spread, 1 + spread)) for _ in range(groups)]


def m_grouped_desc(sizes: list[int], n: int, k: int) -> GemmDesc:
    rows, groups = sum(sizes), len(sizes)
    return GemmDesc("m_grouped_offsets", rows, n, k, groups, expected_m=math.ceil(rows / groups))


def precompile_picks(work: list[tuple[GemmDesc, dict[int, str]]]) -> None:
    """Builds every variant (and register-store twin) the cases will time, in parallel."""
    from bench_bf16 import precompile, spec_for

    device = torch.cuda.current_device()
    specs = []
    for desc, variants in work:
        pick = select_config(desc, arch_for_device(device))
        if pick.layout.swap_ab:
            continue
        twin = register_store_twin(desc, pick, device)
        builds = [(pick, v) for v in variants]
        if twin is not None:
            builds += [(twin, 0)] + ([(twin, 3)] if desc.kind != "k_grouped" else [])
        specs += [spec_for(desc, config, variant) for config, variant in builds]
    precompile(specs)


def m_grouped_times(
    groups: int, per_group: int, n: int, k: int, spread: float = 0.0
) -> dict[str, float | str]:
    sizes = group_rows(groups, per_group, spread)
    rows = sum(sizes)
    a = torch.randn(rows, k, device="cuda").bfloat16()
    b = (torch.randn(groups, n, k, device="cuda") * 0.02).bfloat16()
    d = torch.empty(rows, n, device="cuda", dtype=torch.bfloat16)
    offs = torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    desc = m_grouped_desc(sizes, n, k)
    stream = torch.cuda.current_stream().cuda_stream
    return time_runs(
        desc,
        COMMON_VARIANTS,
        lambda: (a.data_ptr(), b.data_ptr(), d.data_ptr(), 0, offs.data_ptr(), rows, rows, n, k,
                 groups, k, k, n * k, n, 0, stream),
    )  # fmt: skip


def k_grouped_times(groups: int, per_group: int, m: int, n: int) -> dict[str, float | str]:
    tokens = groups * per_group
    a = torch.randn(tokens, m, device="cuda").bfloat16()
    b = torch.randn(tokens, n, device="cuda").bfloat16()
    d = torch.empty(groups, m, n, device="cuda")
    offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * per_group
    desc = GemmDesc("k_grouped", m, n, per_group, groups, d_dtype="fp32")
    stream = torch.cuda.current_stream().cuda_stream

    def launch_args() -> tuple:
        return (a.data_ptr(), b.data_ptr(), d.data_ptr(), 0, offs.data_ptr(), m, n, tokens,
                groups, m, n, stream)  # fmt: skip

    times = time_runs(desc, K_GROUPED_VARIANTS, launch_args)
    # The per-warpgroup zeroing build is a candidate fix, not a cut-down kernel: same bits.
    device = torch.cuda.current_device()
    outputs = []
    for variant in (0, 8):
        d.fill_(float("nan"))
        build_plan(device, desc, None, stage_variant=variant).launch(*launch_args())
        outputs.append(d.clone())
    times["per-WG zeroing"] = f"{times['per-WG zeroing']:.1f} us" + (
        "" if torch.equal(*outputs) else " (WRONG BITS)"
    )
    return times


def print_table(title: str, labels: list[str], rows: list[tuple[str, dict, float]]) -> None:
    print(f"\n{title}")
    print(f"{'case':24s} {'config':26s} " + " ".join(f"{v:>16s}" for v in labels))
    for name, t, flops in rows:
        cells = " ".join(
            (f"{t[v]:13.1f} us" if isinstance(t[v], float) else f"{t[v]:>16s}")
            if v in t
            else f"{'-':>16s}"
            for v in labels
        )
        tflops = flops / float(t["full"]) / 1e6
        print(f"{name:24s} {t['config']:26s} {cells}   full {tflops:6.0f} TFLOP/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", help="regex over case names")
    args = parser.parse_args()

    def wanted(name: str) -> bool:
        return not args.cases or re.search(args.cases, name) is not None

    precompile_picks(
        [
            (m_grouped_desc(group_rows(g, r, spread), n, k), COMMON_VARIANTS)
            for name, g, r, n, k, spread in M_GROUPED_CASES
            if wanted(name)
        ]
        + [
            (GemmDesc("k_grouped", m, n, r, g, d_dtype="fp32"), K_GROUPED_VARIANTS)
            for name, g, r, m, n in K_GROUPED_CASES
            if wanted(name)
        ]
    )
    rows = [
        (name, m_grouped_times(g, r, n, k, spread), 2 * sum(group_rows(g, r, spread)) * n * k)
        for name, g, r, n, k, spread in M_GROUPED_CASES
        if wanted(name)
    ]
    print_table("m-grouped (offs)", [*COMMON_VARIANTS.values(), TWIN, TWIN_LOADS], rows)
    rows = [
        (name, k_grouped_times(g, r, m, n), 2 * g * r * m * n)
        for name, g, r, m, n in K_GROUPED_CASES
        if wanted(name)
    ]
    print_table("k-grouped", [*K_GROUPED_VARIANTS.values(), TWIN], rows)


if __name__ == "__main__":
    main()
