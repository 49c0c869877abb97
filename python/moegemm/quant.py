"""FP8 and MXFP4 casting helpers, and the exact MXFP4 reference dequantization.

Plain torch (no custom kernels), so the same code runs on CPU and CUDA tensors and gives
bitwise the same result on both: every step is either integer bit manipulation, a comparison
against exact constants, or a multiplication by a power of two whose result is representable.

Formats (../shared/DESIGN.md):
- FP8 activations: a float8_e4m3fn [..., M, K], sfa float32 [..., M, ceil(K / gran_k)], one
  scale per token per gran_k of K (DeepGEMM's convention: scale = amax / 448, x ~= a * scale).
- MXFP4 weights (OCP MX v1.0): b uint8 [..., N, K/2], two E2M1 codes per byte, element 2i in
  the low nibble; a code is sign (bit 3) | magnitude index into {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  sfb uint8 [..., N, K/32], UE8M0, block scale 2^(byte - 127), byte 0xFF = NaN. gpt-oss
  checkpoints store `blocks` [E, N, K/32, 16] and `scales` [E, N, K/32], a reshape of (b, sfb);
  dequantize_mxfp4 accepts that layout directly.

Decisions the OCP spec leaves open:
- An all-zero block (including -0.0) gets scale byte 0 (2^-127), what the rule gives when
  log2(0) = -inf is clamped to the UE8M0 range; its codes are 0 (+0) or 8 (-0).
- Signs are kept on values that round to zero: -0.0 and small negatives encode as code 8 (-0),
  as IEEE rounding does; dequantize_mxfp4 returns -0.0 for them.
- quantize_mxfp4 refuses NaN/Inf inputs with a ValueError (a check that syncs with the device)
  instead of encoding them silently: E2M1 has no NaN/Inf and a block scale of NaN would lose
  the whole block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["dequantize_mxfp4", "per_token_cast_to_fp8", "quantize_mxfp4"]

FP8_E4M3_MAX = 448.0
# DeepGEMM's floor on a block's amax: an all-zero block gets a finite, nonzero scale.
FP8_AMAX_EPS = 1e-4
MXFP4_BLOCK = 32
E2M1_EMAX = 2  # 2^2 * 1.5 = 6: the largest E2M1 binade
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
# Round-to-nearest-even on the E2M1 grid as "number of thresholds passed": crossing the
# midpoint between grid[i] and grid[i + 1] moves to i + 1, and a value exactly on a midpoint
# goes to the even index (the even mantissa bit), so the comparison is strict (>) when i is
# even and inclusive (>=) when i + 1 is even. Midpoints are exact in FP32. Values above 6
# (a block's amax / scale lies in [4, 8)) pass every threshold: saturated at index 7 (6).
_E2M1_MIDPOINTS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False),
                   (3.5, True), (5.0, False))  # fmt: skip
_FLOAT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# torch's own names for these formats, viewed as the uint8 bytes they are.
_FP4_X2 = getattr(torch, "float4_e2m1fn_x2", None)
_E8M0 = getattr(torch, "float8_e8m0fnu", None)


def _check_float(t: object, name: str, min_rank: int) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name} must be bfloat16, float16 or float32, got {t.dtype}")
    if t.dim() < min_rank:
        raise ValueError(f"{name} must have rank >= {min_rank}, got shape {tuple(t.shape)}")
    return t


def _ceil_pow2(s: torch.Tensor) -> torch.Tensor:
    """2^ceil(log2 s) for positive normal FP32 s, exactly, from the bits: an exact power of two
    (mantissa 0) stays, anything else goes to the next exponent."""
    bits = s.view(torch.int32)
    exponent = (bits >> 23) & 0xFF
    exponent = exponent + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exponent << 23).view(torch.float32)


def per_token_cast_to_fp8(
    x: torch.Tensor, gran_k: int = 128, *, ue8m0: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cast x [..., M, K] to (a float8_e4m3fn [..., M, K], sfa float32 [..., M, ceil(K/gran_k)]).

    Each token's K is cut into blocks of gran_k (the last may be partial); a block's scale is
    max(amax, 1e-4) * fp32(1/448) and a = x / scale, so x ~= a * scale within E4M3 precision.

    ue8m0=True (what the SM100 FP8 x FP4 kernels need: they feed sfa to the tensor core as UE8M0
    per 32 of K) rounds each scale up to a power of two, 2^ceil(log2 scale), and divides by that
    instead (DeepGEMM's convention); |a| stays <= 448 since the scale only grew.
    """
    _check_float(x, "x", 2)
    if isinstance(gran_k, bool) or not isinstance(gran_k, int):
        raise TypeError(f"gran_k must be an int, got {type(gran_k).__name__}")
    if gran_k <= 0:
        raise ValueError(f"gran_k must be positive, got {gran_k}")
    k = x.shape[-1]
    if k < 1:
        raise ValueError(f"x must have K >= 1, got shape {tuple(x.shape)}")
    num_blocks = -(-k // gran_k)
    # Zero padding changes no amax, and the padded columns are sliced off again.
    xf = F.pad(x.float(), (0, num_blocks * gran_k - k))
    xb = xf.unflatten(-1, (num_blocks, gran_k))
    # A multiply by the FP32 reciprocal, not a division: CUDA's division by a scalar is itself
    # a multiply by the reciprocal, so this form gives the same bits on the CPU and the GPU.
    sfa = xb.abs().amax(dim=-1).clamp(min=FP8_AMAX_EPS) * (1.0 / FP8_E4M3_MAX)
    if ue8m0:
        sfa = _ceil_pow2(sfa)
    # x / scale can exceed 448 by an FP32 rounding step; the clamp keeps it off the NaN code.
    scaled = (xb / sfa.unsqueeze(-1)).clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX)
    a = scaled.flatten(-2)[..., :k].to(torch.float8_e4m3fn)
    return a.contiguous(), sfa.contiguous()


