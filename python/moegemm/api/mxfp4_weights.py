"""MXFP4 weights in the kernel's prepared layout: `prepare_mxfp4_weights(b, sfb)`.

The FP8 x FP4 functions take the second operand either as the checkpoint's `(b, sfb)` (the OCP
MXFP4 layout: element 2i in the low nibble of byte i) or as the `Mxfp4Weights` this module
returns. Preparing is a one-time, load-time repack (engines do it when they load a model); the
raw layout works without it.

The prepared nibble layout (same shape and dtype as b; sfb the same but for the scale bytes of
all-zero blocks, see prepare_mxfp4_weights). Read b as little-endian
32-bit words, 8 codes c0..c7 each, code j in nibble j (bits 4j..4j+3). In the prepared word,
nibble k holds

    bits 0-2: c_k & 7                (code k's magnitude, in place)
    bit 3:    sign of c_s(k),         s(k) = k / 2 for even k, 4 + (k - 1) / 2 for odd k

so the sign of code j (j < 4) sits at bit 8j + 3 and that of code 4 + j at bit 8j + 7: the
conversion expands a word into two FP8 words (codes 0..3 and 4..7, one byte each, sign at bit
8j + 7 of byte j), which find their 4 signs one nibble off (a shift) and in place, so a masked
logic op per 4 weights sets them instead of one per weight (../shared/FP4_ON_HOPPER.md,
section 2). Only sign bits move: magnitudes stay where the checkpoint has them, and no value is
re-rounded.

SM100 (prepare_mxfp4_weights(b, sfb, arch="sm_100f"); compiled and statically checked kernels,
not run on hardware): the tensor core reads E2M1 codes itself, so b keeps the checkpoint's
nibbles, padded with zero codes to Kp = K rounded up to 128 ([.., N, Kp / 2], rows of a
multiple of 64 bytes: what TMA's 16U4_ALIGN16B type needs); the scales become 32-bit words
[.., Kp / 128, Np] (Np = N rounded up to 128, stored as uint8 [.., Kp / 128, 4 Np]): byte j of a
word is the scale of the 32-block j of that 128 of K (1.0, byte 127, for padding), and inside
each 128 rows word 4 i + j holds row 32 j + i, the order tcgen05.cp 32x128b.warpx4 copies into
tensor memory. One TMA box of 512 bytes per tile and k-block loads them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MXFP4_GROUP = 32  # weights per UE8M0 scale byte
NAN_SCALE = 0xFF  # UE8M0's NaN
# SIGN_SOURCE[k]: the code whose sign the prepared word's nibble k carries (s(k) above), and
# SIGN_HOME[j]: the nibble that carries code j's sign (the inverse permutation).
SIGN_SOURCE = (0, 4, 1, 5, 2, 6, 3, 7)
SIGN_HOME = tuple(SIGN_SOURCE.index(j) for j in range(8))
SM90_ARCH = "sm_90a"
SM100_ARCH = "sm_100f"
ARCHS = {"sm_90a": SM90_ARCH, "sm_100f": SM100_ARCH, "sm_100a": SM100_ARCH}
SM100_K_BLOCK = 128  # Kp: K padded to this; scale words hold 4 blocks of 32
SM100_ROW_CHUNK = 128  # Np: N padded to this; the tcgen05.cp order permutes within it
UNIT_SCALE = 127  # UE8M0 1.0


@dataclass(frozen=True, eq=False)  # eq=False: tensors do not compare to a bool
class Mxfp4Weights:
    """MXFP4 weights for the FP8 x FP4 GEMMs: b uint8 [.., N, K/2] and sfb uint8 [.., N, K/32]
    (UE8M0). prepared=True: b is in the prepared nibble layout (module doc), as
    prepare_mxfp4_weights returns it; prepared=False: b is the checkpoint layout, as a plain
    (b, sfb) tuple would be."""

    b: torch.Tensor
    sfb: torch.Tensor
    prepared: bool = True
    # The architecture the layout is for: "sm_90a" (the layout above), or "sm_100f" (the SM100
    # one of the module doc: b [.., N, Kp / 2], sfb uint8 [.., Kp / 128, 4 Np]; prepared only).
    arch: str = SM90_ARCH

    def __post_init__(self) -> None:
        if not isinstance(self.prepared, bool):
            raise TypeError(f"prepared must be a bool, got {type(self.prepared).__name__}")
        if self.arch not in (SM90_ARCH, SM100_ARCH):
            raise ValueError(f"arch must be {SM90_ARCH!r} or {SM100_ARCH!r}, got {self.arch!r}")
        if self.arch == SM100_ARCH and not self.prepared:
            raise ValueError("SM100 weights are prepared weights (prepare_mxfp4_weights)")


def _check_pair(b: object, sfb: object) -> tuple[torch.Tensor, torch.Tensor]:
    """b uint8 [.., N, K/2] and sfb uint8 [.., N, K/32] of one device, K a positive multiple of
    32 (the shapes the FP8 x FP4 functions take)."""
    for name, t in (("b", b), ("sfb", sfb)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.is_nested or t.layout is not torch.strided:
            raise TypeError(f"{name} must be a dense (strided) tensor")
        if t.dtype != torch.uint8:
            raise TypeError(f"{name} must have dtype torch.uint8, got {t.dtype}")
        if t.dim() < 2:
            raise ValueError(f"{name} must be [.., N, K/...] (rank >= 2), got {tuple(t.shape)}")
    kb = sfb.shape[-1]
    if kb == 0:
        raise ValueError(f"sfb must have K/32 > 0 blocks, got shape {tuple(sfb.shape)}")
    expected = (*sfb.shape[:-1], kb * MXFP4_GROUP // 2)
    if tuple(b.shape) != expected:
        raise ValueError(
            f"b must have shape {expected} (sfb {tuple(sfb.shape)} is [.., N, K/32], b is "
            f"[.., N, K/2]), got {tuple(b.shape)}"
        )
    if b.device != sfb.device:
        raise ValueError(f"b is on {b.device} but sfb is on {sfb.device}")
    return b, sfb


def _words(b: torch.Tensor) -> torch.Tensor:
    """b's nibbles as [.., words, 8]: nibble j of each little-endian 32-bit word, j = 0..7
    (byte i of a word holds nibbles 2i (low) and 2i + 1 (high))."""
    quads = b.unflatten(-1, (b.shape[-1] // 4, 4))
    return torch.stack((quads & 0xF, quads >> 4), dim=-1).flatten(-2)


def _pack(nibbles: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The inverse of _words: [.., words, 8] nibbles back to contiguous bytes of `shape`."""
    pairs = nibbles.unflatten(-1, (4, 2))
    return (pairs[..., 0] | (pairs[..., 1] << 4)).reshape(shape).contiguous()


