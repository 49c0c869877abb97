"""BF16 on SM90: the kernels' configs (enumeration, legality) and their cycle model.

The model charges each tile the slowest of three pipes (tensor cores, shared memory feeding
wgmma, L2 feeding TMA), adds the epilogue, and multiplies by the number of waves a persistent
grid needs (waves.py): fewer, fuller waves of cheap tiles win. Grouped layouts count their tiles
per group (a group's last m-block is partly empty), which is what makes small groups prefer small
tiles; the packed-offsets and masked layouts take expectations over ragged groups (ragged.py).

Two epilogues: stores from registers (slow, measured ~5 B/clk per SM while the wgmma waits) or
BF16 staged in shared memory and written by TMA stores behind the next tile's mainloop (only the
shared-memory write is exposed, but the staging buffer costs pipeline stages, and a warpgroup
whose rows cross a group boundary falls back to register stores).

Decode layouts (offsets, masked) with few rows per group also get swapped tiles: the expert's
weight rows fill the wgmma's 64-row M side and the group's tokens its N side (8 to 128), so
a tile streams 64 or 128 weight rows without padding the tokens to 64.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterator

from . import search
from .arch import ArchSpec
from .config import (
    DTYPE_BYTES,
    GemmConfig,
    GemmDesc,
    LaunchConfig,
    Layout,
    PipelineConfig,
    StorageConfig,
)
from .ragged import RAGGED_KINDS, expected_rows_per_group, quantile_rows
from .waves import RaggedBlocks, count_tiles, expected_waves

BLOCK_K = 64  # one 128-byte swizzle row of BF16
BLOCK_N_CHOICES = tuple(range(16, 257, 16))
K_GROUPED_BLOCK_N = (64, 128, 192, 256)  # B of the k-grouped kernel loads in 64-wide chunks
CONTIGUOUS_ALIGNMENT = 128  # rows; each m_indices segment starts on a multiple of this
MAX_ACCUM_REGS = 128  # FP32 accumulators per math thread that fit under setmaxnreg 232
MIN_STAGES, MAX_STAGES = 3, 8
# Stages of 48 KB (m128 x n256, m256 x n128) stop at three: on DeepSeek-V3's GEMM1 at 8192
# tokens (K = 7168, skewed groups; tools/profile_moe.py, e8be87e) a fourth made the m128n256
# kernel 27% slower with either epilogue (register stores 9.11 vs 7.22 ms, staged SwiGLU 9.36
# vs 7.35 ms). Not measured for the k-grouped kernel, which keeps its own count.
WIDE_STAGE_BYTES, WIDE_MAX_STAGES = 48 * 1024, 3
BARRIER_BYTES_PER_STAGE = 16
PIPELINE_FILL_CYCLES = 1500  # first TMA round trip before the first wgmma
TILE_OVERHEAD_CYCLES = 300
WGMMA_ISSUE_CYCLES = 8  # fixed cost of one wgmma instruction beyond its tensor-core cycles
# Register-to-global stores, per SM while the math warpgroups wait. With 4-byte stores,
# stage_breakdown.py measured ~5 B/clk on a prefill tile (6-7 us per 64 KB) and a timeline
# probe ~3 B/clk at the end of a one-tile decode kernel. With the 16-byte stores of BF16 out
# without C (d5a9069) that decode tail ran at ~6 B/clk. One figure serves every register-store
# path (also FP32 out, C, and the swapped kernel's 4-byte transposed stores); not re-fitted, the
# quality harness passes with it.
DIRECT_STORE_BYTES_PER_CLK = 6
STMATRIX_BYTES_PER_CLK = 64  # staging writes into shared memory (half the port's peak)
TMA_STORE_SYNC_CYCLES = 400  # two warpgroup barriers, the fence and the issue of the stores
TMA_STORE_COLS = (64, 32, 16)  # box widths: one 128-, 64- or 32-byte swizzle span per row
# 2-CTA clusters sharing an operand by TMA multicast, (cluster_m, cluster_n) = (2, 1) sharing B
# between neighbouring m-blocks or (1, 2) sharing A between neighbouring n-blocks. Both are
# bitwise equal to one CTA per tile on the H200, but as interleaved twins (24 prefill/masked
# cases x 2 configs) single / cluster time was 0.987 for 1x2 and 1.001 for 2x1 in the geometric
# mean, with single cases from 0.89 to 1.22 and no pattern found: the heuristics never enumerate
# them; they stay legal for `config=` (tests and benchmarks force them).
CLUSTER_SHAPES = ((2, 1), (1, 2))
# B sharing needs consecutive m-blocks of one group, which the m_indices layout cannot promise.
CLUSTER_KINDS = {
    "bf16_gemm_nt": CLUSTER_SHAPES,
    "m_grouped_offsets": CLUSTER_SHAPES,
    "m_grouped_masked": CLUSTER_SHAPES,
    "m_grouped_contiguous": ((1, 2),),
}
# The grouped walk (packed offsets, masked) takes a group's tiles in stripes of at most
# WALK_STRIPE_M m-blocks instead of all of its m-blocks per n-block (Layout.stripe_m) where A's
# rows are long, K * element size >= WALK_STRIPE_MIN_ROW_BYTES (K >= 4096 in BF16), and a
# typical group holds more than WALK_STRIPE_M (cluster) m-blocks; with fewer, both walks visit
# the same tiles in the same order. Stripes are balanced (scheduler/stripe_walk.h: 9 m-blocks
# walk as 5 + 4); the whole-group walk stays legal through `config=`.
# Measured as twins of one config (BENCHMARKS.md): 0.4-2.0% slower on three shapes with
# K <= 2048, hence the row-length rule; 1-5% faster on the K >= 4096 anchors in sustained runs;
# in the benchmark's 60 ms bursts 1.001-1.010 in the geometric mean over four runs, single
# cases within the bursts' spread (identical walks read 0.98-1.05).
WALK_STRIPE_M = 8
WALK_STRIPE_MIN_ROW_BYTES = 8192
WALK_KINDS = RAGGED_KINDS
# Swapped operands (decode): the weights fill the wgmma's 64-row M side, 64 per math warpgroup,
# and a tile's tokens (block_m) its N side. Register-store epilogue, BF16 out, no C.
SWAP_AB_KINDS = RAGGED_KINDS
SWAP_AB_BLOCK_M = (8, 16, 32, 48, 64, 96, 128)
SWAP_AB_BLOCK_N = (64, 128)
SWAP_AB_MAX_ROWS = 128  # expected rows per group above which swapped tiles are not enumerated


def walk_stripe_m(desc: GemmDesc, block_m: int, cluster_m: int = 1) -> int:
    """The grouped walk's stripe (Layout.stripe_m) the heuristics choose for `desc` with
    `block_m`-row tiles in clusters of `cluster_m` along M (the walk counts cluster m-blocks):
    WALK_STRIPE_M where rows are long and a typical group holds more than one stripe of them
    (with fewer, both walks visit the same tiles in the same order), else 0; always 0 on other
    layouts."""
    if desc.kind not in WALK_KINDS:
        return 0
    if desc.k * DTYPE_BYTES[desc.ab_dtype] < WALK_STRIPE_MIN_ROW_BYTES:
        return 0
    return WALK_STRIPE_M if walk_rows(desc) > WALK_STRIPE_M * block_m * cluster_m else 0


def walk_rows(desc: GemmDesc) -> int:
    """The rows of a typical group as the walk sees them (a masked group holds at most max_m)."""
    rows = expected_rows_per_group(desc)
    return min(rows, desc.m) if desc.kind == "m_grouped_masked" else rows


def math_warpgroups_for(block_m: int) -> int:
    return 1 if block_m == 64 else 2


def smem_bytes_for(
    block_m: int,
    block_n: int,
    num_stages: int,
    store_cols: int = 0,
    k_grouped: bool = False,
    out_cols: int | None = None,
) -> int:
    """Shared memory of a kernel (its Traits::kSmemBytes): the stage ring plus the TMA-store
    epilogue's staging, one BF16 tile of `out_cols` columns (m-grouped; block_n unless SwiGLU
    halves it) or two 64 x 32 FP32 chunks per warpgroup (k-grouped)."""
    per_stage = (block_m + block_n) * BLOCK_K * 2 + BARRIER_BYTES_PER_STAGE
    if not store_cols:
        staging = 0
    elif k_grouped:
        staging = block_m // 64 * 2 * 64 * store_cols * 4
    else:
        staging = block_m * (block_n if out_cols is None else out_cols) * 2
    return num_stages * per_stage + staging


def out_cols_of(block_n: int, desc: GemmDesc) -> int:
    """D columns a tile writes: half its weight rows under a SwiGLU epilogue (gate/up pairs)."""
    return block_n // 2 if desc.epilogue.startswith("swiglu") else block_n


def tma_store_cols(block_n: int, desc: GemmDesc) -> int:
    """The TMA-store box width (columns) for block_n: FP32 k-grouped chunks are 32 wide (128
    bytes); BF16 takes the widest of 64/32/16 that tiles block_n."""
    if desc.kind == "k_grouped":
        return 32
    out_cols = out_cols_of(block_n, desc)
    return next((cols for cols in TMA_STORE_COLS if out_cols % cols == 0), 0)


def tma_store_possible(desc: GemmDesc) -> bool:
    if desc.kind == "k_grouped":
        return True  # FP32 out, C read from global memory
    moe_ok = desc.epilogue == "none" or desc.kind in WALK_KINDS
    return desc.d_dtype == "bf16" and not desc.with_c and moe_ok


def moe_epilogue_legal(config: GemmConfig, desc: GemmDesc) -> bool:
    """The fused MoE layer's epilogues (GemmDesc.epilogue) store BF16 on the grouped walk
    without clusters, from registers or (unswapped) staged for TMA stores; SwiGLU pairs 8 gate
    with 8 up rows of a 16-row group, and its staged outputs fill whole 16-column blocks."""
    if desc.epilogue == "none":
        return True
    lay = config.layout
    swiglu = desc.epilogue.startswith("swiglu")
    return (
        desc.kind in WALK_KINDS
        and desc.d_dtype == "bf16"
        and not desc.with_c
        and (config.store_cols == 0 or not lay.swap_ab)
        and lay.cluster_size == 1
        and (not swiglu or (lay.block_n % 16 == 0 and desc.n % 16 == 0))
        and (not swiglu or config.store_cols == 0 or lay.block_n % 32 == 0)
    )


def block_m_choices(desc: GemmDesc) -> tuple[int, ...]:
    if desc.kind == "k_grouped":
        return (64, 128)  # one warpgroup per 64 output rows, MN-major A
    if desc.kind == "m_grouped_contiguous":
        return (64, 128)  # must divide the segment alignment
    return (64, 128, 256)


def block_n_choices(desc: GemmDesc) -> tuple[int, ...]:
    return K_GROUPED_BLOCK_N if desc.kind == "k_grouped" else BLOCK_N_CHOICES


def cluster_shapes(desc: GemmDesc, arch: ArchSpec) -> tuple[tuple[int, int], ...]:
    """The (cluster_m, cluster_n) shapes a config of `desc` may have (legal through config=);
    the heuristics enumerate only (1, 1)."""
    if arch.num_sms >= 2:
        return ((1, 1),) + CLUSTER_KINDS.get(desc.kind, ())
    return ((1, 1),)


def storage_of(
    block_m: int, block_n: int, cluster: tuple[int, int], store_cols: int, k_grouped: bool
) -> StorageConfig:
    """The kernel's TMA maps. K-major operands: BLOCK_K boxes of each CTA's share of a tile's
    rows (a cluster multicasts the rest); k-grouped (both operands MN-major): 64-column chunks
    of BLOCK_K rows. D staged in store_cols-wide boxes of 64 rows (BF16, or FP32 k-grouped)."""
    cluster_m, cluster_n = cluster
    if k_grouped:
        box_a = box_b = (64, BLOCK_K)
    else:
        box_a, box_b = (BLOCK_K, block_m // cluster_n), (BLOCK_K, block_n // cluster_m)
    return StorageConfig(
        load_box_a=box_a,
        load_box_b=box_b,
        swizzle_a=128,
        swizzle_b=128,
        store_box_d=(store_cols, 64) if store_cols else None,
        swizzle_d=(4 if k_grouped else 2) * store_cols,
    )


def make_config(
    block_m: int,
    block_n: int,
    num_stages: int,
    arch: ArchSpec,
    store_cols: int = 0,
    k_grouped: bool = False,
    cluster: tuple[int, int] = (1, 1),
    swap_ab: bool = False,
    stripe_m: int = 0,
    out_cols: int | None = None,
) -> GemmConfig:
    num_wg = block_n // 64 if swap_ab else math_warpgroups_for(block_m)
    cluster_m, cluster_n = cluster
    return GemmConfig(
        layout=Layout(
            block_m=block_m,
            block_n=block_n,
            block_k=BLOCK_K,
            swap_ab=swap_ab,
            cluster_m=cluster_m,
            cluster_n=cluster_n,
            stripe_m=stripe_m,
        ),
        storage=storage_of(block_m, block_n, cluster, store_cols, k_grouped),
        pipeline=PipelineConfig(
            num_stages=num_stages,
            smem_bytes=smem_bytes_for(
                block_m, block_n, num_stages, store_cols, k_grouped, out_cols
            ),
        ),
        launch=LaunchConfig(num_threads=128 * (num_wg + 1), num_math_warpgroups=num_wg),
    )


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> Iterator[GemmConfig]:
    """The configs the heuristics rank for `desc`: single-CTA tiles of every legal shape, the
    walk of walk_stripe_m and, for decode, the swapped tiles. All of them pass is_legal."""
    for block_m in block_m_choices(desc):
        num_wg = math_warpgroups_for(block_m)
        atoms_per_wg = block_m // (64 * num_wg)
        for block_n in block_n_choices(desc):
            if atoms_per_wg * block_n // 2 > MAX_ACCUM_REGS:
                continue
            if desc.epilogue.startswith("swiglu") and block_n % 16:
                continue
            store = tma_store_cols(block_n, desc) if tma_store_possible(desc) else 0
            epilogues = (0, store) if store else (0,)
            k_grouped = desc.kind == "k_grouped"
            out_cols = out_cols_of(block_n, desc)
            for store_cols in epilogues:
                per_stage = smem_bytes_for(block_m, block_n, 1)
                staging = smem_bytes_for(block_m, block_n, 0, store_cols, k_grouped, out_cols)
                num_stages = min(max_stages(block_m, block_n, k_grouped),
                                 (arch.smem_budget - staging) // per_stage)  # fmt: skip
                if num_stages < MIN_STAGES:
                    continue
                stripe_m = walk_stripe_m(desc, block_m)
                yield make_config(
                    block_m, block_n, num_stages, arch, store_cols, k_grouped, stripe_m=stripe_m,
                    out_cols=out_cols,
                )  # fmt: skip
    if swap_ab_possible(desc):
        for block_m in SWAP_AB_BLOCK_M:
            for block_n in SWAP_AB_BLOCK_N:
                num_stages = min(
                    MAX_STAGES, arch.smem_budget // smem_bytes_for(block_m, block_n, 1)
                )
                yield make_config(block_m, block_n, num_stages, arch, swap_ab=True)


def max_stages(block_m: int, block_n: int, k_grouped: bool = False) -> int:
    """The most stages enumerated for a tile: WIDE_MAX_STAGES for 48 KB stages (see there)."""
    wide = not k_grouped and (block_m + block_n) * BLOCK_K * 2 >= WIDE_STAGE_BYTES
    return WIDE_MAX_STAGES if wide else MAX_STAGES


def swap_ab_possible(desc: GemmDesc) -> bool:
    """Swapped tiles exist for the decode layouts' BF16 output and pay only for few rows."""
    return (
        desc.kind in SWAP_AB_KINDS
        and desc.d_dtype == "bf16"
        and not desc.with_c
        and expected_rows_per_group(desc) <= SWAP_AB_MAX_ROWS
    )


