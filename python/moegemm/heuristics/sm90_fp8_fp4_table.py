"""Configs of the FP8 x FP4 kernels on prepared weights (python/moegemm/api/mxfp4_weights.py):

- swapped (decode, `layout.swap_ab`): impls/sm90_fp8_fp4_swap_ab_gemm.cuh with
  mma/sm90_fp4_table_mma.cuh, weights on the wgmma's M side as register operands converted by
  table, 64 weight rows per math warpgroup, tokens (8..160) on N, every layout;
- prefill: impls/sm90_fp8_fp4_grouped_gemm.cuh with pipeline/fp4_table_transform.cuh, one or
  two transform warpgroups converting each k-block's weights by the same table into the E4M3
  tile W = block_m / 64 math warpgroups read with SS wgmma, tokens on M (64 or 128), weight rows
  on N (64 or 128);
- convert-ahead (no transform ring, windowed weights only): sm90_fp8_fp4_convert_ahead.

The cycle models, fitted to the H200: the decode kernel's CTA works through its tile's k-blocks
one at a time, each costing a floor plus a share per math warpgroup (its conversion, wgmma and
promotion, the promotion growing with the tokens); the prefill kernel's k-block costs the
slowest of its tensor cores (with the promotion one warpgroup leaves exposed) and its transform
warpgroup. Both are bounded below by HBM moving the problem's bytes once (the family's
`streamed`)."""

from __future__ import annotations

import math
from dataclasses import replace

from . import sm90_fp8_fp4_convert_ahead as convert_ahead
from .arch import SM90, ArchSpec
from .config import GemmConfig, GemmDesc, LaunchConfig, Layout, PipelineConfig
from .ragged import RAGGED_KINDS, expected_rows_per_group
from .sm90_bf16 import PIPELINE_FILL_CYCLES, tma_store_cols
from .sm90_fp8_fp4_tiles import (
    BARRIER_BYTES,
    BLOCK_K,
    MAX_STAGES,
    MIN_STAGES,
    SMEM_RESERVE,
    SwappedForm,
    kib,
    stages_that_fit,
    storage_of,
)
from .waves import count_tiles, expected_waves, tile_count_spread

KINDS = ("bf16_gemm_nt", "m_grouped_contiguous", "m_grouped_offsets", "m_grouped_masked")
TOKEN_CHOICES = (8, 16, 24, 32, 48, 64, 96, 128, 160)  # wgmma N
# The m_indices layout aligns each group's segment to 128 rows: a token block never straddles
# two groups when it divides 128.
CONTIGUOUS_TOKEN_CHOICES = (8, 16, 32, 64, 128)
# The most tokens a config of W math warpgroups holds without spilling (acc + tmp: one FP32
# register per token, plus two A register sets of 16): the registers each math thread gets
# (232, 232, 152, 104 for W = 1..4) measured with ptxas.
MAX_TOKENS = {1: 160, 2: 160, 3: 64, 4: 16}


# The conversion tables a quad shares (fp4::share_quad_tables): 80 bytes a quad, per warp.
WARP_TABLE_BYTES = 8 * 80


# The relay's ready barrier beside each stage's full and empty ones (RelayRing).
RELAY_BARRIER_BYTES = BARRIER_BYTES // 2


