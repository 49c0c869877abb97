"""fused_moe as the `torch.library` custom op moegemm::fused_moe, for torch.compile (as the
GEMMs' ops in api/ops.py): while Dynamo traces, fused_moe calls it with the prepared weights and
the workspace as tensors; it mutates `out` and the workspace's buffers and returns nothing. The
fake implementation runs the structural checks; the real one is the eager path."""

# No `from __future__ import annotations`: torch.library reads the annotations as types.

import torch
from torch import Tensor

from ..api.ops import NAMESPACE
from .layer import check_fused_moe, fused_moe
from .weights import PreparedW13
from .workspace import MoEWorkspace

_MUTATED = ("out", "x_sorted", "h", "offs", "row_slot", "row_weight", "slot_row")


@torch.library.custom_op(f"{NAMESPACE}::fused_moe", mutates_args=_MUTATED)
def fused_moe_op(
    x: Tensor,
    w13: Tensor,
    w13_bias: Tensor | None,
    w2: Tensor,
    w2_bias: Tensor | None,
    topk_weights: Tensor,
    topk_ids: Tensor,
    out: Tensor,
    x_sorted: Tensor,
    h: Tensor,
    offs: Tensor,
    row_slot: Tensor,
    row_weight: Tensor,
    slot_row: Tensor,
    activation: str,
) -> None:
    ws = MoEWorkspace.of_buffers(x_sorted, h, offs, row_slot, row_weight, slot_row,
                                 topk_ids.shape[1])  # fmt: skip
    prepared = PreparedW13(w13, w13_bias, activation)
    fused_moe(x, prepared, w2, topk_weights, topk_ids, w2_bias=w2_bias, out=out, workspace=ws)


@fused_moe_op.register_fake
def _(
    x: Tensor,
    w13: Tensor,
    w13_bias: Tensor | None,
    w2: Tensor,
    w2_bias: Tensor | None,
    topk_weights: Tensor,
    topk_ids: Tensor,
    out: Tensor,
    x_sorted: Tensor,
    h: Tensor,
    offs: Tensor,
    row_slot: Tensor,
    row_weight: Tensor,
    slot_row: Tensor,
    activation: str,
) -> None:
    prepared = PreparedW13(w13, w13_bias, activation)
    check_fused_moe(x, prepared, w2, topk_weights, topk_ids, w2_bias, out)