def _swap_ab_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    lay = config.layout
    num_wg = config.launch.num_math_warpgroups
    return (
        swap_ab_possible(desc)
        and lay.block_k == BLOCK_K
        and lay.block_m in SWAP_AB_BLOCK_M
        and lay.block_n in SWAP_AB_BLOCK_N
        and num_wg == lay.block_n // 64
        and config.launch.num_threads == 128 * (num_wg + 1)
        and lay.cluster_m == 1
        and lay.cluster_n == 1
        and lay.stripe_m == 0
        and config.storage == storage_of(lay.block_m, lay.block_n, (1, 1), 0, False)
        and config.pipeline.num_stages >= MIN_STAGES
        and config.pipeline.smem_bytes
        == smem_bytes_for(lay.block_m, lay.block_n, config.pipeline.num_stages)
        and config.pipeline.smem_bytes <= arch.smem_budget
        and desc.n % 8 == 0
        and desc.k % 8 == 0
        and moe_epilogue_legal(config, desc)
    )


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """Whether a kernel of `config` computes `desc` correctly on `arch`: any config a caller may
    force through `config=`, including clusters and the other walk, which are never enumerated."""
    lay = config.layout
    if lay.split_tail:
        return False
    if lay.swap_ab:
        return _swap_ab_legal(config, desc, arch)
    num_wg = config.launch.num_math_warpgroups
    return (
        lay.block_k == BLOCK_K
        and lay.block_m in block_m_choices(desc)
        and lay.block_n in block_n_choices(desc)
        and num_wg == math_warpgroups_for(lay.block_m)
        and lay.block_m // (64 * num_wg) * lay.block_n // 2 <= MAX_ACCUM_REGS
        and _store_cols_legal(config, desc)
        and config.pipeline.smem_bytes
        == smem_bytes_for(
            lay.block_m,
            lay.block_n,
            config.pipeline.num_stages,
            config.store_cols,
            desc.kind == "k_grouped",
            out_cols_of(lay.block_n, desc),
        )
        and config.pipeline.smem_bytes <= arch.smem_budget
        and config.pipeline.num_stages >= MIN_STAGES
        and config.launch.num_threads == 128 * (num_wg + 1)
        and (lay.cluster_m, lay.cluster_n) in cluster_shapes(desc, arch)
        # Either walk is legal on the grouped-walk layouts; the heuristics enumerate
        # walk_stripe_m's choice.
        and lay.stripe_m in ((0, WALK_STRIPE_M) if desc.kind in WALK_KINDS else (0,))
        and config.storage
        == storage_of(
            lay.block_m,
            lay.block_n,
            (lay.cluster_m, lay.cluster_n),
            config.store_cols,
            desc.kind == "k_grouped",
        )
        and desc.n % 8 == 0
        and (desc.k % 8 == 0 or desc.kind == "k_grouped")
        and (desc.m % 8 == 0 or desc.kind != "k_grouped")
        and moe_epilogue_legal(config, desc)
    )


