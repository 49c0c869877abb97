"""FP8 x FP4 on SM90: the prefill kernel's configs (enumeration, legality) and its cycle model.

The kernel (the FP8 mainloop on the skeleton): a producer warpgroup streams A (FP8,
1 B per value) and B (packed E2M1, 0.5 B per weight, plus one UE8M0 byte per 32 weights) through
a TMA ring; a transform warpgroup expands each B tile from FP4 to FP8 into a ring of its own
(transform_stages deep); W = block_m / 64 math warpgroups issue SS wgmma at the FP8 rate and
promote their accumulators once per 128 of K.

The model charges each tile the slowest of four pipes: tensor cores (with the per-128-K
promotion), shared memory, L2 feeding TMA (FP4 bytes counted as such) and the transform
warpgroup's conversion, which runs once per B tile whatever block_m is, so tall tiles amortize it
over more rows. Tiles times waves (waves.py, ragged.py as BF16) give the problem's time, bounded
below by HBM streaming every byte once. Nothing is chosen by a threshold: search.py ranks every
legal config by that cost.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from . import search, sm90_fp8_fp4_decode, sm90_fp8_fp4_table
from . import sm90_fp8_fp4_convert_ahead as convert_ahead
from .arch import ArchSpec
from .config import GemmConfig, GemmDesc, LaunchConfig, Layout, PipelineConfig
from .ragged import RAGGED_KINDS, expected_rows_per_group, normal_sf, routed_view, rows_sigma
from .sm90_bf16 import (
    PIPELINE_FILL_CYCLES,
    TILE_OVERHEAD_CYCLES,
    WGMMA_ISSUE_CYCLES,
    busy_atom_fraction,
    epilogue_cycles,
    tma_store_cols,
)
from .sm90_fp8_fp4_table import tma_store_possible
from .sm90_fp8_fp4_tiles import (
    BARRIER_BYTES,
    BLOCK_K,
    SMEM_RESERVE,
    kib,
    stages_that_fit,
    storage_of,
)
from .waves import RaggedBlocks, waves_and_l2_share

# BLOCK_K: one 128-byte swizzle row of FP8 A; one 128-K promotion step (one sfa column).
BLOCK_M_CHOICES = (64, 128)  # one math warpgroup per 64 rows
BLOCK_N_CHOICES = tuple(range(16, 257, 16))  # B's ring slab block_n * 64 B: a multiple of 1 KiB
KINDS = ("bf16_gemm_nt", "m_grouped_contiguous", "m_grouped_offsets", "m_grouped_masked")
TRANSFORM_STAGES = 2
MIN_STAGES, MAX_STAGES = 2, 8
# Shared memory of the kernel (the contract; the lead's codegen asserts the same sum).
A_STAGE_BYTES_PER_ROW = BLOCK_K  # FP8 A: block_m * 128
B_STAGE_BYTES_PER_ROW = BLOCK_K // 2  # packed FP4 B: block_n * 64
TRANSFORM_META_BYTES = 1024  # per transform stage, beside the FP8 B tile (scales, offsets)
TABLE_BYTES = 1024  # the conversion tables
MXFP4_GROUP = 32  # weights per UE8M0 scale byte
FP4_BYTES_PER_WEIGHT = 0.5 + 1 / MXFP4_GROUP  # the code nibble and its share of the scale byte
FP8_RATE = 2  # FP8 wgmma flops per clock relative to BF16 (arch.mma_flops_per_clk)
WGMMA_K = 32  # K of one FP8 wgmma
# FP4 -> FP8 expansion by the transform warpgroup, fitted to the H200 (bench_fp8_fp4 at
# 3d600e7, every tile the heuristics picked there, 1 and 2 math warpgroups alike): a k-block of a
# tile costs a latency floor plus 12 cycles per weight row (10.7 weights a clock), whatever
# block_m; the warpgroup is latency-bound (../shared/FP4_ON_HOPPER.md section 2 counts its
# instructions). The conversion dominates every tile: tall tiles amortize it over more rows,
# wide ones the floor.
CONVERT_WEIGHTS_PER_CLK = 128 / 12
CONVERT_KBLOCK_FLOOR_CYCLES = 600
# Promotion: per 128 of K each math thread folds its temporary accumulators (block_n / 2 per
# thread) into the FP32 ones with the two scales, one FFMA each; a warpgroup's 4 warps sit on
# the 4 schedulers, so a warpgroup spends block_n / 2 issue cycles per k-block.
PROMOTE_CYCLES_PER_ACC = 1.0
# HBM as a whole-chip rate (H200: 4.8 TB/s at ~1.8 GHz under load is ~2.6 KB/clk, of which a
# stream reaches ~90%): a problem moves its unique bytes at least once.
HBM_BYTES_PER_CLK = 2400.0
# The first tile also waits for its B tile's conversion before the first wgmma.
TRANSFORM_FILL_CYCLES = 500


def math_warpgroups_for(block_m: int) -> int:
    return block_m // 64


def smem_bytes_for(block_m: int, block_n: int, num_stages: int, store_cols: int = 0) -> int:
    """Shared memory of a kernel: the TMA ring, the transform ring (FP8 B tiles and their
    metadata), the BF16 staging tile of the TMA-store epilogue, the tables and the barriers."""
    # Per stage: A, packed B, and the k-block's scales (block_m floats, two 32-bit words per
    # weight row), each slab rounded up to 1 KiB.
    scales = kib(block_m * 4) + kib(block_n * 8)
    ring = num_stages * (block_m * A_STAGE_BYTES_PER_ROW + block_n * B_STAGE_BYTES_PER_ROW + scales)
    tring = TRANSFORM_STAGES * (block_n * BLOCK_K + TRANSFORM_META_BYTES)
    dstage = block_m * block_n * 2 if store_cols else 0
    barriers = BARRIER_BYTES * (num_stages + TRANSFORM_STAGES)
    return ring + tring + dstage + TABLE_BYTES + barriers


def smem_limit(arch: ArchSpec) -> int:
    return arch.smem_budget - SMEM_RESERVE


def max_stages(block_m: int, block_n: int, store_cols: int, arch: ArchSpec) -> int:
    """The most TMA stages (up to MAX_STAGES) that fit; below MIN_STAGES the tile does not."""
    return stages_that_fit(
        lambda stages: smem_bytes_for(block_m, block_n, stages, store_cols), arch, MAX_STAGES
    )


def moe_epilogue_legal(config: GemmConfig, desc: GemmDesc) -> bool:
    """The fused MoE layer's epilogues (GemmDesc.epilogue): the grouped walk, register stores
    (every tile of this family pairs whole 16-row gate/up groups)."""
    if desc.epilogue == "none":
        return True
    swiglu = desc.epilogue.startswith("swiglu")
    return (
        desc.kind in ("m_grouped_offsets", "m_grouped_masked")
        and config.store_cols == 0
        and (not swiglu or desc.n % 16 == 0)
    )


def make_config(
    block_m: int, block_n: int, num_stages: int, arch: ArchSpec, store_cols: int = 0
) -> GemmConfig:
    num_wg = math_warpgroups_for(block_m)
    return GemmConfig(
        layout=Layout(block_m=block_m, block_n=block_n, block_k=BLOCK_K),
        storage=storage_of(block_m, block_n, store_cols),
        pipeline=PipelineConfig(
            num_stages=num_stages,
            smem_bytes=smem_bytes_for(block_m, block_n, num_stages, store_cols),
            transform_stages=TRANSFORM_STAGES,
        ),
        launch=LaunchConfig(
            num_threads=128 * (2 + num_wg),  # producer, transform, math warpgroups
            num_math_warpgroups=num_wg,
        ),
    )


# The widest tile whose accumulators and temporary set (block_n / 2 FP32 registers each) fit
# a math thread without spills, by math warpgroups (ptxas, 2026-12-01: 2 warpgroups get 200
# registers and spill from block_n 176; 1 gets 232 and spills from 208).
MAX_BLOCK_N = {1: 192, 2: 160}


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> Iterator[GemmConfig]:
    """Every tile shape with both epilogues (where the TMA store is possible) and as many
    stages as fit; prepared weights take the table kernels' configs (sm90_fp8_fp4_table) only.
    All of them pass is_legal for a legal desc."""
    if desc.weights == "prepared":
        yield from sm90_fp8_fp4_table.enumerate_configs(desc, arch)
        return
    for block_m in BLOCK_M_CHOICES:
        for block_n in BLOCK_N_CHOICES:
            if block_n > MAX_BLOCK_N[math_warpgroups_for(block_m)]:
                continue
            epilogues = (0, tma_store_cols(block_n, desc)) if tma_store_possible(desc) else (0,)
            for store_cols in epilogues:
                num_stages = max_stages(block_m, block_n, store_cols, arch)
                if num_stages >= MIN_STAGES:
                    yield make_config(block_m, block_n, num_stages, arch, store_cols)
    yield from sm90_fp8_fp4_decode.enumerate_configs(desc, arch)


def desc_legal(desc: GemmDesc) -> bool:
    """Problems this family computes: FP8 x FP4 with BF16 out, K a positive multiple of 32, N of
    8, one of the dense and m-grouped layouts."""
    return (
        desc.ab_dtype == "fp8_fp4"
        and desc.kind in KINDS
        and desc.d_dtype == "bf16"
        and not desc.with_c
        and desc.n % 8 == 0
        and desc.k > 0
        and desc.k % MXFP4_GROUP == 0
    )


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """Whether a kernel of `config` computes `desc` on `arch` (what `config=` accepts); swapped
    configs are the decode kernel's (sm90_fp8_fp4_decode); prepared weights take the table
    kernels' configs only (sm90_fp8_fp4_table: decode and prefill)."""
    lay, pipe, launch = config.layout, config.pipeline, config.launch
    num_wg = launch.num_math_warpgroups
    if not moe_epilogue_legal(config, desc):
        return False
    if lay.split_tail and not sm90_fp8_fp4_table.split_tail_legal(config, desc):
        return False
    if desc.weights == "prepared":
        return desc_legal(desc) and sm90_fp8_fp4_table.is_legal(config, desc, arch)
    if lay.swap_ab:
        return desc_legal(desc) and sm90_fp8_fp4_decode.is_legal(config, desc, arch)
    return (
        desc_legal(desc)
        and lay.block_k == BLOCK_K
        and lay.block_m in BLOCK_M_CHOICES
        and lay.block_n in BLOCK_N_CHOICES
        and lay.block_n <= MAX_BLOCK_N.get(num_wg, 0)
        and not lay.swap_ab
        and lay.cluster_m == 1
        and lay.cluster_n == 1
        and lay.stripe_m == 0
        and num_wg == math_warpgroups_for(lay.block_m)
        and launch.num_threads == 128 * (2 + num_wg)
        and pipe.transform_stages == TRANSFORM_STAGES
        and MIN_STAGES <= pipe.num_stages <= MAX_STAGES
        and _store_cols_legal(config, desc)
        and pipe.smem_bytes
        == smem_bytes_for(lay.block_m, lay.block_n, pipe.num_stages, config.store_cols)
        and pipe.smem_bytes <= smem_limit(arch)
        and config.storage.load_box_a == (BLOCK_K, lay.block_m)
        and config.storage.load_box_b == (B_STAGE_BYTES_PER_ROW, lay.block_n)
        and config.storage.swizzle_a == 128
        and config.storage.swizzle_b == 0
        and config.storage.load_box_sfb is None
    )