def _sign_permuted(nibbles: torch.Tensor, source: tuple[int, ...]) -> torch.Tensor:
    """Each nibble's magnitude in place, nibble k's sign bit taken from nibble source[k]."""
    index = torch.tensor(source, device=nibbles.device)
    signs = nibbles.index_select(-1, index) & 0x8
    return (nibbles & 0x7) | signs


def prepare_mxfp4_weights(b: torch.Tensor, sfb: torch.Tensor, arch: str = "sm_90a") -> Mxfp4Weights:
    """The prepared layout of MXFP4 weights (b uint8 [.., N, K/2], sfb uint8 [.., N, K/32]), for
    the FP8 x FP4 functions; one-time, at load time (it allocates, and syncs once to refuse a
    NaN scale). Plain torch: runs on CPU and CUDA tensors alike.

    arch: "sm_90a" (Hopper, the default) or "sm_100f" (alias "sm_100a": Blackwell, the only
    form SM100 takes; the module doc's SM100 layout, Mxfp4Weights.arch "sm_100f").

    Returns Mxfp4Weights(b', sfb', prepared=True): b' a new contiguous tensor in the nibble
    layout of the module doc; sfb' is sfb itself where its last dim has unit stride (what the
    kernels read) and no 32-block is all zero, else a contiguous copy with the scale bytes of
    all-zero blocks moved next to their neighbours' (no value changes; it saves the kernel a
    second conversion pass). Raises ValueError for a scale byte 0xFF (NaN), which
    would make the block's outputs NaN, and for shapes the functions do not take.
    """
    if arch not in ARCHS:
        raise ValueError(f"arch must be one of {sorted(ARCHS)}, got {arch!r}")
    b, sfb = _check_pair(b, sfb)
    if bool((sfb == NAN_SCALE).any()):  # the sync a load-time call may afford
        bad = (sfb == NAN_SCALE).nonzero()[0].tolist()
        raise ValueError(f"sfb holds the NaN scale byte 0xFF (first at index {tuple(bad)})")
    if ARCHS[arch] == SM100_ARCH:
        return _prepare_sm100(b, sfb)
    out = _pack(_sign_permuted(_words(b), SIGN_SOURCE), b.shape)
    return Mxfp4Weights(out, _zero_block_scales_rebased(b, sfb), prepared=True)


