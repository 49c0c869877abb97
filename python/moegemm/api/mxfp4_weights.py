"""MXFP4 weights in the kernel's prepared layout: `prepare_mxfp4_weights(b, sfb)`.

The FP8 x FP4 functions take the second operand either as the checkpoint's `(b, sfb)` (the OCP
MXFP4 layout: element 2i in the low nibble of byte i) or as the `Mxfp4Weights` this module
returns. Preparing is a one-time, load-time repack (engines do it when they load a model); the
raw layout works without it.

The prepared layout (SM90; the decode kernel's include/moegemm/mma/sm90_fp4_table_mma.cuh and the
prefill kernel's include/moegemm/pipeline/fp4_table_transform.cuh read it, FP4_ON_HOPPER.md
section 7 has the arithmetic). N must be a multiple of 64; K is padded with zero codes to Kp, a
multiple of 128 (KB = Kp / 128 k-blocks). Same bytes per weight as the checkpoint: 0.5 for the
codes, 1/32 for the offsets words.

- b: uint8 [.., N, Kp/2], contiguous (Mxfp4Weights.k keeps the checkpoint K; a call takes K from
  the activations). The rows of each 64-row block (64 * Kp/2 bytes) hold its KB k-blocks one
  after another, 4096 contiguous bytes each (one TMA box reads a block's k-block in one piece,
  not 64 pieces of 64 bytes), in the order the kernel's 128 threads read them: thread t (rows
  r = 16 (t / 32) + (t % 32) / 4 and r + 8 of the block) owns 8 words w[i], i = 2 j + q, holding
  the codes of k = 32 j + 16 q + 4 (t % 4) + c (c = 0..3); word i sits at byte (i / 4) * 2048 +
  16 t + 4 (i % 4) (two conflict-free 16-byte loads). In a word, nibble c holds row r's magnitude (code & 7) of k-index c and nibble
  4 + c row r + 8's; bit 3 of nibble n carries the sign of row r's code n / 2 (n even) or row
  r + 8's code (n - 1) / 2 (n odd): the signs land at bits 8c + 3 and 8c + 7, where one logic op
  per 4 weights places them.
- sfb: int32 [.., 2 KB, N]. Plane 0 (rows 0..KB-1): the offsets word of each (k-block, row): bits
  16-31 the offsets e_j = s_j - top + 12 in [1, 12] of its four 32-blocks (nibble j), top the
  largest scale byte of the row's 64-row block in the k-block (one top per block: the
  promotion's factor is one float per 64 weight rows, in either kernel); bits 0-15 the high half
  of the float 2^(top - 133), bit 15 (its sign) set on every row of a 64-row block that takes
  the exact path: the block's scale bytes in the k-block span more than 12 binades, or
  top < 7. Plane
  1 (rows KB..2KB-1): the row's four scale bytes (byte j = block j, 0 past K), which only the
  exact path reads. Inside each 64 rows, row 16 g + 8 h + i sits at column 16 g + 2 i + h (a
  thread's two rows adjacent: one 8-byte load).
Scale bytes of all-zero 32-blocks are moved next to their neighbours' before any of this (no
value changes; fewer exact-path blocks), see _zero_block_scales_rebased.

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

from ..families import for_operands
from ..heuristics import ARCH_ALIASES, SM90, SM100, arch_for
from ..launch import checks

MXFP4_GROUP = 32  # weights per UE8M0 scale byte
NAN_SCALE = 0xFF  # UE8M0's NaN
SM90_ROW_BLOCK = 64  # the prepared layout's row blocks (one math warpgroup's rows)
SM90_K_BLOCK = 128  # ... and k-blocks
PREPARE_CHUNK_BYTES = 1 << 26  # checkpoint code bytes reordered a pass (prepare_mxfp4_weights)
TABLE_TOP_OFFSET = 12  # e = s - top + 12, exact for e in [1, 12]
TABLE_MIN_TOP = 7  # 2^(top - 133) is a normal float from here
EXACT_FLAG = 0x8000
SM90_ARCH = SM90.name
SM100_ARCH = SM100.name
# What the `arch` arguments take: the archs and their aliases (heuristics/arch.py).
MXFP4_ARCH_NAMES = frozenset({SM90_ARCH, SM100_ARCH, *ARCH_ALIASES})


def canonical_arch(name: str) -> str:
    return ARCH_ALIASES.get(name, name)


def mxfp4_forms(arch: str) -> tuple[str, ...]:
    """The weight forms ("raw", "prepared") the FP8 x FP4 kernels of `arch` (a name of
    MXFP4_ARCH_NAMES) take."""
    return for_operands(arch_for(arch), "fp8_fp4").mxfp4_forms


SM100_K_BLOCK = 128  # Kp: K padded to this; scale words hold 4 blocks of 32
SM100_ROW_CHUNK = 128  # Np: N padded to this; the tcgen05.cp order permutes within it
UNIT_SCALE = 127  # UE8M0 1.0


@dataclass(frozen=True, eq=False)  # eq=False: tensors do not compare to a bool
class Mxfp4Weights:
    """MXFP4 weights for the FP8 x FP4 GEMMs. prepared=True: prepare_mxfp4_weights' tensors (module
    doc: codes uint8 [.., N, Kp/2], offsets words int32 [.., 2 KB, N], k the checkpoint K);
    prepared=False: the checkpoint layout, b uint8 [.., N, K/2] and sfb uint8 [.., N, K/32]
    (UE8M0), as a plain (b, sfb) tuple would be."""

    b: torch.Tensor
    sfb: torch.Tensor
    prepared: bool = True
    # The architecture the layout is for: "sm_90a" (the layout above), or "sm_100f" (the SM100
    # one of the module doc: b [.., N, Kp / 2], sfb uint8 [.., Kp / 128, 4 Np]; prepared only).
    arch: str = SM90_ARCH
    # The checkpoint K of SM90-prepared weights (their codes hold Kp); 0: unknown, taken as Kp
    # by unprepare_mxfp4_weights. The GEMMs take K from the activations.
    k: int = 0
    # SM90-prepared weights only: True where no 64-row block takes the exact path (no offsets
    # word carries the flag), which prepare_mxfp4_weights finds; the convert-ahead kernel (large
    # token counts) needs it. False, the safe default, keeps the table kernels. It describes the
    # tensors as prepared: weights written into them later must be prepared again.
    windowed: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.prepared, bool):
            raise TypeError(f"prepared must be a bool, got {type(self.prepared).__name__}")
        if self.arch not in (SM90_ARCH, SM100_ARCH):
            raise ValueError(f"arch must be {SM90_ARCH!r} or {SM100_ARCH!r}, got {self.arch!r}")
        if not self.prepared and "raw" not in mxfp4_forms(self.arch):
            raise ValueError("SM100 weights are prepared weights (prepare_mxfp4_weights)")
        if not isinstance(self.windowed, bool):
            raise TypeError(f"windowed must be a bool, got {type(self.windowed).__name__}")
        if self.windowed and (not self.prepared or self.arch != SM90_ARCH):
            raise ValueError("windowed describes SM90-prepared weights only")


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


def _merge_blocks_view(b: object, sfb: object) -> object:
    """gpt-oss's blocks view [.., N, K/32, 16] of b as [.., N, K/2] (what dequantize_mxfp4 and
    prepare_moe_weights take too); anything else as it is, for _check_pair to judge."""
    if (
        isinstance(b, torch.Tensor)
        and isinstance(sfb, torch.Tensor)
        and b.dim() == sfb.dim() + 1
        and b.dim() >= 3
        and b.shape[-1] == MXFP4_GROUP // 2
    ):
        if tuple(b.shape[:-1]) != tuple(sfb.shape):
            raise ValueError(
                f"b in the blocks layout [.., N, K/32, 16] must be sfb's shape + (16,): b "
                f"{tuple(b.shape)}, sfb {tuple(sfb.shape)}"
            )
        # A view where the two dims merge (the checkpoint's own tensor); else a copy, which
        # prepare makes anyway.
        return b.flatten(-2)
    return b


def _check_gemm_operand(b: torch.Tensor, sfb: torch.Tensor) -> None:
    """What the FP8 x FP4 GEMMs refuse of raw weights beyond the shapes: N a positive multiple
    of 8, and b's rows as their TMA reads them (row-major, 16-byte row strides, groups of
    back-to-back rows). Refused here too, so that preparing never hides what a raw call of the
    same tensors would refuse."""
    n = sfb.shape[-2]
    if n <= 0 or n % 8:
        raise ValueError(f"N (b.shape[-2]) must be a positive multiple of 8, got {n}")
    if b.dim() == 2:
        checks.row_stride("b", b)
    elif b.dim() == 3:
        checks.batched_row_stride("b", b, collapsible=False)
    else:  # more leading dims than the GEMMs take: one contiguous block of rows
        checks.require_contiguous("b", b)


def prepare_mxfp4_weights(b: torch.Tensor, sfb: torch.Tensor, arch: str = "sm_90a") -> Mxfp4Weights:
    """The prepared layout of MXFP4 weights (b uint8 [.., N, K/2], or gpt-oss's blocks view
    [.., N, K/32, 16] of the same bytes; sfb uint8 [.., N, K/32]), for the FP8 x FP4
    functions; one-time, at load time (it allocates, and syncs once to refuse a NaN scale).
    Plain torch: runs on CPU and CUDA tensors alike.

    arch: "sm_90a" (Hopper, the default) or "sm_100f" (alias "sm_100a": Blackwell, the only
    form SM100 takes; the module doc's SM100 layout, Mxfp4Weights.arch "sm_100f").

    Returns Mxfp4Weights(b', sfb', prepared=True) in the layout of the module doc (new
    tensors). Raises ValueError for a scale byte 0xFF (NaN), which would make the block's
    outputs NaN, for N not a positive multiple of 8 (of 64 on SM90), for a b whose rows the
    functions cannot read (not row-major, strides not of 16 bytes, groups not back to back) and
    for shapes the functions do not take.
    """
    if arch not in MXFP4_ARCH_NAMES:
        raise ValueError(f"arch must be one of {sorted(MXFP4_ARCH_NAMES)}, got {arch!r}")
    b, sfb = _check_pair(_merge_blocks_view(b, sfb), sfb)
    _check_gemm_operand(b, sfb)
    if bool((sfb == NAN_SCALE).any()):  # the sync a load-time call may afford
        bad = (sfb == NAN_SCALE).nonzero()[0].tolist()
        raise ValueError(f"sfb holds the NaN scale byte 0xFF (first at index {tuple(bad)})")
    if canonical_arch(arch) == SM100_ARCH:
        return _prepare_sm100(b, sfb)
    return _prepare_sm90(b, sfb)


def _zero_block_scales_rebased(b: torch.Tensor, sfb: torch.Tensor) -> torch.Tensor:
    """sfb with the scale byte of every all-zero 32-block (every code +-0, which any scale leaves
    zero) moved next to its neighbours: the largest byte of its row's other blocks in the same
    128 of K, else of its row, else the median of those row maxima over the rows of its matrix
    (an all-zero row). quantize_mxfp4 gives such blocks byte 0, ~120 binades below the others,
    which would send their 64-row block down the table kernel's exact path; no value changes."""
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


def _fragment_sources() -> tuple[torch.Tensor, torch.Tensor]:
    """For one (64-row, 128-K) block: the flat index (row * 128 + k) of the code whose magnitude
    and whose sign each nibble of the prepared block takes, both [4096 bytes, 2 nibbles] in the
    block's byte order (module doc)."""
    t = torch.arange(128).view(128, 1, 1)
    i = torch.arange(8).view(1, 8, 1)  # word: i = 2 j + q
    n = torch.arange(8).view(1, 1, 8)  # nibble of the word
    row = 16 * (t // 32) + (t % 32) // 4
    k_of = lambda c: 32 * (i // 2) + 16 * (i % 2) + 4 * (t % 4) + c
    mag = torch.where(n < 4, row * 128 + k_of(n % 4), (row + 8) * 128 + k_of(n % 4))
    sign = torch.where(n % 2 == 0, row * 128 + k_of(n // 2), (row + 8) * 128 + k_of(n // 2))

    # [t, i, n] -> bytes at (i / 4) * 2048 + 16 t + 4 (i % 4) + n / 2, nibble n % 2.
    def order(x: torch.Tensor) -> torch.Tensor:
        x = x.view(128, 2, 4, 4, 2).permute(1, 0, 2, 3, 4)  # [i / 4, t, i % 4, byte, nibble]
        return x.reshape(4096, 2)

    return order(mag), order(sign)


def _row_positions() -> torch.Tensor:
    """Column of each of a 64-row block's rows in the offsets words: row 16 g + 8 h + i at
    16 g + 2 i + h."""
    r = torch.arange(SM90_ROW_BLOCK)
    return 16 * (r // 16) + 2 * (r % 8) + (r % 16) // 8


def _prepare_sm90(b: torch.Tensor, sfb: torch.Tensor) -> Mxfp4Weights:
    """The SM90 layout (module doc) of checked (b, sfb)."""
    lead, n, nb = sfb.shape[:-2], sfb.shape[-2], sfb.shape[-1]
    if n % SM90_ROW_BLOCK != 0:
        raise ValueError(
            f"N (b.shape[-2]) must be a multiple of {SM90_ROW_BLOCK} for the prepared layout, "
            f"got {n}; the checkpoint layout (b, sfb) takes any multiple of 8"
        )
    k = nb * MXFP4_GROUP
    num_kb = -(-k // SM90_K_BLOCK)
    kp = num_kb * SM90_K_BLOCK
    sources = tuple(x.to(b.device) for x in _fragment_sources())
    codes = torch.empty(*lead, n, kp // 2, dtype=torch.uint8, device=b.device)
    words = torch.empty(*lead, 2 * num_kb, n, dtype=torch.int32, device=b.device)
    # A few matrices (experts) at a time: the temporaries take ~13 bytes a code byte, so one
    # pass over a DeepSeek-V3 layer's experts would need ~50 GB beside them. Every step works
    # per matrix (the zero blocks' fill reads its own matrix only).
    mats_b, mats_sfb = b.reshape(-1, n, k // 2), sfb.reshape(-1, n, nb)
    mats_codes, mats_words = codes.view(-1, n, kp // 2), words.view(-1, 2 * num_kb, n)
    per_pass = max(1, PREPARE_CHUNK_BYTES // (n * kp // 2))
    for first in range(0, mats_b.shape[0], per_pass):
        part = slice(first, first + per_pass)
        part_sfb = _zero_block_scales_rebased(mats_b[part], mats_sfb[part])
        mats_codes[part] = _sm90_codes(mats_b[part], num_kb, sources)
        mats_words[part] = _offsets_words(part_sfb, n, nb, num_kb)
    # One sync, at load time: whether any block takes the exact path.
    windowed = not bool((words[..., :num_kb, :] & EXACT_FLAG).any())
    return Mxfp4Weights(codes, words, prepared=True, k=k, windowed=windowed)


def _sm90_codes(b: torch.Tensor, num_kb: int, sources: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The prepared codes [M, N, KB * 64] of checkpoint codes b [M, N, K / 2] (module doc)."""
    n, k = b.shape[-2], 2 * b.shape[-1]
    # Codes as one nibble a byte, [M, N / 64, KB, 64 * 128] per block.
    nib = torch.stack((b & 0xF, b >> 4), dim=-1).flatten(-2)  # [M, N, K]
    nib = torch.nn.functional.pad(nib, (0, num_kb * SM90_K_BLOCK - k))
    blocks = nib.unflatten(-2, (n // 64, 64)).unflatten(-1, (num_kb, SM90_K_BLOCK))
    blocks = blocks.transpose(-3, -2).flatten(-2)  # [M, N/64, KB, 8192]
    mag_src, sign_src = sources
    mag = blocks[..., mag_src.flatten()].unflatten(-1, (4096, 2)) & 0x7
    sign = blocks[..., sign_src.flatten()].unflatten(-1, (4096, 2)) & 0x8
    nibbles = mag | sign
    packed = nibbles[..., 0] | (nibbles[..., 1] << 4)  # [M, N/64, KB, 4096]
    return packed.reshape(b.shape[0], n, num_kb * SM90_K_BLOCK // 2)  # k-blocks back to back


def _offsets_words(sfb: torch.Tensor, n: int, nb: int, num_kb: int) -> torch.Tensor:
    """Both planes of the offsets tensor (module doc), int32 [.., 2 KB, N]."""
    s = sfb.to(torch.int32)
    s = torch.nn.functional.pad(s, (0, 4 * num_kb - nb), value=-1).unflatten(-1, (num_kb, 4))
    valid = s >= 0  # [.., N, KB, 4]
    # One top per (64-row block, k-block): the block's largest byte (each k-block holds a
    # 32-block inside K), the smallest valid one deciding the exact path.
    by_block = (n // SM90_ROW_BLOCK, SM90_ROW_BLOCK)
    top = s.amax(-1).unflatten(-2, by_block).amax(-2, keepdim=True)  # [.., N/64, 1, KB]
    low = torch.where(valid, s, 256).amin(-1).unflatten(-2, by_block).amin(-2, keepdim=True)
    exact = (top - low > TABLE_TOP_OFFSET - 1) | (top < TABLE_MIN_TOP)
    top = top.expand(*top.shape[:-2], SM90_ROW_BLOCK, num_kb).flatten(-3, -2)  # [.., N, KB]
    exact = exact.expand(*exact.shape[:-2], SM90_ROW_BLOCK, num_kb).flatten(-3, -2)
    e = torch.where(valid, s - top.unsqueeze(-1) + TABLE_TOP_OFFSET, TABLE_TOP_OFFSET)
    e = e.clamp(1, TABLE_TOP_OFFSET)
    shifts = torch.tensor([16, 20, 24, 28], dtype=torch.int32, device=s.device)
    offsets = (e.long() << shifts).sum(-1)
    scale_half = torch.where(top >= TABLE_MIN_TOP, (top - 6) << 7, 0)
    words = offsets | scale_half | torch.where(exact, EXACT_FLAG, 0)
    byte_shifts = torch.tensor([0, 8, 16, 24], dtype=torch.int32, device=s.device)
    raw = (torch.where(valid, s, 0).long() << byte_shifts).sum(-1)
    planes = torch.cat((words, raw), dim=-1).transpose(-2, -1)  # [.., 2 KB, N]
    cols = planes.unflatten(-1, (n // SM90_ROW_BLOCK, SM90_ROW_BLOCK))
    order = torch.argsort(_row_positions()).to(s.device)  # column c holds row order[c]
    words = cols[..., order].flatten(-2)  # int64 sums of 32-bit fields
    return (((words + 2**31) % 2**32) - 2**31).to(torch.int32).contiguous()


def _unprepare_sm90(weights: Mxfp4Weights) -> tuple[torch.Tensor, torch.Tensor]:
    codes, words = weights.b, weights.sfb
    n, num_kb = codes.shape[-2], codes.shape[-1] // 64
    if codes.shape[-1] % 64 or n % SM90_ROW_BLOCK or tuple(words.shape[-2:]) != (2 * num_kb, n):
        raise ValueError(
            f"prepared weights must be prepare_mxfp4_weights' tensors: codes [.., N, Kp/2] and "
            f"offsets words [.., 2 Kp/128, N], got {tuple(codes.shape)} and {tuple(words.shape)}"
        )
    k = weights.k or num_kb * SM90_K_BLOCK
    lead = codes.shape[:-2]
    packed = codes.reshape(*lead, n // 64, num_kb, 4096)  # in the block byte order
    nibbles = torch.stack((packed & 0xF, packed >> 4), dim=-1).flatten(-2)  # [.., 8192]
    mag_src, sign_src = (x.to(codes.device).flatten() for x in _fragment_sources())
    flat = torch.zeros_like(nibbles)
    flat[..., mag_src] = nibbles & 0x7
    flat[..., sign_src] |= nibbles & 0x8
    nib = flat.unflatten(-1, (64, SM90_K_BLOCK)).transpose(-3, -2)  # [.., N/64, 64, KB, 128]
    nib = nib.reshape(*lead, n, num_kb * SM90_K_BLOCK)[..., :k]
    b = (nib[..., 0::2] | (nib[..., 1::2] << 4)).contiguous()
    raw = words[..., num_kb:, :].unflatten(-1, (n // 64, 64))
    raw = raw[..., _row_positions().to(words.device)].flatten(-2)  # [.., KB, N] row order
    byte = torch.stack([(raw >> (8 * j)) & 0xFF for j in range(4)], dim=-1)  # [.., KB, N, 4]
    sfb = byte.transpose(-3, -2).flatten(-2)[..., : k // MXFP4_GROUP].to(torch.uint8)
    return b, sfb.contiguous()


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
    if not weights.prepared:
        return _check_pair(weights.b, weights.sfb)
    return _unprepare_sm90(weights)


def is_windowed(b: object) -> bool:
    """Whether an FP8 x FP4 call's second operand is windowed prepared weights
    (Mxfp4Weights.windowed)."""
    return isinstance(b, Mxfp4Weights) and b.windowed


def unpack_weights(b: object) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(b, sfb, prepared) of an FP8 x FP4 call's second operand: a (b, sfb) tuple (checkpoint
    layout) or an Mxfp4Weights; TypeError otherwise."""
    if isinstance(b, Mxfp4Weights):
        return b.b, b.sfb, b.prepared
    if not isinstance(b, (tuple, list)) or len(b) != 2:
        raise TypeError(
            f"b must be a tuple (b, sfb) of MXFP4 weights and scales or a moegemm.Mxfp4Weights, "
            f"got {describe_operand(b)}"
        )
    return b[0], b[1], False


def describe_operand(x: object) -> str:
    """What an operand that should be a pair is, for an error message."""
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}"
    return type(x).__name__
