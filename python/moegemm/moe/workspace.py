"""The fused MoE layer's workspace: every buffer a call writes besides `out`, allocated once so
that a call allocates nothing and a CUDA graph captured at max_tokens serves every T up to it.

Buffers (S = max_tokens * top_k rows, one per (token, choice) slot):
  x_sorted [S, H] BF16   the gathered activations in expert order; the second GEMM's output y
                         reuses it (the first GEMM has read it by then)
  h        [S, I] BF16   SwiGLU(x_sorted @ w13^T): the [S, 2I] gate/up product never exists
  offs     [E] int32     each expert's end row (the grouped GEMMs' `offs`)
  row_slot [S] int32, row_weight [S] FP32, slot_row [S] int32: the routing in both directions
With weight_dtype "mxfp4" (FP8 activations for the FP8 x FP4 kernels): x_sorted is FP8 E4M3
with its per-128 scales sfa_x [S, ceil(H / 128)], h is quantized into h8 (FP8) with sfa_h
[S, ceil(I / 128)] for the second GEMM, and y [S, H] BF16 is a buffer of its own.
"""

from __future__ import annotations

import torch

WEIGHT_DTYPES = ("bf16", "mxfp4")
FP8_BLOCK = 128


class MoEWorkspace:
    """Buffers for fused_moe calls of up to max_tokens tokens with these sizes."""

    def __init__(
        self,
        max_tokens: int,
        top_k: int,
        num_experts: int,
        hidden: int,
        intermediate: int,
        weight_dtype: str = "bf16",
        device: torch.device | str | int | None = None,
    ) -> None:
        sizes = {
            "max_tokens": max_tokens,
            "top_k": top_k,
            "num_experts": num_experts,
            "hidden": hidden,
            "intermediate": intermediate,
        }
        for name, value in sizes.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if weight_dtype not in WEIGHT_DTYPES:
            raise ValueError(f"weight_dtype must be one of {WEIGHT_DTYPES}, got {weight_dtype!r}")
        self.max_tokens, self.top_k, self.num_experts = max_tokens, top_k, num_experts
        self.hidden, self.intermediate, self.weight_dtype = hidden, intermediate, weight_dtype
        dev = torch.device("cuda", torch.cuda.current_device()) if device is None else device
        rows = max_tokens * top_k
        fp8 = weight_dtype == "mxfp4"
        act = torch.float8_e4m3fn if fp8 else torch.bfloat16
        self.x_sorted = torch.empty(rows, hidden, dtype=act, device=dev)
        self.h = torch.empty(rows, intermediate, dtype=torch.bfloat16, device=dev)
        self.y = (
            torch.empty(rows, hidden, dtype=torch.bfloat16, device=dev) if fp8 else self.x_sorted
        )
        blocks_h, blocks_i = -(-hidden // FP8_BLOCK), -(-intermediate // FP8_BLOCK)
        self.sfa_x = torch.empty(rows, blocks_h, dtype=torch.float32, device=dev) if fp8 else None
        self.h8 = torch.empty(rows, intermediate, dtype=act, device=dev) if fp8 else None
        self.sfa_h = torch.empty(rows, blocks_i, dtype=torch.float32, device=dev) if fp8 else None
        self.offs = torch.empty(num_experts, dtype=torch.int32, device=dev)
        self.row_slot = torch.empty(rows, dtype=torch.int32, device=dev)
        self.row_weight = torch.empty(rows, dtype=torch.float32, device=dev)
        self.slot_row = torch.empty(rows, dtype=torch.int32, device=dev)
        self.device = self.x_sorted.device

    @classmethod
    def of_buffers(
        cls, x_sorted, h, offs, row_slot, row_weight, slot_row, top_k: int, mxfp4=None
    ) -> MoEWorkspace:
        """A workspace over existing buffers (the custom ops' real implementations get them as
        tensors): sizes read from their shapes. mxfp4: the MXFP4 experts' (sfa_x, h8, sfa_h, y)."""
        ws = cls.__new__(cls)
        rows, ws.hidden = x_sorted.shape
        ws.top_k, ws.num_experts, ws.intermediate = top_k, offs.shape[0], h.shape[1]
        ws.max_tokens, ws.weight_dtype = rows // top_k, "bf16" if mxfp4 is None else "mxfp4"
        ws.x_sorted, ws.h, ws.offs = x_sorted, h, offs
        ws.row_slot, ws.row_weight, ws.slot_row = row_slot, row_weight, slot_row
        if mxfp4 is None:
            ws.y, ws.sfa_x, ws.h8, ws.sfa_h = x_sorted, None, None, None
        else:
            ws.sfa_x, ws.h8, ws.sfa_h, ws.y = mxfp4
        ws.device = x_sorted.device
        return ws

    @staticmethod
    def bytes_for(
        max_tokens: int,
        top_k: int,
        num_experts: int,
        hidden: int,
        intermediate: int,
        weight_dtype: str = "bf16",
    ) -> int:
        """The workspace's size in bytes (the benchmark reports it per model and T)."""
        rows = max_tokens * top_k
        per_row = 2 * hidden + 2 * intermediate + 12
        if weight_dtype == "mxfp4":  # FP8 x, its scales, BF16 y, FP8 h8 and its scales
            per_row = hidden + 4 * -(-hidden // FP8_BLOCK) + 2 * intermediate + 2 * hidden
            per_row += intermediate + 4 * -(-intermediate // FP8_BLOCK) + 12
        return rows * per_row + 4 * num_experts

    @property
    def nbytes(self) -> int:
        return self.bytes_for(
            self.max_tokens, self.top_k, self.num_experts, self.hidden, self.intermediate,
            self.weight_dtype,
        )  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"MoEWorkspace(max_tokens={self.max_tokens}, top_k={self.top_k}, "
            f"num_experts={self.num_experts}, hidden={self.hidden}, "
            f"intermediate={self.intermediate}, {self.nbytes / 2**20:.1f} MiB on {self.device})"
        )
