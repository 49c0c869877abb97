"""Configs of the FP8 x FP4 convert-ahead kernel (impls/sm90_fp8_fp4_grouped_gemm.cuh on prepared
weights without a transform ring, pipeline/fp4_convert_ahead.cuh): a converter warpgroup writes
an E4M3 copy of every weight once a call into a workspace, and the FP8 mainloop (two math
warpgroups, m128, SS wgmma on both TMA operands) reads it like FP8 weights, so the conversion of
a weight tile is shared by every token tile of its group.

It needs windowed weights (GemmDesc.windowed: no 64-row block of the prepared layout takes the
table kernels' exact path, whose values the one factor per 64 rows cannot carry) and a workspace
of G x N x Kp bytes plus the ready flags a call (`workspace_bytes`), allocated by the plan's
launch from the caching allocator (graph-safe); it is not offered where that exceeds the
workspace limit (`moegemm.set_workspace_limit`, DEFAULT_WORKSPACE_LIMIT).

The cycle model, fitted on the H100 (2026-12-06, bench_fp8_fp4's sweep on m_indices at 256,
1024 and 4096 rows a group on DeepSeek-V3 L1/L2, gpt-oss L1/L2 and Qwen3-30B L1/L2): the
conversion of the whole call (every group's weights, whatever rows they get) takes
CONVERT_WEIGHTS_PER_CLK a SM and bounds the call below (256 rows a group take that time on
every shape); the mainloop's k-block costs a base plus a share per 64 weight rows of the tile,
and loses CONVERT_SHARE of the conversion's time to it; the call takes the longer of the two,
bounded below by HBM (the family's `streamed`).
"""

from __future__ import annotations

import math

from .arch import ArchSpec
from .config import GemmConfig, GemmDesc, LaunchConfig, Layout, PipelineConfig, StorageConfig
from .sm90_bf16 import PIPELINE_FILL_CYCLES
from .sm90_fp8_fp4_tiles import BARRIER_BYTES, BLOCK_K, MAX_STAGES, MIN_STAGES, SMEM_RESERVE, kib
from .waves import count_tiles, expected_waves

KINDS = ("bf16_gemm_nt", "m_grouped_contiguous", "m_grouped_offsets", "m_grouped_masked")
BLOCK_M = 128  # two math warpgroups
# m128n192 fits the math threads' 224 registers beside the lean converter without spills;
# m128n128 is the fallback where N / 192 leaves a ragged last tile.
BLOCK_N_CHOICES = (128, 192)
# Register stores, or at m128n192 without a fused-layer epilogue (and then preferred) the TMA-store
# epilogue in 64-column boxes, whose BF16 staging tile costs a stage (four stages instead of
# five); m128n128 with it was never measured.
STORE_COLS_CHOICES = (0, 64)
TMA_STORE_BLOCK_N = 192
ROW_BLOCK = 64  # the prepared layout's row blocks: the ready flags and the factors go by them
# The converter's shared memory (Fp4ConvertAhead::kScratchBytes): a transpose slot a warp.
CONVERTER_SCRATCH_BYTES = 4 * 2 * 8 * 144
# The workspace a call may take by default (E4M3 weights, one byte a weight): gpt-oss-120b's
# first layer on one GPU (128 x 5760 x 2880) fits.
DEFAULT_WORKSPACE_LIMIT = 4 << 30
_workspace_limit = DEFAULT_WORKSPACE_LIMIT

CONVERT_WEIGHTS_PER_CLK = 3.0  # per SM, the converter warpgroup beside the mainloop
CONVERT_SHARE = 0.27  # of the conversion's time the mainloop loses to it
KBLOCK_BASE_CYCLES = 420
KBLOCK_CYCLES_PER_ROW_BLOCK = 327  # per 64 weight rows of the tile
TILE_CYCLES = 2200
STORE_CYCLES_PER_KI_OUTPUT = 77  # register stores, per 1024 outputs of a tile
# TMA stores: the mainloop alone ran ~1000 cycles a tile faster with them (H100, 2026-12-06:
# DeepSeek-V3 L1, gpt-oss L1 and Qwen3-30B L2 at 1024 rows a group, DeepSeek-V3 L1 at 4096).
TMA_STORE_CYCLES_PER_KI_OUTPUT = 35


def is_convert_ahead(config: GemmConfig) -> bool:
    """Whether a prepared-weights config is the convert-ahead kernel's (no transform ring)."""
    return not config.layout.swap_ab and config.pipeline.transform_stages == 0


def smem_bytes_for(block_n: int, num_stages: int, store_cols: int) -> int:
    """Per stage: the tokens' E4M3 rows, the weights' E4M3 rows, the tokens' scales and one
    offsets word per weight row (the last two rounded up to 1 KiB); the converter's transpose
    slots; the BF16 staging tile of the TMA-store epilogue; the barriers."""
    stage = BLOCK_M * BLOCK_K + block_n * BLOCK_K + kib(BLOCK_M * 4) + kib(block_n * 4)
    dstage = BLOCK_M * block_n * 2 if store_cols else 0
    return num_stages * (stage + BARRIER_BYTES) + CONVERTER_SCRATCH_BYTES + dstage