def quad_factors(block_t: int) -> int:
    """Floats a quad's promotion factors take in the relay's row (Fp4TableMma::kQuadFactors):
    its block_t / 4 rounded up to 4, plus 4 where the four quads' loads would share banks."""
    least = (block_t // 4 + 3) // 4 * 4
    return least + 4 if least % 16 == 0 else least


def smem_bytes_for(block_t: int, block_w: int, num_stages: int) -> int:
    """Per stage: the tokens' E4M3 rows, the codes, the relay's promotion factors (a row of four
    quads' factors per math warpgroup) and one offsets word per weight row (the last two slabs
    rounded up to 1 KiB); then the three barriers; then the tables' scratch of each math
    warpgroup."""
    warpgroups = block_w // 64
    stage = (
        block_t * BLOCK_K
        + block_w * BLOCK_K // 2
        + kib(warpgroups * 4 * quad_factors(block_t) * 4)
        + kib(block_w * 4)
    )
    return (
        num_stages * (stage + BARRIER_BYTES + RELAY_BARRIER_BYTES)
        + warpgroups * 4 * WARP_TABLE_BYTES
    )


def token_choices(kind: str) -> tuple[int, ...]:
    return CONTIGUOUS_TOKEN_CHOICES if kind == "m_grouped_contiguous" else TOKEN_CHOICES


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """What the kernels compute (desc_legal of the family already checked): a swapped config is
    the decode kernel's, one without a transform ring the convert-ahead kernel's, any other the
    prefill kernel's."""
    if convert_ahead.is_convert_ahead(config):
        return convert_ahead.is_legal(config, desc, arch)
    if not config.layout.swap_ab:
        return prefill_is_legal(config, desc, arch)
    lay, num_wg = config.layout, config.launch.num_math_warpgroups
    if lay.split_tail:
        return split_tail_legal(config, desc) and is_legal(unsplit(config), desc, arch)
    return (
        desc.kind in KINDS
        and desc.weights == "prepared"
        and FORM.is_legal(config, arch, token_choices(desc.kind))
        and (not paired_k_blocks(lay.block_m, num_wg) or config.pipeline.num_stages >= 4)
    )


# The decode kernel's last wave split along K (Layout.split_tail): at most this many parts a
# tile, on the grouped walk's layouts.
SPLIT_TAIL_PARTS = (2, 3, 4)
SPLIT_TAIL_KINDS = ("m_grouped_offsets", "m_grouped_masked")
# The widest token block whose split build keeps every register (ptxas 13.0: 96 tokens on two
# math warpgroups spill 4 bytes, 160 spill 8; 8..64 on one to four warpgroups none).
SPLIT_TAIL_MAX_TOKENS = 64
# The parts the search offers (3 measured at least as fast as 2 on every problem that split).
SPLIT_TAIL_ENUMERATED = 3


def unsplit(config: GemmConfig) -> GemmConfig:
    """The decode config a split one is built on: whole tiles."""
    return replace(config, layout=replace(config.layout, split_tail=0))


def with_split_tail(config: GemmConfig, parts: int) -> GemmConfig:
    """A decode config with its last wave split into at most `parts` parts a tile (the same
    shared memory: the scheduler's plan word is static, in the 1 KiB SMEM_RESERVE keeps)."""
    return replace(config, layout=replace(config.layout, split_tail=parts))


def split_tail_plan(tiles: int, ctas: int, k_blocks: int, max_parts: int) -> tuple[int, int, int]:
    """(whole rounds, tiles of the split round, parts a tile) as the kernel plans them
    (TailSplitScheduler): the last round's tiles cut into as many parts as idle CTAs allow, at
    most max_parts and k_blocks; (rounds, 0, 1) where nothing splits."""
    rest = tiles % ctas
    parts = min(ctas // rest, max_parts, k_blocks) if rest else 1
    whole = tiles // ctas
    if parts < 2 or whole >= 0xFFFF or rest >= 4096:
        return -(-tiles // ctas), 0, 1
    return whole, rest, parts


def split_tail_units(tiles: int, ctas: int, k_blocks: int, max_parts: int) -> list[list[tuple]]:
    """Each CTA's work in order, as (tile, first k-block, k-blocks, part, parts, slot): the
    walk's rounds (round r's tiles r ctas + (b + r) % ctas), then the split round's unit
    (b + whole) % ctas: part unit // R of tile whole ctas + unit % R, in slot unit."""
    whole, tail, parts = split_tail_plan(tiles, ctas, k_blocks, max_parts)
    work: list[list[tuple]] = [[] for _ in range(ctas)]
    for b in range(ctas):
        for r in range(whole):
            tile = r * ctas + (b + r) % ctas
            if tile < tiles:
                work[b].append((tile, 0, k_blocks, 0, 1, 0))
        unit = (b + whole) % ctas
        if tail and unit < tail * parts:
            part, t = divmod(unit, tail)
            first = part * k_blocks // parts
            count = (part + 1) * k_blocks // parts - first
            work[b].append((whole * ctas + t, first, count, part, parts, unit))
    return work


# The most scratch a split launch takes (families/sm90_fp8_fp4.py split_tail_workspace: a slot
# of FP32 sums a CTA, one CTA an SM).
SPLIT_TAIL_MAX_SCRATCH = SM90.num_sms * SPLIT_TAIL_MAX_TOKENS * 256 * 4


def split_tail_offered(desc: GemmDesc) -> bool:
    """Whether the search offers split configs for `desc` (forced ones are legal regardless):
    the grouped walk's layouts with the plain epilogue only, since a split launch takes a
    transient workspace and the fused layer and expert parallelism promise calls that allocate
    nothing, and only while that workspace is within the limit (set_workspace_limit)."""
    return (
        desc.kind in SPLIT_TAIL_KINDS
        and desc.weights == "prepared"
        and desc.epilogue == "none"
        and SPLIT_TAIL_MAX_SCRATCH <= convert_ahead.workspace_limit()
    )


def split_tail_legal(config: GemmConfig, desc: GemmDesc) -> bool:
    """Whether `config`'s split_tail is one the decode kernel takes for `desc`."""
    return (
        config.layout.split_tail in SPLIT_TAIL_PARTS
        and config.layout.swap_ab
        and config.layout.block_m <= SPLIT_TAIL_MAX_TOKENS
        and desc.weights == "prepared"
        and desc.kind in SPLIT_TAIL_KINDS
    )


def paired_k_blocks(block_t: int, num_wg: int) -> bool:
    """mma/sm90_fp4_table_mma.cuh's kPairedKBlocks: two k-blocks' wgmma in flight per wait while
    the next two are converted, so a math warpgroup holds four stages at once."""
    return num_wg <= 2 and block_t <= 64


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> list[GemmConfig]:
    """Every config for desc's layout: the decode kernel's for each token count and warpgroup
    count, the prefill and convert-ahead kernels' for each tile and epilogue, with as many stages
    as fit."""
    if desc.kind not in KINDS or desc.weights != "prepared":
        return []
    decode = FORM.configs(arch, token_choices(desc.kind))
    if split_tail_offered(desc):
        decode += [
            with_split_tail(c, SPLIT_TAIL_ENUMERATED)
            for c in decode
            if c.layout.block_m <= SPLIT_TAIL_MAX_TOKENS
        ]
    return prefill_configs(desc, arch) + convert_ahead.enumerate_configs(desc, arch) + decode


# The decode kernel on the H200, fitted (2026-12-04: the DeepSeek-V3 L1, gpt-oss L1 and
# Qwen3-30B L2 shapes at 8..4096 rows per group, offsets layout, every decode config whose token
# block holds about the rows and the prefill kernel's configs, timed side by side; the pick is
# within 0.5% of the fastest measured config in the geometric mean, 4.5% at worst; re-checked
# 2026-12-05 after the issue order and the second temporary set: 4.4% rms on 21 configs of
# 8..1024 rows, tools/fp8_fp4_config_sweep.py; the 160-token blocks checked on the H100
# 2026-12-06: on ragged 128..1024 rows and equal groups of 160, 320 and 4096 rows the pick was
# the fastest of the 128- and 160-token blocks and the prefill kernel, within 1%; the model
# spreads a group's rows, so on equal groups of 1024 rows its 160 is 4-5% slower than 128,
# and of 128 rows at K 768 (Qwen3-30B L2) 1.33 x the prefill kernel): a k-block
# costs a floor plus a share per math warpgroup (its conversion, wgmma and promotion, the
# promotion growing with the tokens); a tile adds a fixed cost and its transposed register
# stores, per KiB of outputs.
TILE_CYCLES = 1470
STORE_CYCLES_PER_KI_OUTPUT = 205  # per 1024 outputs of a tile
FORM = SwappedForm(
    max_tokens=MAX_TOKENS,
    smem_bytes_for=smem_bytes_for,
    scale_words=True,
    kblock_floor_cycles=360,
    kblock_cycles_per_warpgroup=205,
    kblock_cycles_per_token=2.6,  # per warpgroup
)
max_stages = FORM.max_stages
make_config = FORM.make_config
kblock_cycles = FORM.kblock_cycles


def decode_waves(desc: GemmDesc, block_t: int, block_w: int, num_sms: int) -> float:
    """Waves of the decode kernel: on ragged layouts the expected token blocks of groups spread
    around the mean (ragged.py). A group past its token block streams its weights again for
    the next one (measured on the H200: 8 rows a group drawn from 6..10 take 1.45x the time of
    8 each with 8-token blocks, as many as the extra blocks). Called with tiles to run."""
    if desc.kind not in RAGGED_KINDS:
        return expected_waves(desc, block_t, block_w, num_sms)
    # Under two waves a tile's time is what an SM with one more tile adds, whole: fewer tiles
    # than SMs take one tile's time, 1.3 waves two (measured on the H100 at one token, 8 of
    # 64 DeepSeek-V3 experts: 128 x 256 tiles 51.9 us, 176 x 192 65.8, 256 x 128 49.5).
    waves = count_tiles(desc, block_t, block_w) / num_sms
    return float(math.ceil(waves)) if waves < 2 else waves


def split_tail_rounds(
    desc: GemmDesc, block_t: int, block_w: int, num_sms: int, k_blocks: int, max_parts: int
) -> tuple[float, float, float]:
    """(rounds unsplit, rounds split, P(a split round)) of the decode kernel's persistent grid,
    expected over the tiles a ragged layout may have (waves.tile_count_spread): T tiles take
    ceil(T / num_sms) rounds of a tile each, whole, since its tiles cost alike whatever their
    rows (measured on the H100: DeepSeek-V3 L1 at 32 rows, 704 tiles in 5.33 waves, took 6
    tiles' time); split, the last round's tiles are cut along K as the kernel plans it
    (split_tail_plan) and that round takes 1 / parts of a tile. Under two waves, and at one row
    a group in the packed layout (spread only to count the groups it reaches:
    ragged.routed_view), the count is too coarse to plan a split on: no split, (1, 1, 0)."""
    expected = count_tiles(desc, block_t, block_w)
    if expected < 2 * num_sms or (
        desc.kind == "m_grouped_offsets" and expected_rows_per_group(desc) <= 1
    ):
        return 1.0, 1.0, 0.0
    whole_rounds = split_rounds = split = 0.0
    for tiles, p in tile_count_spread(desc, block_t, block_w):
        whole, tail, parts = split_tail_plan(tiles, num_sms, k_blocks, max_parts)
        whole_rounds += p * -(-tiles // num_sms)
        split_rounds += p * (whole + (1 / parts if tail else 0))
        split += p * (tail > 0)
    return whole_rounds, split_rounds, split


# What a split tail costs besides its round (H100, 2026-12-07, tools/fp8_fp4_config_sweep.py
# on the DeepSeek-V3 L1/L2 and gpt-oss L1/L2 shapes at 32 rows and DeepSeek-V3 L1 at one row,
# every pick beside its splits in 2 and 3 parts): every call counts its tiles before the first
# and zeroes the tickets (~2.5 us), and a split round adds its parts' own pipeline fill and the
# fixup by the last part (6-8 us; measured with the last part waiting on the others' flags).
SPLIT_CALL_CYCLES = 4500
SPLIT_ROUND_CYCLES = 12500


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec, streamed: float) -> float:
    """Cycles of the whole problem: waves of tiles, each its k-blocks one after another, bounded
    below by `streamed` (HBM moving the problem's bytes once)."""
    lay = config.layout
    if convert_ahead.is_convert_ahead(config):
        return convert_ahead.estimate_cycles(config, desc, arch, streamed)
    if not lay.swap_ab:
        return prefill_estimate_cycles(config, desc, arch, streamed)
    if count_tiles(desc, lay.block_m, lay.block_n) == 0:
        return float(PIPELINE_FILL_CYCLES)
    k_blocks = -(-desc.k // BLOCK_K)
    tile = k_blocks * kblock_cycles(lay.block_m, config.launch.num_math_warpgroups)
    tile += TILE_CYCLES + STORE_CYCLES_PER_KI_OUTPUT * lay.block_m * lay.block_n / 1024
    cycles = decode_waves(desc, lay.block_m, lay.block_n, arch.num_sms) * tile
    if lay.split_tail:
        # The fitted waves, less the share of whole rounds the split round saves.
        whole, split, p = split_tail_rounds(
            desc, lay.block_m, lay.block_n, arch.num_sms, k_blocks, lay.split_tail
        )
        cycles = cycles * split / max(whole, 1.0) + SPLIT_CALL_CYCLES + p * SPLIT_ROUND_CYCLES
    return max(cycles, streamed) + PIPELINE_FILL_CYCLES


# The prefill kernel (tokens on M). Its tile: block_m tokens (one math warpgroup per 64) x
# block_n weight rows (64-row blocks of the prepared layout).
PREFILL_BLOCK_M = (64, 128)
PREFILL_BLOCK_N = (64, 128)
PREFILL_TRANSFORM_STAGES = 3
TRANSFORM_META_BYTES = 1024  # per transform stage: the pass's flags and factors


def prefill_smem_bytes(block_m: int, block_n: int, num_stages: int, store_cols: int) -> int:
    """The TMA ring (tokens, codes, token scales, offsets words per stage), the transform ring
    (E4M3 tiles and their metadata), the transform warps' tables (whole KiB), the BF16 staging
    tile of the TMA-store epilogue and the barriers of both rings."""
    stage = block_m * BLOCK_K + block_n * BLOCK_K // 2 + kib(block_m * 4) + kib(block_n * 4)
    tstage = block_n * BLOCK_K + TRANSFORM_META_BYTES
    tables = kib(transform_warpgroups(block_n) * 4 * WARP_TABLE_BYTES)
    dstage = block_m * block_n * 2 if store_cols else 0
    barriers = BARRIER_BYTES * (num_stages + PREFILL_TRANSFORM_STAGES)
    return num_stages * stage + PREFILL_TRANSFORM_STAGES * tstage + tables + dstage + barriers


def prefill_max_stages(block_m: int, block_n: int, store_cols: int, arch: ArchSpec) -> int:
    return stages_that_fit(
        lambda stages: prefill_smem_bytes(block_m, block_n, stages, store_cols), arch, MAX_STAGES
    )


def make_prefill_config(
    block_m: int, block_n: int, num_stages: int, arch: ArchSpec, store_cols: int = 0
) -> GemmConfig:
    num_wg = block_m // 64
    return GemmConfig(
        layout=Layout(block_m=block_m, block_n=block_n, block_k=BLOCK_K),
        storage=storage_of(block_m, block_n, store_cols, scale_words=True),
        pipeline=PipelineConfig(
            num_stages=num_stages,
            smem_bytes=prefill_smem_bytes(block_m, block_n, num_stages, store_cols),
            transform_stages=PREFILL_TRANSFORM_STAGES,
        ),
        launch=LaunchConfig(
            # producer, transform (two where the 64-row blocks pair up), math warpgroups
            num_threads=128 * (1 + transform_warpgroups(block_n) + num_wg),
            num_math_warpgroups=num_wg,
        ),
    )


def transform_warpgroups(block_n: int) -> int:
    """pipeline/fp4_table_transform.cuh: warpgroup w converts 64-row blocks w, w + 2, .."""
    return 2 if block_n % 128 == 0 else 1


def tma_store_possible(desc: GemmDesc) -> bool:
    """As BF16: the staged epilogue writes BF16 without C (the only output of this family);
    the fused MoE layer's epilogues store from registers. Both FP8 x FP4 mainloops share it."""
    return desc.d_dtype == "bf16" and not desc.with_c and desc.epilogue == "none"


def _prefill_store_cols(block_n: int, desc: GemmDesc) -> tuple[int, ...]:
    """Register stores, and the TMA store where the output allows it."""
    return (0, tma_store_cols(block_n, desc)) if tma_store_possible(desc) else (0,)


def prefill_configs(desc: GemmDesc, arch: ArchSpec) -> list[GemmConfig]:
    configs = []
    for block_m in PREFILL_BLOCK_M:
        for block_n in PREFILL_BLOCK_N:
            for store_cols in _prefill_store_cols(block_n, desc):
                stages = prefill_max_stages(block_m, block_n, store_cols, arch)
                if stages >= MIN_STAGES:
                    configs.append(make_prefill_config(block_m, block_n, stages, arch, store_cols))
    return configs


def prefill_is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    lay, pipe = config.layout, config.pipeline
    return (
        desc.kind in KINDS
        and desc.weights == "prepared"
        and not lay.swap_ab
        and lay.block_m in PREFILL_BLOCK_M
        and lay.block_n in PREFILL_BLOCK_N
        and lay.cluster_m == 1
        and lay.cluster_n == 1
        and lay.stripe_m == 0
        and config.store_cols in _prefill_store_cols(lay.block_n, desc)
        and MIN_STAGES <= pipe.num_stages <= MAX_STAGES
        and pipe.smem_bytes <= arch.smem_budget - SMEM_RESERVE
        and config
        == make_prefill_config(lay.block_m, lay.block_n, pipe.num_stages, arch, config.store_cols)
    )


# The prefill kernel on the H200: a k-block costs a share per math warpgroup (its wgmma and
# promotion, with the issue slots it shares with the transform) and per 64 weight rows (their
# conversion); a tile adds a fixed cost and, with register stores, a cost per KiB of outputs (the
# TMA store drains in the background). Calibrated on the clock the decode kernel's constants
# assume (2026-12-05: the pick timed beside the decode configs on nine problems of 32..1024
# rows per group, tools/fp8_fp4_config_sweep.py; measured / model 0.93..1.04).
PREFILL_KBLOCK_CYCLES_PER_MATH_WG = 250
PREFILL_KBLOCK_CYCLES_PER_WEIGHT_BLOCK = 485
PREFILL_TILE_CYCLES = 2200
PREFILL_STORE_CYCLES_PER_KI_OUTPUT = 77


def prefill_kblock_cycles(block_m: int, block_n: int) -> float:
    return PREFILL_KBLOCK_CYCLES_PER_MATH_WG * (
        block_m // 64
    ) + PREFILL_KBLOCK_CYCLES_PER_WEIGHT_BLOCK * (block_n // 64)


def prefill_estimate_cycles(
    config: GemmConfig, desc: GemmDesc, arch: ArchSpec, streamed: float
) -> float:
    lay = config.layout
    if count_tiles(desc, lay.block_m, lay.block_n) == 0:
        return float(PIPELINE_FILL_CYCLES)
    waves = expected_waves(desc, lay.block_m, lay.block_n, arch.num_sms)
    k_blocks = -(-desc.k // BLOCK_K)
    tile = k_blocks * prefill_kblock_cycles(lay.block_m, lay.block_n) + PREFILL_TILE_CYCLES
    if not config.store_cols:
        tile += PREFILL_STORE_CYCLES_PER_KI_OUTPUT * lay.block_m * lay.block_n / 1024
    return max(waves * tile, streamed) + PIPELINE_FILL_CYCLES
