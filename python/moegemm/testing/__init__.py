"""What the tests and benchmarks share beside the product: the measures (moegemm.measure) and the
fused MoE layer's FP32 reference (moegemm.moe.reference), under their test-facing names."""

from __future__ import annotations

from ..measure import SLEEP_CYCLES_PER_US, bench_us, calc_diff, host_us_per_call, reference_gemm_nt

__all__ = ["SLEEP_CYCLES_PER_US", "bench_us", "calc_diff", "host_us_per_call", "reference_gemm_nt"]