def _store_cols_legal(config: GemmConfig, desc: GemmDesc) -> bool:
    cols = config.store_cols
    if cols == 0:
        return True  # the boxes: storage_of
    return (
        tma_store_possible(desc)
        and not config.layout.swap_ab
        and cols == tma_store_cols(config.layout.block_n, desc)
    )


def busy_atom_fraction(desc: GemmDesc, block_m: int) -> float:
    """Share of a tile's wgmma work that is issued: a math warpgroup whose rows all lie past a
    group's (or the problem's) last row skips its wgmma in the m-grouped kernel."""
    if desc.kind == "k_grouped":
        return 1.0
    rows = expected_rows_per_group(desc) if desc.kind in RAGGED_KINDS else desc.m
    if rows <= 0:
        return 1.0
    wg_rows = block_m // math_warpgroups_for(block_m)
    return math.ceil(rows / wg_rows) / (math.ceil(rows / block_m) * (block_m // wg_rows))


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> float:
    """Cycles for the whole problem on `arch.num_sms` persistent CTAs."""
    lay = config.layout
    # The k-loop of one tile: K, or for the k-grouped GEMM the expected rows per group (its
    # GemmDesc.k; m and n are the output's).
    k_padded = math.ceil(desc.k / lay.block_k) * lay.block_k
    # CTA tiles: a cluster tile occupies every CTA of the cluster even where a group has an
    # odd m-block (cluster along M) or N an odd n-block count (along N).
    cluster_block_m = lay.block_m * lay.cluster_m
    cluster_block_n = lay.block_n * lay.cluster_n
    num_tiles = count_tiles(desc, cluster_block_m, cluster_block_n) * lay.cluster_size
    if num_tiles == 0:
        return float(PIPELINE_FILL_CYCLES)
    num_ctas = min(num_tiles, arch.num_sms)
    # Count waves of cluster tiles over the clusters that fit on the SMs.
    waves = expected_waves(desc, cluster_block_m, cluster_block_n, arch.num_sms // lay.cluster_size)
    # L2 bandwidth is shared: fewer busy SMs each get a larger share, up to the SM's own port.
    l2_share = min(64.0, arch.l2_bytes_per_clk * arch.num_sms / num_ctas)
    tile_pipes = _swap_ab_tile_pipes if lay.swap_ab else _tile_pipes
    mma, l1, l2_bytes, epilogue = tile_pipes(config, desc, arch, k_padded)
    tile = max(mma, l1, l2_bytes / l2_share) + epilogue + TILE_OVERHEAD_CYCLES
    return waves * tile + PIPELINE_FILL_CYCLES


def _tile_pipes(
    config: GemmConfig, desc: GemmDesc, arch: ArchSpec, k_padded: int
) -> tuple[float, float, float, float]:
    """(tensor-core cycles, shared-memory read cycles, L2 bytes, exposed epilogue cycles) of
    one tile of the unswapped kernels."""
    lay = config.layout
    elem = DTYPE_BYTES[desc.ab_dtype]
    # One wgmma m64 x N x 16 per m64 atom and k16 step; each pays a fixed issue cost on top of
    # its tensor-core time, so two m64 x 128 atoms cost more than one m64 x 256.
    num_atoms = max(1, lay.block_m // 64)
    per_wgmma = 2 * 64 * lay.block_n * 16 / arch.mma_flops_per_clk + WGMMA_ISSUE_CYCLES
    mma = num_atoms * (k_padded // 16) * per_wgmma * busy_atom_fraction(desc, lay.block_m)
    # Every wgmma reads its 64 A rows and all BLOCK_N rows of B from shared memory.
    smem_read = k_padded * (lay.block_m + num_atoms * lay.block_n) * elem
    l1 = smem_read / arch.smem_bytes_per_clk
    # A cluster along M shares each B tile, one along N each A tile: every CTA pulls its share
    # of the shared operand through L2.
    l2_bytes = k_padded * (lay.block_m / lay.cluster_n + lay.block_n / lay.cluster_m) * elem
    return mma, l1, l2_bytes, epilogue_cycles(config, desc)


def _swap_ab_tile_pipes(
    config: GemmConfig, desc: GemmDesc, arch: ArchSpec, k_padded: int
) -> tuple[float, float, float, float]:
    """The same for the swapped kernel: each warpgroup issues wgmma m64 x block_m over its 64
    weight rows; tokens are re-read from shared memory by every warpgroup."""
    lay = config.layout
    k_bytes = k_padded * DTYPE_BYTES[desc.ab_dtype]
    num_wg = lay.block_n // 64
    k_steps = k_bytes // (2 * 16)
    per_wgmma = 2 * 64 * lay.block_m * 16 / arch.mma_flops_per_clk + WGMMA_ISSUE_CYCLES
    mma = num_wg * k_steps * per_wgmma
    l1 = k_bytes * (lay.block_n + num_wg * lay.block_m) / arch.smem_bytes_per_clk
    rows = min(lay.block_m, expected_rows_per_group(desc))
    # Transposed register stores: 4-byte pairs, 16-byte runs per token row.
    epilogue = 2 * rows * lay.block_n * 2 / DIRECT_STORE_BYTES_PER_CLK
    return mma, l1, k_bytes * (lay.block_m + lay.block_n), epilogue


def epilogue_cycles(config: GemmConfig, desc: GemmDesc) -> float:
    """Exposed epilogue cycles of an average tile: what the math warpgroups spend storing."""
    lay = config.layout
    out_bytes = DTYPE_BYTES[desc.d_dtype] * (2 if desc.with_c else 1)
    if desc.kind in RAGGED_KINDS:
        return _grouped_epilogue(
            lay.block_m,
            out_cols_of(lay.block_n, desc),
            config.launch.num_math_warpgroups,
            bool(config.store_cols),
            out_bytes,
            expected_rows_per_group(desc),
        )
    rows = min(lay.block_m, desc.m)
    if not config.store_cols:
        return rows * lay.block_n * out_bytes / DIRECT_STORE_BYTES_PER_CLK
    if desc.kind == "k_grouped":  # FP32 through 8 KB chunks, one barrier each
        chunks = lay.block_m // 64 * lay.block_n // 32
        c_read = rows * lay.block_n * 4 / DIRECT_STORE_BYTES_PER_CLK if desc.with_c else 0
        return rows * lay.block_n * 4 / STMATRIX_BYTES_PER_CLK + 100 * chunks + c_read
    return lay.block_m * lay.block_n * 2 / STMATRIX_BYTES_PER_CLK + TMA_STORE_SYNC_CYCLES


@functools.lru_cache(maxsize=1 << 14)
def _last_blocks(block_m: int, mean: int) -> tuple[tuple[int, int], ...]:
    """(m-blocks, rows in the last block) of the non-empty sample groups of quantile_rows."""
    out = []
    for rows in quantile_rows(mean):
        if rows >= 1:
            m_blocks = math.ceil(rows / block_m)
            out.append((m_blocks, rows - (m_blocks - 1) * block_m))
    return tuple(out)


@functools.lru_cache(maxsize=1 << 16)  # the same tiles and rows recur across layouts and shapes
def _grouped_epilogue(
    block_m: int, block_n: int, num_wg: int, tma: bool, out_bytes: float, mean: int
) -> float:
    """The epilogue of a ragged layout (offsets, masked), per tile on average over the spread of
    a group's rows around the mean (ragged.quantile_rows). A group's full m-blocks store whole
    tiles. In its last m-block, with register stores, the valid rows are stored; with TMA stores
    each math warpgroup decides alone (the kernel's rule): one whose rows are all valid stages
    them in shared memory, one that crosses the group's end stores its valid rows from
    registers, one past the end stores nothing. An empty group has no tile. The masked buffer
    size (max_m) is not read here; ragged.group_m_blocks caps a masked group's rows by it."""
    wg_rows = block_m // num_wg
    direct_row = block_n * out_bytes / DIRECT_STORE_BYTES_PER_CLK
    staged_wg = wg_rows * block_n * 2 / STMATRIX_BYTES_PER_CLK
    full_tile = num_wg * staged_wg + TMA_STORE_SYNC_CYCLES if tma else block_m * direct_row
    tiles = cycles = 0.0
    for m_blocks, left in _last_blocks(block_m, mean):
        if tma:
            full_wgs = left // wg_rows
            last = full_wgs * staged_wg + (left % wg_rows) * direct_row
            last += TMA_STORE_SYNC_CYCLES if full_wgs else 0.0
        else:
            last = left * direct_row
        tiles += m_blocks
        cycles += (m_blocks - 1) * full_tile + last
    return cycles / tiles if tiles else direct_row


# (candidate_key, arch) -> the legal enumerated configs. Bounded by the few keys there are.
_CANDIDATES: dict[tuple, tuple[GemmConfig, ...]] = {}


def candidates(desc: GemmDesc, arch: ArchSpec) -> tuple[GemmConfig, ...]:
    """The legal enumerated configs, in enumeration order, shared by every desc with the same
    candidate_key."""
    return search.memoized_legal_configs(
        _CANDIDATES, candidate_key(desc), desc, arch, enumerate_configs, is_legal
    )


def candidate_key(desc: GemmDesc) -> tuple:
    """What enumerate_configs and is_legal read of `desc`: kind, dtypes, C, whether N, K and M
    are multiples of 8, the walk's stripe per block_m and whether swapped tiles are possible."""
    stripes = tuple(walk_stripe_m(desc, bm) for bm in block_m_choices(desc))
    return (
        desc.kind,
        desc.ab_dtype,
        desc.d_dtype,
        desc.with_c,
        desc.n % 8 == 0,
        desc.k % 8 == 0,
        desc.m % 8 == 0,
        stripes,
        swap_ab_possible(desc),
        desc.epilogue,
    )


def select(desc: GemmDesc, arch: ArchSpec) -> GemmConfig:
    """The cheapest legal config of `desc` by the cycle model."""
    return search.best_config(
        candidates(desc, arch), lambda c: estimate_cycles(c, desc, arch), f"SM90 BF16 {desc}"
    )


def selection_key(desc: GemmDesc) -> tuple:
    """A key such that descs with equal keys get the same `select` on one arch: the fields of
    `desc` with m and expected_m replaced by exactly what the model reads of them.

    - dense, m_indices: ceil(m / block_m) for block_m 64/128/256 (tiles, busy warpgroups) and
      min(block_m, m) (epilogue rows): m itself below 256, else ceil(m / 64) determines both.
    - k-grouped: m, n are the output's; of the rows per group (k) only ceil(k / BLOCK_K) is read.
    - offsets, masked: the rows per group, the walk's rows (walk_rows) and, per block_m of the
      enumerated configs, the waves.RaggedBlocks (capacity cut, wave bound).
    tests/unit/test_warmup_coverage.py checks that no other read of m or expected_m exists.
    """
    base = (desc.kind, desc.n, desc.num_groups, desc.ab_dtype, desc.d_dtype, desc.with_c)
    base += (desc.epilogue,)
    if desc.kind in ("bf16_gemm_nt", "m_grouped_contiguous"):
        rows = ("m", desc.m) if desc.m < 256 else ("m_blocks_64", math.ceil(desc.m / 64))
        return (*base, desc.k, rows)
    if desc.kind == "k_grouped":
        return (*base, desc.m, math.ceil(desc.k / BLOCK_K))
    block_ms = block_m_choices(desc)
    if swap_ab_possible(desc):
        block_ms += SWAP_AB_BLOCK_M
    blocks = tuple(RaggedBlocks.of(desc, bm) for bm in block_ms)
    return (*base, desc.k, expected_rows_per_group(desc), walk_rows(desc), blocks)