def _zero_block_scales_rebased(b: torch.Tensor, sfb: torch.Tensor) -> torch.Tensor:
    """sfb with the scale byte of every all-zero 32-block (every code +-0, which any scale leaves
    zero) moved next to its neighbours: the largest byte of its row's other blocks in the same
    128 of K, else of its row, else the median of those row maxima over the rows of its matrix
    (an all-zero row). quantize_mxfp4 gives such blocks byte 0, ~120 binades below the others,
    and the kernel (pipeline/fp4_expand_transform.cuh) would convert any tile holding one in
    two passes; no value changes (benchmarks/fp4_pass_fraction.py measured the effect)."""
    nb = sfb.shape[-1]
    zero = (b.unflatten(-1, (nb, MXFP4_GROUP // 2)) & 0x77 == 0).all(-1)  # magnitudes only
    if not bool(zero.any()):  # one sync, at load time
        return sfb.contiguous() if nb > 1 and sfb.stride(-1) != 1 else sfb
    live = torch.where(zero, -1, sfb.to(torch.int32))  # zero blocks take no part
    nkb = -(-nb // 4)
    padded = torch.nn.functional.pad(live, (0, nkb * 4 - nb), value=-1)
    kb_max = padded.unflatten(-1, (nkb, 4)).amax(-1)  # [.., N, nkb]
    row_max = live.amax(-1, keepdim=True)  # [.., N, 1]
    # Rows without a live block: the median of the matrix's live row maxima at that k-block.
    masked = torch.where(kb_max < 0, torch.nan, kb_max.double())
    col = masked.nanmedian(dim=-2, keepdim=True).values  # [.., 1, nkb]
    col = torch.nan_to_num(col, nan=0.0).round().to(torch.int32)
    fill_kb = torch.where(kb_max >= 0, kb_max, torch.where(row_max >= 0, row_max, col))
    fill = fill_kb.repeat_interleave(4, dim=-1)[..., :nb]
    return torch.where(zero, fill, sfb.to(torch.int32)).to(torch.uint8).contiguous()


def _prepare_sm100(b: torch.Tensor, sfb: torch.Tensor) -> Mxfp4Weights:
    """The SM100 layout (module doc) of checked (b, sfb)."""
    n, nb = sfb.shape[-2], sfb.shape[-1]
    k = nb * MXFP4_GROUP
    kp = -(-k // SM100_K_BLOCK) * SM100_K_BLOCK
    np_ = -(-n // SM100_ROW_CHUNK) * SM100_ROW_CHUNK
    codes = torch.nn.functional.pad(b, (0, (kp - k) // 2)).contiguous()  # zero codes
    blocks = kp // MXFP4_GROUP
    scales = torch.full(
        (*sfb.shape[:-2], np_, blocks), UNIT_SCALE, dtype=torch.uint8, device=sfb.device
    )
    scales[..., :n, :nb] = sfb
    lead = scales.shape[:-2]
    # [.., Np, Kp/128, 4] -> [.., Kp/128, Np/128, 4 (j), 32 (i), 4 bytes] -> word 4 i + j.
    words = scales.unflatten(-1, (kp // SM100_K_BLOCK, 4)).transpose(-3, -2)
    words = words.unflatten(-2, (np_ // SM100_ROW_CHUNK, 4, 32)).transpose(-3, -2)
    out = words.reshape(*lead, kp // SM100_K_BLOCK, np_ * 4).contiguous()
    return Mxfp4Weights(codes, out, prepared=True, arch=SM100_ARCH)


def sm100_shape(weights: Mxfp4Weights) -> tuple[int, int]:
    """(N, Kp) of SM100-prepared weights: N from the codes, Kp the padded K."""
    return weights.b.shape[-2], weights.b.shape[-1] * 2


def _unprepare_sm100(weights: Mxfp4Weights, k: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    b, words = weights.b, weights.sfb
    n, kp = sm100_shape(weights)
    k = kp if k is None else k
    lead = words.shape[:-2]
    nkb, np_ = words.shape[-2], words.shape[-1] // 4
    w = words.reshape(*lead, nkb, np_ // SM100_ROW_CHUNK, 32, 4, 4).transpose(-3, -2)
    w = w.reshape(*lead, nkb, np_, 4).transpose(-3, -2)  # [.., Np, Kp/128, 4]
    sfb = w.reshape(*lead, np_, nkb * 4)[..., :n, : k // MXFP4_GROUP]
    return b[..., : k // 2].contiguous(), sfb.contiguous()


def unprepare_mxfp4_weights(weights: Mxfp4Weights) -> tuple[torch.Tensor, torch.Tensor]:
    """The checkpoint layout (b, sfb) of prepared weights (the inverse of
    prepare_mxfp4_weights; for tests and tools). Weights with prepared=False come back as
    they are."""
    if not isinstance(weights, Mxfp4Weights):
        raise TypeError(f"weights must be a moegemm.Mxfp4Weights, got {type(weights).__name__}")
    if weights.arch == SM100_ARCH:  # the checkpoint K is not recorded: K padded to Kp comes back
        return _unprepare_sm100(weights, None)
    b, sfb = _check_pair(weights.b, weights.sfb)
    if not weights.prepared:
        return b, sfb
    return _pack(_sign_permuted(_words(b), SIGN_HOME), b.shape), sfb