def _store_cols_legal(config: GemmConfig, desc: GemmDesc) -> bool:
    cols = config.store_cols
    if cols == 0:
        return config.storage.swizzle_d == 0
    return (
        tma_store_possible(desc)
        and cols == tma_store_cols(config.layout.block_n, desc)
        and config.storage.store_box_d == (cols, 64)
        and config.storage.swizzle_d == 2 * cols
    )


def tile_pipes(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> dict[str, float]:
    """Cycles of one tile per pipe: 'mma' (wgmma at the FP8 rate plus promotion), 'smem'
    (shared-memory traffic of the wgmma reads and the transform), 'l2' (bytes through L2 at
    this SM's share, before division: see estimate_cycles), 'convert' (the transform
    warpgroup's FP4 -> FP8 expansion of the tile's B), 'epilogue' (exposed stores)."""
    lay = config.layout
    k_blocks = math.ceil(desc.k / BLOCK_K)
    k_padded = k_blocks * BLOCK_K  # TMA fills the last block's tail with zeros
    num_atoms = lay.block_m // 64
    per_wgmma = (
        2 * 64 * lay.block_n * WGMMA_K / (FP8_RATE * arch.mma_flops_per_clk) + WGMMA_ISSUE_CYCLES
    )
    busy = busy_atom_fraction(desc, lay.block_m)
    wgmma = num_atoms * (k_padded // WGMMA_K) * per_wgmma * busy
    # One warpgroup's promotion is exposed (the other's hides behind its wgmma).
    promote = k_blocks * lay.block_n / 2 * PROMOTE_CYCLES_PER_ACC
    # wgmma reads A and the FP8 B tile per atom; the transform reads FP4 and writes FP8.
    smem = k_padded * (lay.block_m + num_atoms * lay.block_n + 1.5 * lay.block_n)
    # Bytes in global memory: FP8 A and its float32 scales, FP4 B and its UE8M0 scales.
    l2 = lay.block_m * (desc.k + 4 * k_blocks) + lay.block_n * desc.k * FP4_BYTES_PER_WEIGHT
    convert = (
        k_blocks * CONVERT_KBLOCK_FLOOR_CYCLES + lay.block_n * k_padded / CONVERT_WEIGHTS_PER_CLK
    )
    return {
        "mma": wgmma + promote,
        "smem": smem / arch.smem_bytes_per_clk,
        "l2": l2,
        "convert": convert,
        "epilogue": epilogue_cycles(config, desc),
    }


def hbm_bytes(desc: GemmDesc) -> float:
    """Unique bytes a problem moves: every active group's weights and scales once, A and its
    scales once, D once. Reads only what selection_key keeps of the rows."""
    k_blocks = math.ceil(desc.k / BLOCK_K)
    weights = desc.n * desc.k * FP4_BYTES_PER_WEIGHT
    if desc.kind in RAGGED_KINDS:
        mean = expected_rows_per_group(desc)
        if desc.kind == "m_grouped_masked":
            mean = min(mean, desc.m)
        # A group with no rows reads no weights: P(rows >= 1) of ragged.py's spread.
        active = desc.num_groups * normal_sf((0.5 - mean) / rows_sigma(mean))
        rows = desc.num_groups * mean
    else:
        active = desc.num_groups
        rows = desc.m if desc.m < 128 else math.ceil(desc.m / 64) * 64
    return active * weights + rows * (desc.k + 4 * k_blocks + 2 * desc.n)


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> float:
    """Cycles for the whole problem on `arch.num_sms` persistent CTAs (few rows over many groups
    seen as ragged.routed_view: only the groups they reach)."""
    desc = routed_view(desc)
    lay = config.layout
    streamed = hbm_bytes(desc) / HBM_BYTES_PER_CLK
    if desc.weights == "prepared":
        return sm90_fp8_fp4_table.estimate_cycles(config, desc, arch, streamed)
    if lay.swap_ab:
        return sm90_fp8_fp4_decode.estimate_cycles(config, desc, arch, streamed)
    spread = waves_and_l2_share(desc, lay.block_m, lay.block_n, arch)
    if spread is None:
        return float(PIPELINE_FILL_CYCLES)
    waves, l2_share = spread
    p = tile_pipes(config, desc, arch)
    tile = max(p["mma"], p["smem"], p["l2"] / l2_share, p["convert"])
    tile += p["epilogue"] + TILE_OVERHEAD_CYCLES
    return max(waves * tile, streamed) + PIPELINE_FILL_CYCLES + TRANSFORM_FILL_CYCLES


# (candidate_key, arch) -> the legal enumerated configs.
_CANDIDATES: dict[tuple, tuple[GemmConfig, ...]] = {}


def candidate_key(desc: GemmDesc) -> tuple:
    """What enumerate_configs and is_legal read of `desc`."""
    return (
        desc.kind, desc.d_dtype, desc.with_c, desc_legal(desc), desc.epilogue, desc.weights,
        convert_ahead.desc_fits(desc), sm90_fp8_fp4_table.split_tail_offered(desc),
    )  # fmt: skip


def candidates(desc: GemmDesc, arch: ArchSpec) -> tuple[GemmConfig, ...]:
    return search.memoized_legal_configs(
        _CANDIDATES, candidate_key(desc), desc, arch, enumerate_configs, is_legal
    )


def select(desc: GemmDesc, arch: ArchSpec) -> GemmConfig:
    """The cheapest legal config of `desc` by the cycle model."""
    return search.best_config(
        candidates(desc, arch), lambda c: estimate_cycles(c, desc, arch), f"SM90 FP8 x FP4 {desc}"
    )


def selection_key(desc: GemmDesc) -> tuple:
    """Descs with equal keys get the same `select` on one arch: the fields of `desc` with m and
    expected_m replaced by what the model reads of them.

    - dense, m_indices: ceil(m / block_m) for block_m 64/128 (tiles, busy warpgroups),
      min(block_m, m) (epilogue rows) and hbm_bytes' rows: m itself below 128, else
      ceil(m / 64) determines all of them.
    - offsets, masked: the rows per group (epilogue, busy warpgroups, hbm_bytes) and per block_m
      the waves.RaggedBlocks (capacity cut, wave bound), also per token block of the decode
      kernel; a masked group's rows capped by max_m; fewer offsets rows than groups as
      ragged.routed_view sees them.
    """
    desc = routed_view(desc)
    base = (desc.kind, desc.n, desc.k, desc.num_groups, desc.ab_dtype, desc.d_dtype)
    base += (desc.with_c, desc.weights, desc.epilogue, convert_ahead.desc_fits(desc))
    base += (sm90_fp8_fp4_table.split_tail_offered(desc),)
    if desc.kind in RAGGED_KINDS:
        block_ms = (
            sm90_fp8_fp4_table.TOKEN_CHOICES
            if desc.weights == "prepared"
            else BLOCK_M_CHOICES + sm90_fp8_fp4_decode.TOKEN_CHOICES
        )
        blocks = tuple(RaggedBlocks.of(desc, bm) for bm in block_ms)
        mean = expected_rows_per_group(desc)
        cap = min(mean, desc.m) if desc.kind == "m_grouped_masked" else mean
        return (*base, mean, cap, blocks)
    if desc.weights == "prepared":  # token blocks of 8 and up: every m counts
        return (*base, ("m", desc.m))
    rows = ("m", desc.m) if desc.m < 128 else ("m_blocks_64", math.ceil(desc.m / 64))
    return (*base, rows)
