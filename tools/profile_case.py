"""Runs one heuristic-quality case with forced configs, a few launches each, for a profiler.

    python3 tools/profile_case.py decode/13/offs m64n256k64s4w1c1x1e64 m128n256k64s3w2c1x1e64

Each config is checked against FP32 once, then launched --launches times between two
synchronizations, in the order given. Under Nsight Compute, profile the timed launches only:

    ncu --clock-control none -k regex:sm90_bf16_ --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \\
        python3 tools/profile_case.py decode/13/offs CONFIG

(one config per ncu run keeps --launch-skip simple: the check and the warm-up come first; ncu
matches -k against the __global__ function's name, sm90_bf16_*_kernel, not the JIT names).
--list prints the case's legal configs by name; it needs no GPU.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from heuristic_quality import QCase, all_qcases, desc_for, sm90_arch

from moegemm.families import enumerate_configs, is_legal
from moegemm.heuristics import GemmConfig

# Nsight Compute's -k filter: the BF16 kernels' __global__ functions (jit/codegen.py), e.g.
# sm90_bf16_grouped_gemm_kernel; the default --kernel-name-base matches that name alone.
NCU_KERNEL_REGEX = "sm90_bf16_"


def find_case(case_id: str) -> QCase:
    cases = {q.id: q for q in all_qcases()}
    if case_id not in cases:
        raise SystemExit(f"unknown case {case_id!r}; e.g. {', '.join(list(cases)[:4])}, ...")
    return cases[case_id]


def configs_by_name(q: QCase) -> dict[str, GemmConfig]:
    """The case's legal configs (what the heuristics choose among) by short name."""
    desc = desc_for(q)
    arch = sm90_arch()
    return {c.short_name(): c for c in enumerate_configs(desc, arch) if is_legal(c, desc, arch)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", help="a heuristic_quality case id, e.g. decode/13/offs")
    parser.add_argument("configs", nargs="*", help="config short names (default: the pick)")
    parser.add_argument("--launches", type=int, default=3, help="timed launches per config")
    parser.add_argument("--list", action="store_true", help="print the legal configs and exit")
    args = parser.parse_args(argv)

    q = find_case(args.case)
    legal = configs_by_name(q)
    if args.list:
        print(f"{q.label}\n  " + "\n  ".join(sorted(legal)))
        return 0
    unknown = [name for name in args.configs if name not in legal]
    if unknown:
        raise SystemExit(f"not legal for {q.id}: {unknown}; --list shows the legal ones")

    import torch
    from heuristic_quality import TOL, Problem

    if not torch.cuda.is_available():
        raise SystemExit("profile_case: no CUDA device (--list needs none)")

    prob = Problem(q)
    configs = [legal[name] for name in args.configs] or [None]
    for cfg in configs:
        name = cfg.short_name() if cfg else "pick"
        diff = prob.check(cfg)
        if not diff < TOL:
            raise SystemExit(f"{name}: calc_diff {diff:.2e}")
        run = prob.timed(cfg)
        run()  # warm-up: plan cached, weights touched
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.launches):
            run()
        end.record()
        torch.cuda.synchronize()
        us = start.elapsed_time(end) * 1e3 / args.launches
        print(f"{q.id} {name}: {us:.1f} us per launch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
