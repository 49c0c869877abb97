"""Dense bf16_gemm_nt against cuBLAS (torch.mm) in the same run, plus JIT and host-path costs.

Prints one line per case and geometric means; --json PATH writes the same, with the GPU, torch,
commit and date of the run, to PATH (nothing is written anywhere else).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable

import torch
from bench_common import run_info
from bf16_cases import DENSE_CASES

import moegemm
from moegemm.testing import bench_us, calc_diff, host_us_per_call, reference_gemm_nt

FIRST_CALL_SCRIPT = r"""
import time, torch
torch.cuda.init()
a = torch.randn({m}, {k}, device="cuda").bfloat16()
b = torch.randn({n}, {k}, device="cuda").bfloat16()
d = torch.empty({m}, {n}, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
import moegemm
t0 = time.perf_counter()
moegemm.bf16_gemm_nt(a, b, d)
torch.cuda.synchronize()
print(time.perf_counter() - t0)
"""


def rotating_sets(m: int, n: int, k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Enough operand sets that together they exceed L2, so timing reads from HBM."""
    bytes_per_set = (m * k + n * k) * 2
    count = max(1, min(8, math.ceil(3 * 60 * 2**20 / bytes_per_set)))
    return [
        (
            torch.randn(m, k, device="cuda").bfloat16(),
            (torch.randn(n, k, device="cuda") * 0.02).bfloat16(),
        )
        for _ in range(count)
    ]


def time_rotating(
    fn: Callable[[torch.Tensor, torch.Tensor], object],
    sets: list[tuple[torch.Tensor, torch.Tensor]],
) -> float:
    """Median µs per call of fn over the operand sets in turn."""
    idx = [0]

    def step() -> None:
        a, b = sets[idx[0] % len(sets)]
        idx[0] += 1
        fn(a, b)

    return bench_us(step, warmup=10, iters=60)


def bench_dense(name: str, m: int, n: int, k: int) -> dict:
    sets = rotating_sets(m, n, k)
    d = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    moegemm.bf16_gemm_nt(*sets[0], d)
    diff = calc_diff(d, reference_gemm_nt(*sets[0]))
    ours = time_rotating(lambda a, b: moegemm.bf16_gemm_nt(a, b, d), sets)
    cublas = time_rotating(lambda a, b: torch.mm(a, b.t(), out=d), sets)
    flops = 2 * m * n * k
    return {
        "case": name,
        "m": m,
        "n": n,
        "k": k,
        "calc_diff": diff,
        "moegemm_us": ours,
        "cublas_us": cublas,
        "moegemm_tflops": flops / ours / 1e6,
        "cublas_tflops": flops / cublas / 1e6,
        "speed_vs_cublas": cublas / ours,
    }


def bench_host_overhead(calls: int = 2000) -> dict:
    a = torch.randn(64, 128, device="cuda").bfloat16()
    b = torch.randn(128, 128, device="cuda").bfloat16()
    d = torch.empty(64, 128, device="cuda", dtype=torch.bfloat16)
    bt = b.t()

    ours = host_us_per_call(lambda: moegemm.bf16_gemm_nt(a, b, d), calls)
    mm = host_us_per_call(lambda: torch.mm(a, bt, out=d), calls)
    return {"calls": calls, "moegemm_us": ours, "torch_mm_us": mm, "ratio": ours / mm}


def first_call_seconds(cache_dir: str, m: int, n: int, k: int) -> float:
    env = dict(os.environ, MOEGEMM_CACHE_DIR=cache_dir)
    script = FIRST_CALL_SCRIPT.format(m=m, n=n, k=k)
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def bench_jit() -> dict:
    with tempfile.TemporaryDirectory() as cache_dir:
        cold = first_call_seconds(cache_dir, 1000, 2048, 1024)
        warm = first_call_seconds(cache_dir, 1000, 2048, 1024)
    return {"cold_first_call_s": cold, "warm_first_call_ms": warm * 1e3}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", metavar="PATH", help="write the results to this JSON file")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_bf16_gemm: no CUDA device", file=sys.stderr)
        return 1

    dense = [bench_dense(*case) for case in DENSE_CASES]
    host = bench_host_overhead()
    jit = bench_jit()
    results = {**run_info(), "dense": dense, "host": host, "jit": jit}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)

    print(
        f"{'case':32s} {'moegemm us':>10s} {'cuBLAS us':>10s} {'TFLOP/s':>8s} "
        f"{'cuBLAS TF':>9s} {'x cuBLAS':>8s} {'diff':>8s}"
    )
    for r in dense:
        print(
            f"{r['case']:32s} {r['moegemm_us']:10.1f} {r['cublas_us']:10.1f} "
            f"{r['moegemm_tflops']:8.1f} {r['cublas_tflops']:9.1f} "
            f"{r['speed_vs_cublas']:8.3f} {r['calc_diff']:8.1e}"
        )
    geo = math.exp(sum(math.log(r["speed_vs_cublas"]) for r in dense) / len(dense))
    print(f"{'geometric mean x cuBLAS':32s} {geo:51.3f}")
    print(
        f"host path: {host['moegemm_us']:.2f} us/call vs torch.mm {host['torch_mm_us']:.2f} "
        f"us/call over {host['calls']} tiny calls: {host['ratio']:.2f} x torch.mm"
    )
    print(
        f"JIT: cold first call {jit['cold_first_call_s']:.2f} s, warm-cache first call in a "
        f"new process {jit['warm_first_call_ms']:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
