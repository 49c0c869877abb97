"""Configs of the FP8 x FP4 kernel on prepared weights (impls/sm90_fp8_fp4_swap_ab_gemm.cuh with
prepared weights, mma/sm90_fp4_table_mma.cuh): weights on the wgmma's M side as register operands
converted by table, 64 weight rows per math warpgroup, tokens (8..128) on N, every layout.

The cycle model: a CTA works through its tile's k-blocks; a k-block costs the most of
- the conversion of its W x 64 x 128 weights at the SM's table-conversion rate, plus the
  promotion of its accumulators,
- the tensor cores' 4 W wgmma of m64 x tokens x 32,
- one warpgroup's chain (wgmma latency, promotion), which the other warpgroups hide,
and the problem is bounded below by HBM moving its bytes once (the family's `streamed`)."""

from __future__ import annotations

from .arch import ArchSpec
from .config import GemmConfig, GemmDesc, LaunchConfig, Layout, PipelineConfig, StorageConfig
from .sm90_bf16 import PIPELINE_FILL_CYCLES, TILE_OVERHEAD_CYCLES
from .waves import count_tiles, expected_waves

BLOCK_K = 128
KINDS = ("bf16_gemm_nt", "m_grouped_contiguous", "m_grouped_offsets", "m_grouped_masked")
TOKEN_CHOICES = (8, 16, 24, 32, 48, 64, 96, 128)  # wgmma N
# The m_indices layout aligns each group's segment to 128 rows: a token block never straddles
# two groups when it divides 128.
CONTIGUOUS_TOKEN_CHOICES = (8, 16, 32, 64, 128)
MAX_MATH_WARPGROUPS = 4
# The most tokens a config of W math warpgroups holds without spilling (acc + tmp: one FP32
# register per token, plus two A register sets of 16): the registers each math thread gets
# (232, 232, 152, 104 for W = 1..4) measured with ptxas.
MAX_TOKENS = {1: 128, 2: 128, 3: 64, 4: 32}
MIN_STAGES, MAX_STAGES = 2, 12
BARRIER_BYTES = 16
SMEM_RESERVE = 1024


def _kib(nbytes: int) -> int:
    return -(-nbytes // 1024) * 1024


def smem_bytes_for(block_t: int, block_w: int, num_stages: int) -> int:
    """Per stage: the tokens' E4M3 rows, the codes, the tokens' scales and one offsets word per
    weight row (the last two slabs rounded up to 1 KiB); then the barriers."""
    stage = block_t * BLOCK_K + block_w * BLOCK_K // 2 + _kib(block_t * 4) + _kib(block_w * 4)
    return num_stages * (stage + BARRIER_BYTES)


def max_stages(block_t: int, block_w: int, arch: ArchSpec) -> int:
    per_stage = smem_bytes_for(block_t, block_w, 1)
    return min(MAX_STAGES, (arch.smem_budget - SMEM_RESERVE) // per_stage)


def make_config(block_t: int, num_wg: int, num_stages: int, arch: ArchSpec) -> GemmConfig:
    block_w = 64 * num_wg
    return GemmConfig(
        layout=Layout(block_m=block_t, block_n=block_w, block_k=BLOCK_K, swap_ab=True),
        storage=StorageConfig(
            load_box_a=(BLOCK_K, block_t),
            load_box_b=(BLOCK_K // 2, block_w),
            swizzle_a=128,
            swizzle_b=BLOCK_K // 2,
        ),
        pipeline=PipelineConfig(
            num_stages=num_stages, smem_bytes=smem_bytes_for(block_t, block_w, num_stages)
        ),
        launch=LaunchConfig(
            num_sms=arch.num_sms, num_threads=128 * (1 + num_wg), num_math_warpgroups=num_wg
        ),
    )


def token_choices(kind: str) -> tuple[int, ...]:
    return CONTIGUOUS_TOKEN_CHOICES if kind == "m_grouped_contiguous" else TOKEN_CHOICES


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """What the kernel computes (desc_legal of the family already checked)."""
    lay, pipe, launch = config.layout, config.pipeline, config.launch
    num_wg = launch.num_math_warpgroups
    return (
        desc.kind in KINDS
        and desc.weights == "prepared"
        and lay.swap_ab
        and lay.block_k == BLOCK_K
        and lay.block_m in token_choices(desc.kind)
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
    """Every config for desc's layout: each token count and warpgroup count, with as many
    stages as fit."""
    if desc.kind not in KINDS or desc.weights != "prepared":
        return []
    configs = []
    for block_t in token_choices(desc.kind):
        for num_wg in range(1, MAX_MATH_WARPGROUPS + 1):
            if block_t > MAX_TOKENS[num_wg]:
                continue
            stages = max_stages(block_t, 64 * num_wg, arch)
            if stages >= MIN_STAGES:
                configs.append(make_config(block_t, num_wg, stages, arch))
    return configs


# The k-block model (cycles of one CTA), see the module doc.
CONVERT_WEIGHTS_PER_CLK = {1: 30.0, 2: 40.0, 3: 44.0, 4: 46.0}  # by math warpgroups
MMA_MACS_PER_CLK = 4096.0  # dense FP8 wgmma, one SM
CHAIN_CYCLES = 420.0  # one warpgroup's k-block: wgmma latency + promotion, not overlapped
CHAIN_CYCLES_PER_TOKEN = 2.0


def kblock_cycles(block_t: int, num_wg: int) -> float:
    # The conversion and the promotion share the issue slots: a warpgroup's promotion costs
    # its 4 warps one FMUL and one FFMA per accumulator (block_t / 2 of them a thread).
    convert = num_wg * (64 * BLOCK_K / CONVERT_WEIGHTS_PER_CLK[num_wg] + block_t)
    mma = num_wg * 64 * block_t * BLOCK_K / MMA_MACS_PER_CLK
    chain = CHAIN_CYCLES + CHAIN_CYCLES_PER_TOKEN * block_t
    return max(convert, mma, chain)


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec, streamed: float) -> float:
    """Cycles of the whole problem: waves of tiles, each its k-blocks one after another, bounded
    below by `streamed` (HBM moving the problem's bytes once)."""
    lay = config.layout
    if count_tiles(desc, lay.block_m, lay.block_n) == 0:
        return float(PIPELINE_FILL_CYCLES)
    waves = expected_waves(desc, lay.block_m, lay.block_n, arch.num_sms)
    k_blocks = -(-desc.k // BLOCK_K)
    tile = k_blocks * kblock_cycles(lay.block_m, config.launch.num_math_warpgroups)
    return max(waves * (tile + TILE_OVERHEAD_CYCLES), streamed) + PIPELINE_FILL_CYCLES
