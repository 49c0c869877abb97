"""The fused MoE layer's one-time weight preparation: w13's gate and up rows reordered so that
every 16 rows hold 8 gate rows and the 8 up rows of the same intermediate columns, which puts
each (gate, up) pair in one thread's accumulators in both orientations of the BF16 grouped
kernels (include/moegemm/epilogue/sm90_swiglu_store.cuh). Engines call it at load time.

Source layouts of w13 [E, 2I, H]:
  "silu"        (vLLM, SGLang): gate = rows [0, I), up = rows [I, 2I);
  "swiglu_oai"  (gpt-oss):      gate = even rows, up = odd rows (interleaved row by row).
The bias w13_bias [E, 2I] (gpt-oss carries one) follows its rows and is kept in FP32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

ACTIVATIONS = ("silu", "swiglu_oai")
# The first GEMM's epilogue (GemmDesc.epilogue) of each activation.
EPILOGUE_OF = {"silu": "swiglu", "swiglu_oai": "swiglu_oai"}
PAIR_ROWS = 8  # gate rows, then as many up rows, per 16-row group


@dataclass(frozen=True, eq=False)
class PreparedW13:
    """w13 in the kernel's order ([E, 2I, H] BF16, contiguous), its bias in the same order
    ([E, 2I] FP32) or None, and the activation both were prepared for."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    activation: str

    @property
    def num_experts(self) -> int:
        return self.weight.shape[0]

    @property
    def intermediate(self) -> int:
        return self.weight.shape[1] // 2

    @property
    def hidden(self) -> int:
        return self.weight.shape[2]


def split_gate_up(t: torch.Tensor, activation: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(gate, up) views of the source layout along dim 1 (w13 [E, 2I, H] or its bias [E, 2I])."""
    if activation == "silu":
        half = t.shape[1] // 2
        return t[:, :half], t[:, half:]
    return t[:, 0::2], t[:, 1::2]


def kernel_order(t: torch.Tensor, activation: str) -> torch.Tensor:
    """t ([E, 2I, ...]) in the kernel's row order: per 16 rows, 8 gate then their 8 up rows."""
    gate, up = split_gate_up(t, activation)
    e, i = gate.shape[:2]
    rest = tuple(gate.shape[2:])
    groups = (e, i // PAIR_ROWS, PAIR_ROWS, *rest)
    paired = torch.stack((gate.reshape(groups), up.reshape(groups)), dim=2)
    return paired.reshape(e, 2 * i, *rest).contiguous()


def source_order(t: torch.Tensor, activation: str) -> torch.Tensor:
    """The inverse of kernel_order (tests, tools)."""
    e, two_i = t.shape[:2]
    i = two_i // 2
    rest = tuple(t.shape[2:])
    paired = t.reshape(e, i // PAIR_ROWS, 2, PAIR_ROWS, *rest)
    gate = paired[:, :, 0].reshape(e, i, *rest)
    up = paired[:, :, 1].reshape(e, i, *rest)
    if activation == "silu":
        return torch.cat((gate, up), dim=1)
    return torch.stack((gate, up), dim=2).reshape(e, two_i, *rest)


def prepare_moe_weights(
    w13: torch.Tensor, *, activation: str = "silu", w13_bias: torch.Tensor | None = None
) -> PreparedW13:
    """w13 [E, 2I, H] BF16 (and its bias [E, 2I], any float dtype) in the kernel's order, for
    `fused_moe` and `fused_moe_masked`. 2I must be a multiple of 16 and H of 8. Allocates the
    reordered copy once (the source is not kept)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if not isinstance(w13, torch.Tensor) or w13.dtype != torch.bfloat16 or w13.dim() != 3:
        got = f"{w13.dtype} {tuple(w13.shape)}" if isinstance(w13, torch.Tensor) else type(w13)
        raise TypeError(f"w13 must be a 3-D bfloat16 tensor [E, 2I, H], got {got}")
    e, two_i, h = w13.shape
    if e < 1 or two_i == 0 or two_i % (2 * PAIR_ROWS) or h == 0 or h % 8:
        raise ValueError(
            f"w13 [E, 2I, H] needs E >= 1, 2I a positive multiple of 16 and H of 8, got "
            f"{tuple(w13.shape)}"
        )
    bias = None
    if w13_bias is not None:
        if not isinstance(w13_bias, torch.Tensor) or not w13_bias.is_floating_point():
            raise TypeError("w13_bias must be a floating-point tensor [E, 2I]")
        if tuple(w13_bias.shape) != (e, two_i):
            raise ValueError(f"w13_bias must have shape {(e, two_i)}, got {tuple(w13_bias.shape)}")
        if w13_bias.device != w13.device:
            raise ValueError(f"w13_bias is on {w13_bias.device}, w13 on {w13.device}")
        bias = kernel_order(w13_bias.float(), activation)
    return PreparedW13(kernel_order(w13, activation), bias, activation)
