"""fused_moe as the `torch.library` custom ops moegemm::fused_moe (BF16 experts) and
moegemm::fused_moe_mxfp4 (MXFP4 experts), fused_moe_masked as moegemm::fused_moe_masked and
moegemm::fused_moe_masked_mxfp4, for torch.compile (as the GEMMs' ops in api/ops.py): while
Dynamo traces, the layer calls one with the prepared weights and the workspace's buffers as
tensors; it mutates `out` and those buffers and returns nothing. The fake implementations run
the structural checks; the real ones are the eager path."""

# No `from __future__ import annotations`: torch.library reads the annotations as types.

import torch
from torch import Tensor

from ..api.mxfp4_weights import SM100_ARCH, Mxfp4Weights
from ..launch import checks
from ..launch.ops import custom_op
from .layer import check_fused_moe, check_fused_moe_masked, fused_moe, fused_moe_masked
from .weights import PreparedW13
from .workspace import FP8_BLOCK, MoEWorkspace

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


def _check_masked_call(args: dict, prepared: PreparedW13, w2: object, buffers: dict) -> None:
    """The fake implementations' checks: fused_moe_masked's own (layer.py), then out and the
    workspace buffers by name, each needing E * max_m rows of its columns (a workspace may
    hold more)."""
    max_m, _ = check_fused_moe_masked(args["x"], args["masked_m"], prepared, w2,
                                      args["expected_m"], args["w2_bias"], args["row_weight"],
                                      symbolic=True)  # fmt: skip
    e, h = prepared.num_experts, prepared.hidden
    out = args["out"]
    checks.require_tensor("out", out, (torch.bfloat16,), 3)
    checks.require_shape("out", out, (e, max_m, h))
    checks.require_contiguous("out", out)
    rows = e * max_m
    for name, (buf, dtype, cols) in buffers.items():
        checks.require_tensor(f"workspace {name}", buf, (dtype,), 2)
        if buf.shape[1] != cols or buf.shape[0] < rows:
            raise ValueError(
                f"workspace {name} holds {buf.shape[0]} x {buf.shape[1]} rows; this call needs "
                f"{rows} x {cols}"
            )
        checks.require_contiguous(f"workspace {name}", buf)


def _masked_workspace(x_sorted: Tensor, h: Tensor, masked_m: Tensor, mxfp4=None) -> MoEWorkspace:
    """A workspace over the op's buffers for fused_moe_masked, which reads h (MXFP4: x_sorted,
    sfa_x, h8, sfa_h too) and the sizes; the routing buffers it never touches are masked_m, so
    that nothing is allocated."""
    return MoEWorkspace.of_buffers(x_sorted, h, masked_m, masked_m, masked_m, masked_m, 1, mxfp4)


def _check_masked_bf16(args: dict) -> None:
    prepared = PreparedW13(args["w13"], args["w13_bias"], args["activation"])
    buffers = {"h": (args["h"], torch.bfloat16, prepared.intermediate)}
    _check_masked_call(args, prepared, args["w2"], buffers)


@custom_op("fused_moe_masked", ("out", "h"), _check_masked_bf16)
def fused_moe_masked_op(
    x: Tensor,
    masked_m: Tensor,
    w13: Tensor,
    w13_bias: Tensor | None,
    w2: Tensor,
    w2_bias: Tensor | None,
    out: Tensor,
    h: Tensor,
    expected_m: int,
    row_weight: Tensor | None,
    activation: str,
) -> None:
    # The BF16 masked path reads no x_sorted: x's rows stand in for its shape and device.
    ws = _masked_workspace(x.view(-1, x.shape[-1]), h, masked_m)
    prepared = PreparedW13(w13, w13_bias, activation)
    fused_moe_masked(x, masked_m, prepared, w2, expected_m, w2_bias=w2_bias, out=out,
                     workspace=ws, row_weight=row_weight)  # fmt: skip


_MUTATED_MASKED_MXFP4 = ("out", "x8", "sfa_x", "h", "h8", "sfa_h")


def _check_masked_mxfp4(args: dict) -> None:
    names = ("x", "w13", "w13_scales", "w13_bias", "w2", "w2_scales", "activation",
             "w13_prepared", "w2_prepared", "arch")  # fmt: skip
    prepared, packed_w2 = _mxfp4_operands(*(args[n] for n in names))
    i, h = prepared.intermediate, prepared.hidden
    fp8, fp32 = torch.float8_e4m3fn, torch.float32
    buffers = {
        "x_sorted": (args["x8"], fp8, h),
        "sfa_x": (args["sfa_x"], fp32, -(-h // FP8_BLOCK)),
        "h": (args["h"], torch.bfloat16, i),
        "h8": (args["h8"], fp8, i),
        "sfa_h": (args["sfa_h"], fp32, -(-i // FP8_BLOCK)),
    }
    _check_masked_call(args, prepared, packed_w2, buffers)


@custom_op("fused_moe_masked_mxfp4", _MUTATED_MASKED_MXFP4, _check_masked_mxfp4)
def fused_moe_masked_mxfp4_op(
    x: Tensor,
    masked_m: Tensor,
    w13: Tensor,
    w13_scales: Tensor,
    w13_bias: Tensor | None,
    w2: Tensor,
    w2_scales: Tensor,
    w2_bias: Tensor | None,
    out: Tensor,
    x8: Tensor,
    sfa_x: Tensor,
    h: Tensor,
    h8: Tensor,
    sfa_h: Tensor,
    expected_m: int,
    row_weight: Tensor | None,
    activation: str,
    w13_prepared: bool,
    w2_prepared: bool,
    arch: str = "sm_90a",
) -> None:
    # The masked path has no y of its own (it writes out): out's rows stand in for it.
    ws = _masked_workspace(x8, h, masked_m, (sfa_x, h8, sfa_h, out.view(-1, out.shape[-1])))
    prepared, packed_w2 = _mxfp4_operands(x, w13, w13_scales, w13_bias, w2, w2_scales,
                                          activation, w13_prepared, w2_prepared, arch)  # fmt: skip
    fused_moe_masked(x, masked_m, prepared, packed_w2, expected_m, w2_bias=w2_bias, out=out,
                     workspace=ws, row_weight=row_weight)  # fmt: skip
