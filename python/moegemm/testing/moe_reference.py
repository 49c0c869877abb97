"""The fused MoE layer's FP32 references (moegemm.moe.reference), for the tests and benchmarks."""

from __future__ import annotations

from ..moe.reference import (
    expert_forward,
    expert_forward_fp8,
    fp8_round_trip,
    fused_moe_reference,
    fused_moe_reference_fp8,
    route_reference,
    swiglu,
)

__all__ = [
    "expert_forward",
    "expert_forward_fp8",
    "fp8_round_trip",
    "fused_moe_reference",
    "fused_moe_reference_fp8",
    "route_reference",
    "swiglu",
]
