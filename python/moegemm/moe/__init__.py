"""The fused MoE layer: fused_moe, fused_moe_masked, MoEWorkspace and
prepare_moe_weights. Above the API (it composes moegemm's kernels), below the warmup."""

from __future__ import annotations

from . import ops as ops  # registers the layer's four custom ops (moe/ops.py)
from .layer import fused_moe, fused_moe_masked
from .weights import PreparedW13, prepare_moe_weights
from .workspace import MoEWorkspace

__all__ = ["MoEWorkspace", "PreparedW13", "fused_moe", "fused_moe_masked", "prepare_moe_weights"]