def quantize_mxfp4(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize w [..., N, K] (K % 32 == 0) to MXFP4: (b uint8 [..., N, K/2], sfb uint8 [..., N, K/32]).

    OCP MX v1.0: a 32-block's scale is 2^(floor(log2 amax) - 2) clamped to [2^-127, 2^127];
    w / scale is rounded to nearest even on the E2M1 grid and saturated at +-6.
    """
    _check_float(w, "w", 2)
    n, k = w.shape[-2], w.shape[-1]
    if k == 0 or k % MXFP4_BLOCK != 0:
        raise ValueError(f"w must have K a positive multiple of 32, got shape {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()):
        raise ValueError("w contains NaN or Inf, which MXFP4 cannot encode")
    wb = w.float().unflatten(-1, (k // MXFP4_BLOCK, MXFP4_BLOCK))  # bf16/fp16 -> fp32 is exact
    amax = wb.abs().amax(dim=-1)
    # floor(log2 amax) is amax's FP32 exponent field minus 127 for a normal amax; a subnormal or
    # zero amax has field 0 and its scale exponent lands below -127 either way, so clamping
    # (field - E2M1_EMAX) at 0 gives the stored byte e = scale exponent + 127 directly. A finite
    # FP32 has field <= 254, so e <= 252: the upper clamp (254) is unreachable from FP32.
    field = (amax.view(torch.int32) >> 23) & 0xFF
    e = (field - E2M1_EMAX).clamp(min=0)
    # 1 / scale = 2^(127 - e), exponent field 254 - e in [2, 254]: a normal power of two, so
    # |w| * it is exact except where it underflows, far below the first midpoint (0.25).
    inv_scale = ((254 - e) << 23).view(torch.float32)
    mag = wb.abs() * inv_scale.unsqueeze(-1)
    idx = torch.zeros(mag.shape, dtype=torch.uint8, device=mag.device)
    for threshold, inclusive in _E2M1_MIDPOINTS:  # 7 thresholds, each a vectorised compare
        idx += (mag >= threshold if inclusive else mag > threshold).to(torch.uint8)
    codes = (idx | (torch.signbit(wb).to(torch.uint8) << 3)).reshape(*w.shape[:-1], k)
    b = codes[..., 0::2] | (codes[..., 1::2] << 4)
    return b.contiguous(), e.to(torch.uint8).reshape(*w.shape[:-2], n, k // MXFP4_BLOCK)


def _as_bytes(t: object, name: str, alt: torch.dtype | None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if alt is not None and t.dtype == alt:
        return t.view(torch.uint8)
    if t.dtype != torch.uint8:
        raise TypeError(f"{name} must be uint8, got {t.dtype}")
    return t


def dequantize_mxfp4(b: torch.Tensor, sfb: torch.Tensor) -> torch.Tensor:
    """Exact float32 [..., N, K] values of MXFP4 (b, sfb).

    b is uint8 [..., N, K/2] or the gpt-oss checkpoint layout [..., N, K/32, 16] (any view;
    nothing is copied to reshape it); sfb is uint8 [..., N, K/32] (torch's float4_e2m1fn_x2 and
    float8_e8m0fnu are accepted as the same bytes). Every value code * 2^(e - 127) that fits
    FP32 is returned exactly, subnormals included; a scale byte 0xFF gives NaN for its block.
    Only codes >= 2 with e >= 253 (never produced by quantize_mxfp4) exceed FP32: +-inf.
    """
    b = _as_bytes(b, "b", _FP4_X2)
    sfb = _as_bytes(sfb, "sfb", _E8M0)
    if sfb.dim() < 2:
        raise ValueError(f"sfb must be [..., N, K/32], got shape {tuple(sfb.shape)}")
    if b.device != sfb.device:
        raise ValueError(f"b is on {b.device} but sfb is on {sfb.device}")
    kb = sfb.shape[-1]
    if b.dim() == sfb.dim() + 1:  # checkpoint layout [..., N, K/32, 16]
        if b.shape[-1] != MXFP4_BLOCK // 2 or b.shape[:-1] != sfb.shape:
            raise ValueError(
                f"b in the checkpoint layout must be sfb's shape + (16,): b {tuple(b.shape)}, "
                f"sfb {tuple(sfb.shape)}"
            )
        blocks = b
    elif b.dim() == sfb.dim():  # packed layout [..., N, K/2]
        if b.shape[:-1] != sfb.shape[:-1] or b.shape[-1] != kb * (MXFP4_BLOCK // 2):
            raise ValueError(
                f"b [..., N, K/2] and sfb [..., N, K/32] disagree: b {tuple(b.shape)}, "
                f"sfb {tuple(sfb.shape)}"
            )
        blocks = b.unflatten(-1, (kb, MXFP4_BLOCK // 2))
    else:
        raise ValueError(
            f"b must be [..., N, K/2] or [..., N, K/32, 16] for sfb {tuple(sfb.shape)}, "
            f"got shape {tuple(b.shape)}"
        )
    lut = torch.tensor(E2M1_VALUES + tuple(-v for v in E2M1_VALUES), device=b.device)
    # Low nibble first: element 2i, then 2i + 1.
    codes = torch.stack((blocks & 0xF, blocks >> 4), dim=-1).flatten(-2)
    # 2^(e - 127) built from its bits: byte 0 is the FP32 subnormal 2^-127, 255 is NaN.
    e = sfb.to(torch.int32)
    bits = torch.where(e == 0, 0x00400000, torch.where(e == 0xFF, 0x7FC00000, e << 23))
    scale = bits.view(torch.float32)
    # A product of an E2M1 value (<= 2 significant bits) and a power of two is exact in FP32
    # whenever it is in range, subnormals included (multiples of 2^-149).
    values = lut[codes.long()] * scale.unsqueeze(-1)
    return values.flatten(-2)
