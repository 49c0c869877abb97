"""The FP8 x FP4 decode kernel's configs (impls/sm90_fp8_fp4_swap_ab_gemm.cuh): weights on the
wgmma's M side as register operands, 64 weight rows per math warpgroup, tokens on N.

The family's enumeration includes them and sm90_fp8_fp4.estimate_cycles prices them here with
a model fitted to the H200 (tools/fp8_fp4_config_sweep.py): a CTA works through its tile's
k-blocks one at a time, each costing a latency floor plus a share per math warpgroup (they take
turns on the SM's issue slots to convert their 64 weight rows and promote), the share growing with
the tokens each promotes. The conversion dominates: the per-k-block time does not depend on N or
K, and HBM is far from saturated."""

from __future__ import annotations

from .arch import ArchSpec
from .config import GemmConfig, GemmDesc, LaunchConfig, Layout, PipelineConfig, StorageConfig
from .sm90_bf16 import PIPELINE_FILL_CYCLES, TILE_OVERHEAD_CYCLES
from .waves import count_tiles, expected_waves

BLOCK_K = 128
KINDS = ("m_grouped_offsets", "m_grouped_masked")  # the grouped walk, as BF16's swap-AB
TOKEN_CHOICES = (8, 16, 24, 32, 40, 48, 56, 64)  # wgmma N
MAX_MATH_WARPGROUPS = 4
# The most tokens a config of W math warpgroups holds without spilling: with W of them the math
# threads get what the producer's setmaxnreg.dec leaves in the CTA's pool (232, 232, 152 and 104
# registers), and acc + tmp + column scales grow by 1.25 registers a token (measured with ptxas:
# 4 warpgroups spill from 32 tokens, 3 from 64 with checkpoint weights).
MAX_TOKENS = {1: 64, 2: 64, 3: 56, 4: 24}
MIN_STAGES, MAX_STAGES = 2, 12
EPILOGUE_BYTES = 1024  # the math warpgroups' conversion tables
BARRIER_BYTES = 16
SMEM_RESERVE = 1024


def _kib(nbytes: int) -> int:
    return -(-nbytes // 1024) * 1024


def smem_bytes_for(block_t: int, block_w: int, num_stages: int) -> int:
    """Per stage: the tokens' E4M3 rows, the packed weights, the tokens' scales and two scale
    words per weight row (each slab rounded up to 1 KiB); then the tables and the barriers."""
    stage = block_t * BLOCK_K + block_w * BLOCK_K // 2 + _kib(block_t * 4) + _kib(block_w * 8)
    return num_stages * (stage + BARRIER_BYTES) + EPILOGUE_BYTES


def max_stages(block_t: int, block_w: int, arch: ArchSpec) -> int:
    fixed = smem_bytes_for(block_t, block_w, 0)
    per_stage = smem_bytes_for(block_t, block_w, 1) - fixed
    return min(MAX_STAGES, (arch.smem_budget - SMEM_RESERVE - fixed) // per_stage)


def make_config(block_t: int, num_wg: int, num_stages: int, arch: ArchSpec) -> GemmConfig:
    block_w = 64 * num_wg
    return GemmConfig(
        layout=Layout(block_m=block_t, block_n=block_w, block_k=BLOCK_K, swap_ab=True),
        storage=StorageConfig(
            load_box_a=(BLOCK_K, block_t),
            load_box_b=(BLOCK_K // 2, block_w),
            swizzle_a=128,
            swizzle_b=0,  # whole 64-byte rows of codes, unswizzled
        ),
        pipeline=PipelineConfig(
            num_stages=num_stages, smem_bytes=smem_bytes_for(block_t, block_w, num_stages)
        ),
        launch=LaunchConfig(num_threads=128 * (1 + num_wg), num_math_warpgroups=num_wg),
    )


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """What the decode kernel computes (desc_legal of the family already checked)."""
    lay, pipe, launch = config.layout, config.pipeline, config.launch
    num_wg = launch.num_math_warpgroups
    return (
        desc.kind in KINDS
        and lay.swap_ab
        and lay.block_k == BLOCK_K
        and lay.block_m in TOKEN_CHOICES
        and 1 <= num_wg <= MAX_MATH_WARPGROUPS
        and lay.block_m <= MAX_TOKENS[num_wg]
        and lay.block_n == 64 * num_wg
        and lay.cluster_m == 1
        and lay.cluster_n == 1
        and lay.stripe_m == 0
        and config.store_cols == 0
        and launch.num_threads == 128 * (1 + num_wg)
        and pipe.transform_stages == 0
        and MIN_STAGES <= pipe.num_stages <= MAX_STAGES
        and pipe.smem_bytes == smem_bytes_for(lay.block_m, lay.block_n, pipe.num_stages)
        and pipe.smem_bytes <= arch.smem_budget - SMEM_RESERVE
        and config.storage == make_config(lay.block_m, num_wg, pipe.num_stages, arch).storage
    )


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> list[GemmConfig]:
    """Every decode config for desc's layout: each token count and warpgroup count, with as many
    stages as fit."""
    if desc.kind not in KINDS:
        return []
    configs = []
    for block_t in TOKEN_CHOICES:
        for num_wg in range(1, MAX_MATH_WARPGROUPS + 1):
            if block_t > MAX_TOKENS[num_wg]:
                continue
            stages = max_stages(block_t, 64 * num_wg, arch)
            if stages >= MIN_STAGES:
                configs.append(make_config(block_t, num_wg, stages, arch))
    return configs


# Cycles of one k-block of a CTA, fitted to the H200 at 8..64 tokens and 1..4 warpgroups on
# DeepSeek-V3, gpt-oss and Qwen3 shapes (522b7d6; within ~8% of every measured config):
# 700 + W (610 + 5 (tokens - 8)).
KBLOCK_FLOOR_CYCLES = 700
KBLOCK_CYCLES_PER_WARPGROUP = 610
KBLOCK_CYCLES_PER_TOKEN = 5


def kblock_cycles(block_t: int, num_wg: int) -> float:
    per_wg = KBLOCK_CYCLES_PER_WARPGROUP + KBLOCK_CYCLES_PER_TOKEN * (block_t - TOKEN_CHOICES[0])
    return KBLOCK_FLOOR_CYCLES + num_wg * per_wg


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec, streamed: float) -> float:
    """Cycles of the whole problem: waves of tiles, each its k-blocks one after another, bounded
    below by `streamed` (HBM moving the problem's bytes once, the family's figure)."""
    lay = config.layout
    if count_tiles(desc, lay.block_m, lay.block_n) == 0:
        return float(PIPELINE_FILL_CYCLES)
    waves = expected_waves(desc, lay.block_m, lay.block_n, arch.num_sms)
    k_blocks = -(-desc.k // BLOCK_K)
    tile = k_blocks * kblock_cycles(lay.block_m, config.launch.num_math_warpgroups)
    return max(waves * (tile + TILE_OVERHEAD_CYCLES), streamed) + PIPELINE_FILL_CYCLES
