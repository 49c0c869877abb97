"""The fused MoE layer: fused_moe, fused_moe_masked, MoEWorkspace and
prepare_moe_weights. Above the API (it composes moegemm's kernels), below the warmup."""

from __future__ import annotations

from . import ops as ops  # registers moegemm::fused_moe and moegemm::fused_moe_mxfp4
from .layer import fused_moe, fused_moe_masked
from .weights import PreparedW13, prepare_moe_weights
from .workspace import MoEWorkspace

__all__ = ["MoEWorkspace", "PreparedW13", "fused_moe", "fused_moe_masked", "prepare_moe_weights"]
