"""fused_moe as the `torch.library` custom ops moegemm::fused_moe (BF16 experts) and
moegemm::fused_moe_mxfp4 (MXFP4 experts), for torch.compile (as the GEMMs' ops in api/ops.py):
while Dynamo traces, fused_moe calls one with the prepared weights and the workspace as tensors;
it mutates `out` and the workspace's buffers and returns nothing. The fake implementations run
the structural checks; the real ones are the eager path."""

# No `from __future__ import annotations`: torch.library reads the annotations as types.

from torch import Tensor

from ..api.mxfp4_weights import SM100_ARCH, Mxfp4Weights
from ..launch.ops import custom_op
from .layer import check_fused_moe, fused_moe
from .weights import PreparedW13
from .workspace import MoEWorkspace

_MUTATED = ("out", "x_sorted", "h", "offs", "row_slot", "row_weight", "slot_row")


def _check_bf16(args: dict) -> None:
    prepared = PreparedW13(args["w13"], args["w13_bias"], args["activation"])
    check_fused_moe(args["x"], prepared, args["w2"], args["topk_weights"], args["topk_ids"],
                    args["w2_bias"], args["out"])  # fmt: skip


@custom_op("fused_moe", _MUTATED, _check_bf16)
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


_MUTATED_MXFP4 = ("out", "x_sorted", "sfa_x", "h", "h8", "sfa_h", "y", "offs", "row_slot",
                  "row_weight", "slot_row")  # fmt: skip


def _mxfp4_operands(x, w13, w13_scales, w13_bias, w2, w2_scales, activation, w13_prepared,
                    w2_prepared, arch):  # fmt: skip
    """The layer's operands again; on SM100 (arch "sm_100f") in its preparation, H from x."""
    sm100 = arch == SM100_ARCH
    prepared = PreparedW13(w13, w13_bias, activation, w13_scales, w13_prepared, arch,
                           x.shape[-1] if sm100 else 0)  # fmt: skip
    if w2_prepared:
        packed_w2 = Mxfp4Weights(w2, w2_scales, True, arch=arch)
    else:
        packed_w2 = (w2, w2_scales)
    return prepared, packed_w2


def _check_mxfp4(args: dict) -> None:
    names = ("x", "w13", "w13_scales", "w13_bias", "w2", "w2_scales", "activation",
             "w13_prepared", "w2_prepared", "arch")  # fmt: skip
    prepared, packed_w2 = _mxfp4_operands(*(args[n] for n in names))
    check_fused_moe(args["x"], prepared, packed_w2, args["topk_weights"], args["topk_ids"],
                    args["w2_bias"], args["out"])  # fmt: skip


@custom_op("fused_moe_mxfp4", _MUTATED_MXFP4, _check_mxfp4)
def fused_moe_mxfp4_op(
    x: Tensor,
    w13: Tensor,
    w13_scales: Tensor,
    w13_bias: Tensor | None,
    w2: Tensor,
    w2_scales: Tensor,
    w2_bias: Tensor | None,
    topk_weights: Tensor,
    topk_ids: Tensor,
    out: Tensor,
    x_sorted: Tensor,
    sfa_x: Tensor,
    h: Tensor,
    h8: Tensor,
    sfa_h: Tensor,
    y: Tensor,
    offs: Tensor,
    row_slot: Tensor,
    row_weight: Tensor,
    slot_row: Tensor,
    activation: str,
    w13_prepared: bool,
    w2_prepared: bool,
    arch: str = "sm_90a",
) -> None:
    ws = MoEWorkspace.of_buffers(x_sorted, h, offs, row_slot, row_weight, slot_row,
                                 topk_ids.shape[1], mxfp4=(sfa_x, h8, sfa_h, y))  # fmt: skip
    prepared, packed_w2 = _mxfp4_operands(x, w13, w13_scales, w13_bias, w2, w2_scales,
                                          activation, w13_prepared, w2_prepared, arch)  # fmt: skip
    fused_moe(x, prepared, packed_w2, topk_weights, topk_ids, w2_bias=w2_bias, out=out,
              workspace=ws)  # fmt: skip
