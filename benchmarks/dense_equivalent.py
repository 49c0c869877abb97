"""What a grouped prefill shape costs over the same FLOPs without groups.

    python benchmarks/dense_equivalent.py [--rounds 3]

For each case (a grouped shape of the anchors: groups, N, K, rows per group), times in
interleaved rounds, same run:
  cublas_dense   torch.mm of all the rows against one N x K weight: the dense GEMM of equal
                 FLOPs. Its one weight (33 MB for gpt-oss, 59 MB for dsv3) is read from L2
                 for the most part, where the grouped kernels stream G of them: an optimistic
                 ceiling for the shape's K
  ours_dense     bf16_gemm_nt on the same operands
  ours_balanced  the grouped GEMM (offs) with the rows spread evenly over the groups
  ours_anchor    the grouped GEMM (offs) with the anchor's ragged rows
  torch_anchor   torch._grouped_mm on the anchor's rows
and prints TFLOP/s (real rows only) as the median over rounds. Each of ours is checked against
FP32 first (calc_diff < 1e-5 on the dense output and on every 16th group); torch's output is
not checked.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
from bench_bf16 import TOL, Timer, nan_tensor, randn_bf16
from bf16_cases import anchor_rows, balanced_rows, group_layouts

import moegemm
from moegemm.testing import calc_diff

# (name, groups, N, K, expected rows per group): the anchors' gpt-oss L1 (the 640 TFLOP/s
# target) and dsv3 L1 prefill (K = 7168) as the control.
CASES = [
    ("gpt-oss L1", 128, 5760, 2880, 256),
    ("dsv3 L1 prefill", 32, 4096, 7168, 1024),
]


def case_rows(groups: int, expected_m: int) -> tuple[list[int], list[int]]:
    """(anchor rows, the same total spread evenly over the groups)."""
    ragged = anchor_rows(expected_m, groups)
    return ragged, balanced_rows(sum(ragged), groups)


def check_grouped(a, b, d, rows: list[int], label: str) -> None:
    start = 0
    for grp, r in enumerate(rows):
        if r and grp % 16 == 0:
            ref = a[start : start + r].float() @ b[grp].float().t()
            diff = calc_diff(d[start : start + r], ref)
            if not diff < TOL:
                raise SystemExit(f"{label}: group {grp} calc_diff {diff:.2e}")
        start += r


def run_case(name: str, groups: int, n: int, k: int, expected_m: int, rounds: int) -> dict:
    ragged, balanced = case_rows(groups, expected_m)
    total = sum(ragged)
    a = randn_bf16(total, k)
    b = randn_bf16(groups, n, k, scale=0.02)
    w = b[0]
    d = nan_tensor(total, n)
    offs = {
        "anchor": group_layouts(ragged, device="cuda")["offs"],
        "balanced": group_layouts(balanced, device="cuda")["offs"],
    }
    moegemm.bf16_gemm_nt(a, w, d)
    diff = calc_diff(d, a.float() @ w.float().t())
    if not diff < TOL:
        raise SystemExit(f"{name} ours_dense: calc_diff {diff:.2e}")
    for label, rows in (("anchor", ragged), ("balanced", balanced)):
        d.fill_(float("nan"))
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs[label])
        torch.cuda.synchronize()
        check_grouped(a, b, d, rows, f"{name} ours_{label}")

    fns = {
        "cublas_dense": lambda: torch.mm(a, w.t(), out=d),
        "ours_dense": lambda: moegemm.bf16_gemm_nt(a, w, d),
        "ours_balanced": lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(
            a, b, d, offs=offs["balanced"]
        ),
        "ours_anchor": lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(
            a, b, d, offs=offs["anchor"]
        ),
        "torch_anchor": lambda: torch._grouped_mm(a, b.transpose(-2, -1), offs=offs["anchor"]),
    }
    timer = Timer()
    times: dict[str, list[float]] = {label: [] for label in fns}
    for _ in range(rounds):
        for label, fn in fns.items():
            times[label].append(timer(fn))
    flops = 2.0 * total * n * k
    return {label: flops / (statistics.median(us) * 1e-6) / 1e12 for label, us in times.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    labels = ["cublas_dense", "ours_dense", "ours_balanced", "ours_anchor", "torch_anchor"]
    print(f"{'case':18s} " + " ".join(f"{x:>14s}" for x in labels) + "   (TFLOP/s)")
    for name, groups, n, k, expected_m in CASES:
        tflops = run_case(name, groups, n, k, expected_m, args.rounds)
        print(f"{name:18s} " + " ".join(f"{tflops[x]:14.1f}" for x in labels), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
