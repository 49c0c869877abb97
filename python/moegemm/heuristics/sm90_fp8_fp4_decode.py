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
from .config import GemmConfig, GemmDesc
from .sm90_bf16 import PIPELINE_FILL_CYCLES, TILE_OVERHEAD_CYCLES
from .sm90_fp8_fp4_tiles import BARRIER_BYTES, BLOCK_K, SwappedForm, kib
from .waves import count_tiles, expected_waves

KINDS = ("m_grouped_offsets", "m_grouped_masked")  # the grouped walk, as BF16's swap-AB
TOKEN_CHOICES = (8, 16, 24, 32, 40, 48, 56, 64)  # wgmma N
# The most tokens a config of W math warpgroups holds without spilling: with W of them the math
# threads get what the producer's setmaxnreg.dec leaves in the CTA's pool (232, 232, 152 and 104
# registers), and acc + tmp + column scales grow by 1.25 registers a token (measured with ptxas:
# 4 warpgroups spill from 32 tokens, 3 from 64 with checkpoint weights).
MAX_TOKENS = {1: 64, 2: 64, 3: 56, 4: 24}
EPILOGUE_BYTES = 1024  # the math warpgroups' conversion tables


def smem_bytes_for(block_t: int, block_w: int, num_stages: int) -> int:
    """Per stage: the tokens' E4M3 rows, the packed weights, the tokens' scales and two scale
    words per weight row (each slab rounded up to 1 KiB); then the tables and the barriers."""
    stage = block_t * BLOCK_K + block_w * BLOCK_K // 2 + kib(block_t * 4) + kib(block_w * 8)
    return num_stages * (stage + BARRIER_BYTES) + EPILOGUE_BYTES


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """What the decode kernel computes (desc_legal of the family already checked)."""
    return desc.kind in KINDS and FORM.is_legal(config, arch, TOKEN_CHOICES)


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> list[GemmConfig]:
    """Every decode config for desc's layout: each token count and warpgroup count, with as many
    stages as fit."""
    if desc.kind not in KINDS:
        return []
    return FORM.configs(arch, TOKEN_CHOICES)


# Cycles of one k-block of a CTA, fitted to the H200 at 8..64 tokens and 1..4 warpgroups on
# DeepSeek-V3, gpt-oss and Qwen3 shapes (522b7d6; within ~8% of every measured config):
# 700 + W (610 + 5 (tokens - 8)).
FORM = SwappedForm(
    max_tokens=MAX_TOKENS,
    smem_bytes_for=smem_bytes_for,
    scale_words=False,
    kblock_floor_cycles=700,
    kblock_cycles_per_warpgroup=610,
    kblock_cycles_per_token=5,
)
max_stages = FORM.max_stages
make_config = FORM.make_config
kblock_cycles = FORM.kblock_cycles


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
