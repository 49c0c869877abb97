"""The expert GEMMs of EPMoE between dispatch and combine, on the masked layout.

BF16 experts: moegemm.fused_moe_masked with the received rows' routing weights as GEMM2's row
scale (row_weight), so each returned row is weighted and rounded to BF16 once, as fused_moe's
GEMM2 does: the combine's sum then equals fused_moe's when the GEMM rows are equal.
MXFP4 experts: the rows arrive already in FP8 with per-128 scales (quantized once at the source,
per_token_cast_to_fp8's bits, as fused_moe's gather), so fused_moe_masked's own quantization of
x is skipped: the same GEMM plans (moe/mxfp4.py) run on x_recv and sfa_recv directly.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..launch import plans
from ..moe.mxfp4 import mxfp4_masked_gemms, quantize_launch
from ..moe.weights import PreparedW13


class Mxfp4MaskedExperts:
    """GEMM1 (FP8 x FP4, SwiGLU) -> quantize h -> GEMM2 (row scale) on FP8 masked rows."""

    def __init__(self, device: int, e: int, max_m: int, h: int, i: int, expected: int,
                 w13: PreparedW13, w2_prepared: bool) -> None:  # fmt: skip
        # The table kernels only: an EP forward allocates nothing, and the convert-ahead
        # kernel takes a workspace a call.
        table_only = dataclasses.replace(w13, mxfp4_windowed=False)
        (d1, p1), (d2, p2) = mxfp4_masked_gemms(e, max_m, h, i, expected, table_only, w2_prepared)
        self.gemm1 = plans.make_plan(device, d1, p1)
        self.quantize_h = quantize_launch(device, e * max_m, i, i, group_rows=max_m)
        self.gemm2 = plans.make_plan(device, d2, p2)

    def run(self, bufs: dict[str, torch.Tensor], w13: PreparedW13, w2b: torch.Tensor,
            w2s: torch.Tensor, w2_bias: torch.Tensor | None, stream: int) -> bool:  # fmt: skip
        ptr: dict[str, Any] = {name: t.data_ptr() for name, t in bufs.items()}
        bias13 = 0 if w13.bias is None else w13.bias.data_ptr()
        bias2 = 0 if w2_bias is None else w2_bias.data_ptr()
        info = ptr["masked_m"]
        launched = self.gemm1.launch(
            ptr["x_recv"], w13.weight.data_ptr(), ptr["h"], ptr["sfa_recv"],
            w13.scales.data_ptr(), bias13, 0, info, stream,
        )  # fmt: skip
        launched &= self.quantize_h(ptr["h"], ptr["h8"], ptr["sfa_h"], info, stream)
        launched &= self.gemm2.launch(
            ptr["h8"], w2b.data_ptr(), ptr["y"], ptr["sfa_h"], w2s.data_ptr(), bias2,
            ptr["recv_weight"], info, stream,
        )  # fmt: skip
        return launched
