"""The check-and-benchmark the warmup CLI runs when a GPU is present: each warmed shape at a
decode and a prefill token count, checked against FP32 and timed against cuBLAS."""

from __future__ import annotations

import math
from typing import Any

import torch

from . import bench_us, calc_diff, reference_gemm_nt

TOLERANCE = 1e-5


def run_quick_check(shapes: list[dict[str, Any]], tokens: list[int]) -> bool:
    """Returns True when every checked kernel matches the reference."""
    import moegemm

    token_counts = sorted({min(tokens), max(tokens)})
    print(f"{'shape':28s} {'M':>6s} {'diff':>8s} {'us':>9s} {'TFLOP/s':>8s} {'x cuBLAS':>8s}")
    ok, ratios = True, []
    seen: set[tuple[int, int, int]] = set()
    for shape in shapes:
        n, k = int(shape["n"]), int(shape["k"])
        for m in token_counts:
            if (m, n, k) in seen:
                continue
            seen.add((m, n, k))
            a = torch.randn(m, k, device="cuda").bfloat16()
            b = (torch.randn(n, k, device="cuda") * 0.02).bfloat16()
            d = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            moegemm.bf16_gemm_nt(a, b, d)
            diff = calc_diff(d, reference_gemm_nt(a, b))
            ok &= diff < TOLERANCE
            ours = bench_us(lambda a=a, b=b, d=d: moegemm.bf16_gemm_nt(a, b, d))
            cublas = bench_us(lambda a=a, b=b, d=d: torch.mm(a, b.t(), out=d))
            ratios.append(cublas / ours)
            label = f"{shape.get('op', '')} n={n} k={k}"
            print(
                f"{label:28s} {m:6d} {diff:8.1e} {ours:9.1f} "
                f"{2 * m * n * k / ours / 1e6:8.1f} {cublas / ours:8.3f}"
            )
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"check: {'all passed' if ok else 'FAILED'}; geometric mean {geo:.3f} x cuBLAS")
    return ok
