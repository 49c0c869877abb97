"""The fused MoE layer's one-time weight preparation: w13's gate and up rows reordered so that
every 16 rows hold 8 gate rows and the 8 up rows of the same intermediate columns, which puts
each (gate, up) pair in one thread's accumulators in both orientations of the BF16 grouped
kernels (include/moegemm/epilogue/sm90_swiglu_store.cuh). Engines call it at load time.

Source layouts of w13 [E, 2I, H]:
  "silu"        (vLLM, SGLang): gate = rows [0, I), up = rows [I, 2I);
  "swiglu_oai"  (gpt-oss):      gate = even rows, up = odd rows (interleaved row by row).
The bias w13_bias [E, 2I] (gpt-oss carries one) follows its rows and is kept in FP32.

MXFP4 experts (gpt-oss ships them): w13 is the checkpoint's (blocks, scales) pair, blocks uint8
[E, 2I, H/2] (or gpt-oss's [E, 2I, H/32, 16] view of it) and scales uint8 [E, 2I, H/32], or an
Mxfp4Weights in the checkpoint layout; the same row order is applied to both, then
(mxfp4_layout="prepared", the default) prepare_mxfp4_weights' layout, which the fast FP8 x FP4
kernel takes (BENCHMARKS.md). For an
SM100 GPU (arch "sm_100f", the default where the blocks sit on one; compiled and statically
checked, not run on hardware) the SM100 preparation, the only form its kernel takes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..api.mxfp4_weights import (
    MXFP4_ARCH_NAMES,
    SM90_ARCH,
    SM100_ARCH,
    Mxfp4Weights,
    canonical_arch,
    mxfp4_forms,
    prepare_mxfp4_weights,
)
from ..launch.device import arch_for_device

ACTIVATIONS = ("silu", "swiglu_oai")
# The first GEMM's epilogue (GemmDesc.epilogue) of each activation.
EPILOGUE_OF = {"silu": "swiglu", "swiglu_oai": "swiglu_oai"}
PAIR_ROWS = 8  # gate rows, then as many up rows, per 16-row group


@dataclass(frozen=True, eq=False)
class PreparedW13:
    """w13 in the kernel's order, its bias in the same order ([E, 2I] FP32) or None, and the
    activation both were prepared for. BF16 experts: weight [E, 2I, H] BF16 and scales None;
    MXFP4 experts: weight the packed codes uint8 [E, 2I, H/2], scales the UE8M0 bytes
    [E, 2I, H/32], or with mxfp4_prepared prepare_mxfp4_weights' tensors (codes [E, 2I, Hp/2],
    offsets words int32 [E, 2 Hp/128, 2I]; Hp = H rounded up to 128, mxfp4_hidden = H), for
    mxfp4_arch (SM100: codes [E, 2I, Hp/2] padded to Hp = H rounded up to 128, scale words
    [E, Hp/128, 4 Np], and mxfp4_hidden the unpadded H)."""

    weight: torch.Tensor
    bias: torch.Tensor | None
    activation: str
    scales: torch.Tensor | None = None
    mxfp4_prepared: bool = False
    mxfp4_arch: str = SM90_ARCH
    mxfp4_hidden: int = 0
    # SM90-prepared w13 without exact-path blocks (Mxfp4Weights.windowed): GEMM1 may take the
    # convert-ahead kernel at prefill sizes.
    mxfp4_windowed: bool = False

    @property
    def is_mxfp4(self) -> bool:
        return self.scales is not None

    @property
    def num_experts(self) -> int:
        return self.weight.shape[0]

    @property
    def intermediate(self) -> int:
        return self.weight.shape[1] // 2

    @property
    def hidden(self) -> int:
        if self.mxfp4_hidden:
            return self.mxfp4_hidden
        return self.weight.shape[2] * (2 if self.is_mxfp4 else 1)


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


def _bias_of(w13_bias: object, e: int, two_i: int, device, activation: str):
    if w13_bias is None:
        return None
    if not isinstance(w13_bias, torch.Tensor) or not w13_bias.is_floating_point():
        raise TypeError("w13_bias must be a floating-point tensor [E, 2I]")
    if tuple(w13_bias.shape) != (e, two_i):
        raise ValueError(f"w13_bias must have shape {(e, two_i)}, got {tuple(w13_bias.shape)}")
    if w13_bias.device != device:
        raise ValueError(f"w13_bias is on {w13_bias.device}, w13 on {device}")
    return kernel_order(w13_bias.float(), activation)


def _check_sizes(e: int, two_i: int, h: int, what: str) -> None:
    if e < 1 or two_i == 0 or two_i % (2 * PAIR_ROWS) or h == 0 or h % 8:
        raise ValueError(
            f"w13 [E, 2I, H] needs E >= 1, 2I a positive multiple of 16 and H of 8, got {what}"
        )


def default_mxfp4_arch(t: torch.Tensor) -> str:
    """The preparation a tensor's device runs: its GPU's arch; "sm_90a" off the GPU and on a GPU
    moegemm has no kernels for (the preparation is plain torch; a call there is refused)."""
    if t.device.type != "cuda":
        return SM90_ARCH
    try:
        return arch_for_device(t.device.index).name
    except ValueError:
        return SM90_ARCH


def _prepare_mxfp4(w13, activation: str, w13_bias, layout: str, arch: str | None) -> PreparedW13:
    if arch is not None and arch not in MXFP4_ARCH_NAMES:
        raise ValueError(f"arch must be one of {sorted(MXFP4_ARCH_NAMES)} or None, got {arch!r}")
    if isinstance(w13, Mxfp4Weights):
        if w13.arch == SM100_ARCH:
            raise ValueError(
                "w13 is already in the SM100 preparation, whose scale words cannot take the "
                "gate/up row order: pass the checkpoint's (blocks, scales) pair"
            )
        if w13.prepared:
            raise ValueError(
                "w13 is already in the prepared layout, whose rows cannot take the gate/up row "
                "order: pass the checkpoint's (blocks, scales) pair (prepare_moe_weights "
                "prepares it)"
            )
        b, sfb = w13.b, w13.sfb
    else:
        b, sfb = w13
    for name, t in (("w13 blocks", b), ("w13 scales", sfb)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
            raise TypeError(f"{name} must be a uint8 tensor, got {type(t).__name__}")
    if b.dim() == 4:  # gpt-oss's blocks [E, 2I, H/32, 16]
        b = b.reshape(b.shape[0], b.shape[1], -1)
    if b.dim() != 3 or sfb.dim() != 3:
        raise ValueError(
            f"w13 blocks must be [E, 2I, H/2] (or [E, 2I, H/32, 16]) and scales [E, 2I, H/32], "
            f"got {tuple(b.shape)} and {tuple(sfb.shape)}"
        )
    e, two_i, half_h = b.shape
    h = 2 * half_h
    _check_sizes(e, two_i, h, f"blocks {tuple(b.shape)}")
    if h % 32:
        # Checked apart from the scales' shape: with H/32 rounded down, a well-formed scales
        # tensor would match and the message would blame it.
        raise ValueError(
            f"w13 blocks [E, 2I, H/2] give H = {h}, which must be a multiple of 32 (one UE8M0 "
            f"scale per 32 weights), got blocks {tuple(b.shape)}"
        )
    if tuple(sfb.shape) != (e, two_i, h // 32):
        raise ValueError(
            f"w13 scales must be [E, 2I, H/32] = {(e, two_i, h // 32)} for blocks "
            f"{tuple(b.shape)}, got {tuple(sfb.shape)}"
        )
    if layout not in ("raw", "prepared"):
        raise ValueError(f"mxfp4_layout must be 'raw' or 'prepared', got {layout!r}")
    arch = canonical_arch(arch) if arch is not None else default_mxfp4_arch(b)
    if layout not in mxfp4_forms(arch):
        raise ValueError(
            "SM100 takes MXFP4 experts in its own preparation only: pass the checkpoint's "
            "(blocks, scales) pair with mxfp4_layout='prepared'"
        )
    b, sfb = kernel_order(b, activation), kernel_order(sfb, activation)
    bias = _bias_of(w13_bias, e, two_i, b.device, activation)
    if arch == SM100_ARCH:
        packed = prepare_mxfp4_weights(b, sfb, arch=SM100_ARCH)
        return PreparedW13(packed.b, bias, activation, packed.sfb, True, SM100_ARCH, h)
    if layout == "prepared":
        # The prepared tensors as they come: the codes' rows are Hp/2 bytes apart.
        packed = prepare_mxfp4_weights(b, sfb)
        return PreparedW13(packed.b, bias, activation, packed.sfb, True, mxfp4_hidden=h,
                           mxfp4_windowed=packed.windowed)  # fmt: skip
    return PreparedW13(b.contiguous(), bias, activation, sfb.contiguous(), False)


_W13_FORMS = (
    "a bfloat16 tensor [E, 2I, H], or MXFP4 experts as a (blocks, scales) pair of uint8 "
    "tensors or an Mxfp4Weights"
)


def _describe(value: object) -> str:
    """What a caller passed, in a few words: a tensor's dtype and shape, a sequence's length and
    element types (a list of three is neither a tensor nor a pair), else the type."""
    if isinstance(value, torch.Tensor):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        kinds = ", ".join(type(v).__name__ for v in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"a {type(value).__name__} of {len(value)} ({kinds})"
    return f"a {type(value).__name__}"


def prepare_moe_weights(
    w13: object,
    *,
    activation: str = "silu",
    w13_bias: torch.Tensor | None = None,
    mxfp4_layout: str = "prepared",
    arch: str | None = None,
) -> PreparedW13:
    """w13 (and its bias [E, 2I], any float dtype) in the kernel's order, for `fused_moe` and
    `fused_moe_masked`: a BF16 tensor [E, 2I, H], or MXFP4 experts as (blocks, scales) or an
    Mxfp4Weights (module doc). 2I must be a multiple of 16 and H of 8 (MXFP4: of 32).
    arch (MXFP4 only): the GPU the experts will run on, "sm_90a" or "sm_100f"; None takes the
    blocks' GPU (CPU tensors: "sm_90a"). Allocates the reordered copy once (the source is not
    kept)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if isinstance(w13, (tuple, list)) and len(w13) != 2:
        raise TypeError(f"w13 must be {_W13_FORMS}, got {_describe(w13)}")
    if isinstance(w13, (tuple, list, Mxfp4Weights)):
        return _prepare_mxfp4(w13, activation, w13_bias, mxfp4_layout, arch)
    if not isinstance(w13, torch.Tensor) or w13.dtype != torch.bfloat16 or w13.dim() != 3:
        raise TypeError(f"w13 must be {_W13_FORMS}, got {_describe(w13)}")
    e, two_i, h = w13.shape
    _check_sizes(e, two_i, h, str(tuple(w13.shape)))
    bias = _bias_of(w13_bias, e, two_i, w13.device, activation)
    return PreparedW13(kernel_order(w13, activation), bias, activation)