def max_stages(block_n: int, store_cols: int, arch: ArchSpec) -> int:
    fixed = smem_bytes_for(block_n, 0, store_cols)
    per_stage = smem_bytes_for(block_n, 1, store_cols) - fixed
    return min(MAX_STAGES, (arch.smem_budget - SMEM_RESERVE - fixed) // per_stage)


def storage_of(block_n: int, store_cols: int) -> StorageConfig:
    """FP8 tokens and the E4M3 copy both in 128-byte swizzled rows (BLOCK_K of K), one offsets
    plane row per k-block, D staged in store_cols-wide boxes of 64 rows."""
    return StorageConfig(
        load_box_a=(BLOCK_K, BLOCK_M),
        load_box_b=(BLOCK_K, block_n),
        swizzle_a=128,
        swizzle_b=128,
        load_box_sfb=(block_n, 1),
        store_box_d=(store_cols, 64) if store_cols else None,
        swizzle_d=2 * store_cols,
    )


def make_config(block_n: int, num_stages: int, store_cols: int = 0) -> GemmConfig:
    num_wg = BLOCK_M // 64
    return GemmConfig(
        layout=Layout(block_m=BLOCK_M, block_n=block_n, block_k=BLOCK_K),
        storage=storage_of(block_n, store_cols),
        pipeline=PipelineConfig(
            num_stages=num_stages,
            smem_bytes=smem_bytes_for(block_n, num_stages, store_cols),
            transform_stages=0,
        ),
        # producer, converter, math warpgroups
        launch=LaunchConfig(num_threads=128 * (2 + num_wg), num_math_warpgroups=num_wg),
    )


def workspace_bytes(desc: GemmDesc) -> tuple[int, int]:
    """(E4M3 copy bytes, ready-flag words) of a call: G x N x Kp bytes, and a flag per
    (group, 64-row block, k-block) plus the converters' claim counter."""
    k_blocks = math.ceil(desc.k / BLOCK_K)
    copy = desc.num_groups * desc.n * k_blocks * BLOCK_K
    return copy, desc.num_groups * k_blocks * (desc.n // ROW_BLOCK) + 1


def workspace_limit() -> int:
    """The most workspace bytes a call may take (launch.device.set_workspace_limit sets it and
    drops the picks made under another)."""
    return _workspace_limit


def set_workspace_limit(nbytes: int) -> None:
    global _workspace_limit
    _workspace_limit = nbytes


def desc_fits(desc: GemmDesc) -> bool:
    """Whether a desc may take the kernel: windowed prepared weights of a supported layout,
    N of whole 64-row blocks, the workspace within the limit."""
    return (
        desc.kind in KINDS
        and desc.weights == "prepared"
        and desc.windowed
        and desc.n % ROW_BLOCK == 0
        and workspace_bytes(desc)[0] <= _workspace_limit
    )


def store_choices(desc: GemmDesc, block_n: int) -> tuple[int, ...]:
    if desc.epilogue == "none" and block_n == TMA_STORE_BLOCK_N:
        return STORE_COLS_CHOICES
    return (0,)


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> list[GemmConfig]:
    if not desc_fits(desc):
        return []
    configs = []
    for block_n in BLOCK_N_CHOICES:
        for store_cols in store_choices(desc, block_n):
            stages = max_stages(block_n, store_cols, arch)
            if stages >= MIN_STAGES:
                configs.append(make_config(block_n, stages, store_cols))
    return configs


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    lay, pipe = config.layout, config.pipeline
    return (
        desc_fits(desc)
        and lay.block_n in BLOCK_N_CHOICES
        and config.store_cols in store_choices(desc, lay.block_n)
        and MIN_STAGES <= pipe.num_stages <= MAX_STAGES
        and pipe.smem_bytes <= arch.smem_budget - SMEM_RESERVE
        and config == make_config(lay.block_n, pipe.num_stages, config.store_cols)
    )


def convert_cycles(desc: GemmDesc, arch: ArchSpec, ctas: float) -> float:
    """The conversion of every group's weights, spread over the CTAs' converter warpgroups (one
    CTA an SM, at most one a tile)."""
    return workspace_bytes(desc)[0] / (min(arch.num_sms, ctas) * CONVERT_WEIGHTS_PER_CLK)


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec, streamed: float) -> float:
    lay = config.layout
    tiles = count_tiles(desc, lay.block_m, lay.block_n)
    if tiles == 0:
        return float(PIPELINE_FILL_CYCLES)
    waves = expected_waves(desc, lay.block_m, lay.block_n, arch.num_sms)
    k_blocks = math.ceil(desc.k / BLOCK_K)
    kblock = KBLOCK_BASE_CYCLES + KBLOCK_CYCLES_PER_ROW_BLOCK * lay.block_n // ROW_BLOCK
    tile = k_blocks * kblock + TILE_CYCLES
    per_ki = (
        STORE_CYCLES_PER_KI_OUTPUT if config.store_cols == 0 else TMA_STORE_CYCLES_PER_KI_OUTPUT
    )
    tile += per_ki * lay.block_m * lay.block_n / 1024
    convert = convert_cycles(desc, arch, max(1.0, tiles))
    mainloop = waves * tile + CONVERT_SHARE * convert
    return max(mainloop, convert, streamed) + PIPELINE_FILL_CYCLES
