"""FP8 x FP4 on SM100 (tcgen05 kind::mxf8f6f4.block_scale): configs, legality, a cycle model.

One kernel template (include/moegemm/impls/sm100_fp8_fp4_grouped_gemm.cuh): one CTA per SM,
256 threads (TMA warp, MMA warp, allocator warp, activation-scale warp, epilogue warpgroup),
MMA M = 128 from one CTA, accumulators double-buffered in tensor memory next to 8 columns of
scales. The weights' side of a tile is always 128 rows (one 128-row chunk of the SM100-prepared
scales). The fused MoE layer's epilogues (SwiGLU, RowScale) run on the offsets and masked
layouts' swapped tiles, as in the BF16 family. Two orientations, as the BF16 family:
- unswapped: 128 token rows on the MMA's M side, the 128 weight rows on N;
- swap-AB: the 128 weight rows on M, block_m tokens (32..128) on N (decode groups are not
  padded to 128 rows). The m-grouped and masked layouts always swap; the dense GEMM compares.

FP4 runs at the FP8 rate. The model charges a tile the slowest of the tensor core, shared
memory and L2 (B counted packed: 64 bytes per row and k-block); only the last tile's epilogue
is exposed (two accumulators). Compiled and statically checked for sm_100f, not run on hardware:
the rates are datasheet-level assumptions. The kernel skeleton's facts (warp roles, tensor memory,
barriers) and the model's rates are the BF16 family's (sm100_bf16).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from . import search
from .arch import ArchSpec
from .config import GemmConfig, GemmDesc, Layout, PipelineConfig, StorageConfig
from .ragged import RAGGED_KINDS
from .sm100_bf16 import (
    ACCUM_STAGES,
    BARRIER_BYTES_PER_STAGE,
    EPILOGUE_WARPGROUPS,
    FIXED_SMEM_BYTES,
    GROUPED_KINDS,
    NUM_THREADS,
    STORE_BYTES_PER_CLK,
    TILE_OVERHEAD_CYCLES,
    TMEM_COLUMNS,
    UMMA_ISSUE_CYCLES,
    UMMA_M,
    problem_cycles,
    ragged_rows_key,
    raise_unsupported,
    rows_seen,
    segment_safe,
    skeleton_config,
    unsupported_operands,
)

BLOCK_K = 128  # one 128-byte swizzle row of E4M3 / unpacked E2M1: four MMAs of K = 32
WEIGHT_ROWS = 128  # the weights' side of every tile
SCALE_COLUMNS = 8  # 4 for each operand's scales of one k-block
SWAP_AB_BLOCK_M = (32, 64, 96, 128)
MIN_STAGES, MAX_STAGES = 3, 10
SCALE_STAGE_BYTES = 1024  # the tokens' and the weights' 128 scale cells, 512 bytes each
KINDS = ("bf16_gemm_nt", *GROUPED_KINDS)
MOE_KINDS = ("m_grouped_offsets", "m_grouped_masked")  # the fused layer's (swapped tiles)
MXFP4_GROUP = 32


def supported(desc: GemmDesc) -> str | None:
    """Why the SM100 FP8 x FP4 kernel cannot compute `desc`, or None when it can."""
    why = unsupported_operands(desc, "fp8_fp4", KINDS)
    if why is not None:
        return why
    if desc.epilogue != "none" and desc.kind not in MOE_KINDS:
        return f"the fused MoE epilogue {desc.epilogue} on {desc.kind}"
    if desc.d_dtype != "bf16" or desc.with_c:
        return f"d_dtype {desc.d_dtype}" + (" with C" if desc.with_c else "")
    return None


def stage_bytes(block_m: int) -> int:
    """One stage: A (block_m x 128 E4M3), W (128 rows x 128 bytes unpacked), the scales."""
    return block_m * BLOCK_K + WEIGHT_ROWS * BLOCK_K + SCALE_STAGE_BYTES


def smem_bytes_for(block_m: int, num_stages: int) -> int:
    """The kernel's Fp8Fp4Gemm::kSmemBytes."""
    return num_stages * (stage_bytes(block_m) + BARRIER_BYTES_PER_STAGE) + FIXED_SMEM_BYTES


def stages_for(block_m: int, arch: ArchSpec) -> int:
    per_stage = stage_bytes(block_m) + BARRIER_BYTES_PER_STAGE
    return min(MAX_STAGES, (arch.smem_budget - FIXED_SMEM_BYTES) // per_stage)


def umma_n(config: GemmConfig) -> int:
    return config.layout.block_m if config.layout.swap_ab else config.layout.block_n


def tmem_columns(config: GemmConfig) -> int:
    """Both FP32 accumulators and the 8 scale columns, as a power of two >= 32."""
    cols = 32
    while cols < ACCUM_STAGES * umma_n(config) + SCALE_COLUMNS:
        cols *= 2
    return cols


def swap_ab_for(desc: GemmDesc) -> tuple[bool, ...]:
    return (True,) if desc.kind in GROUPED_KINDS else (False, True)


def swap_block_m_choices(desc: GemmDesc) -> tuple[int, ...]:
    return segment_safe(desc, SWAP_AB_BLOCK_M)


def storage_of(block_m: int) -> StorageConfig:
    """The kernel's TMA maps: FP8 rows, 4-bit codes, and the scale words of 128 weight rows."""
    return StorageConfig(
        load_box_a=(BLOCK_K, block_m),
        load_box_b=(BLOCK_K, WEIGHT_ROWS),
        swizzle_a=128,
        swizzle_b=128,
        load_box_sfb=(WEIGHT_ROWS, 1),
    )


def make_config(block_m: int, swap_ab: bool, arch: ArchSpec) -> GemmConfig:
    num_stages = stages_for(block_m, arch)
    return skeleton_config(
        Layout(block_m=block_m, block_n=WEIGHT_ROWS, block_k=BLOCK_K, swap_ab=swap_ab),
        storage_of(block_m),
        PipelineConfig(num_stages=num_stages, smem_bytes=smem_bytes_for(block_m, num_stages)),
    )


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> Iterator[GemmConfig]:
    raise_unsupported(supported(desc), arch)
    for swap_ab in swap_ab_for(desc):
        if swap_ab:
            for block_m in swap_block_m_choices(desc):
                yield make_config(block_m, True, arch)
        else:
            yield make_config(UMMA_M, False, arch)


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """Whether the SM100 FP8 x FP4 kernel of `config` computes `desc` on `arch`."""
    if supported(desc) is not None:
        return False
    lay = config.layout
    if lay.swap_ab:
        shape_ok = lay.block_m in swap_block_m_choices(desc)
    else:
        shape_ok = lay.block_m == UMMA_M
    stages = config.pipeline.num_stages
    return (
        shape_ok
        and lay.block_n == WEIGHT_ROWS
        and lay.block_k == BLOCK_K
        and lay.cluster_size == 1
        and lay.stripe_m == 0
        and lay.split_tail == 0
        and config.storage == storage_of(lay.block_m)
        and MIN_STAGES <= stages <= MAX_STAGES
        and config.pipeline.smem_bytes == smem_bytes_for(lay.block_m, stages)
        and config.pipeline.smem_bytes <= arch.smem_budget
        and tmem_columns(config) <= TMEM_COLUMNS
        and config.launch.num_threads == NUM_THREADS
        and config.launch.num_math_warpgroups == EPILOGUE_WARPGROUPS
        and desc.n % 8 == 0
        and desc.k > 0
        and desc.k % MXFP4_GROUP == 0
    )


def _rows_seen(desc: GemmDesc) -> int:
    return rows_seen(desc, 32)


def _tile_cycles(
    config: GemmConfig, desc: GemmDesc, arch: ArchSpec, rows: int, l2_share: float
) -> tuple[float, float]:
    """(mainloop, epilogue) cycles of one tile: the slowest of the tensor core (FP4 at the FP8
    rate), shared memory and L2 (B packed, with its scales); the register stores of its rows."""
    lay = config.layout
    k_padded = math.ceil(desc.k / BLOCK_K) * BLOCK_K
    n_side = umma_n(config)
    k_steps = k_padded // 32
    # FP8 rate: twice the BF16 tensor-core rate per clock.
    mma = k_steps * (2 * UMMA_M * n_side * 32 / (2 * arch.mma_flops_per_clk) + UMMA_ISSUE_CYCLES)
    smem = k_padded * (UMMA_M + n_side) / arch.smem_bytes_per_clk
    l2 = k_padded * (lay.block_m + lay.block_n / 2 + lay.block_n / 32) / l2_share
    epilogue = min(lay.block_m, rows) * lay.block_n * 2 / STORE_BYTES_PER_CLK
    return max(mma, smem, l2) + TILE_OVERHEAD_CYCLES, epilogue


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> float:
    """Cycles of the whole problem on `arch.num_sms` persistent CTAs."""
    return problem_cycles(config, desc, arch, _rows_seen(desc), _tile_cycles)


def select(desc: GemmDesc, arch: ArchSpec) -> GemmConfig:
    return search.select_legal(
        desc, arch, enumerate_configs, is_legal, estimate_cycles, "SM100 FP8 x FP4"
    )


def selection_key(desc: GemmDesc) -> tuple:
    """Descs with equal keys get the same `select` (see sm100_bf16.selection_key)."""
    base = (desc.kind, desc.n, desc.k, desc.num_groups, desc.ab_dtype, desc.d_dtype)
    base += (desc.with_c, desc.epilogue)
    if desc.kind not in RAGGED_KINDS:
        return (*base, _rows_seen(desc))
    return (*base, *ragged_rows_key(desc, enumerate_configs))
