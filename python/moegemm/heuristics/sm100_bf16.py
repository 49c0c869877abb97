"""BF16 on SM100 (tcgen05): the kernel's configs (enumeration, legality) and a cycle model.

One kernel template (include/moegemm/impls/sm100_bf16_grouped_gemm.cuh) serves every layout:
one CTA per SM, 256 threads (TMA warp, MMA warp, allocator warp, epilogue warpgroup), MMA
M = 128 from one CTA, accumulators double-buffered in tensor memory. Two orientations:
- unswapped: 128 token rows on the MMA's M side, block_n weight rows (32..256) on its N side;
- swap-AB: the weights' block_n = 128 rows on the M side, block_m tokens (16..256) on N, so a
  decode group's few tokens are not padded to 128 rows.
The m-grouped and masked layouts always take swap-AB (block_n 128) unless C is added (the
transposed epilogue has no functor); the dense GEMM compares both orientations. The fused MoE
layer's epilogues (SwiGLU, RowScale; offsets and masked) run on swapped tiles.

The k-grouped weight gradient has its own kernel (impls/sm100_bf16_k_grouped_gemm.cuh: same
warp roles, both operands MN-major): 128 output rows on the MMA's M side, block_n in 64-wide
chunks (64..256) on its N side, 64 group rows per k-block, FP32 out (+ C); its desc's k is the
expected rows per group.

The model charges a tile the slowest of the tensor core, shared memory feeding it and L2 feeding
TMA; the epilogue of one tile overlaps the next tile's mainloop (two accumulators), so only the
last tile's epilogue is exposed. Waves come from waves.py as on SM90.

These are compiled and statically checked for sm_100f, not run on hardware: the rates below
are datasheet-level assumptions, not measurements.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from . import search
from .arch import SM100, ArchSpec
from .config import (
    DTYPE_BYTES,
    GemmConfig,
    GemmDesc,
    LaunchConfig,
    Layout,
    PipelineConfig,
    StorageConfig,
)
from .ragged import RAGGED_KINDS, expected_rows_per_group
from .sm90_bf16 import CONTIGUOUS_ALIGNMENT
from .waves import RaggedBlocks, waves_and_l2_share

BLOCK_K = 64  # one 128-byte swizzle row of BF16: four MMAs of K = 16
UMMA_M = 128  # cta_group::1, lane i of tensor memory = accumulator row i
NUM_THREADS = 256
EPILOGUE_WARPGROUPS = 1
TMEM_COLUMNS = 512
ACCUM_STAGES = 2
# Unswapped: weight rows on the MMA's N side; swapped: tokens there (a multiple of 16).
BLOCK_N_CHOICES = (32, 64, 96, 128, 160, 192, 224, 256)
SWAP_AB_BLOCK_N = 128
SWAP_AB_BLOCK_M = (16, 32, 48, 64, 96, 128, 192, 256)
# k-grouped: A's and B's columns load in 64-wide chunks (MnMajorChunkLoader).
K_GROUPED_BLOCK_N = (64, 128, 192, 256)
MIN_STAGES, MAX_STAGES = 3, 12
# Shared memory besides the stages: 2 x 2 accumulator barriers (8 B each) and the 16-byte slot
# tcgen05.alloc writes the tensor-memory address to; each stage adds its full and empty barrier.
FIXED_SMEM_BYTES = 2 * ACCUM_STAGES * 8 + 16
BARRIER_BYTES_PER_STAGE = 16
GROUPED_KINDS = ("m_grouped_contiguous", "m_grouped_offsets", "m_grouped_masked")
KINDS = ("bf16_gemm_nt", *GROUPED_KINDS, "k_grouped")
PIPELINE_FILL_CYCLES = 1500
TILE_OVERHEAD_CYCLES = 200
UMMA_ISSUE_CYCLES = 2
# Register stores of the epilogue warpgroup, per SM (an assumption: not measured on SM100).
STORE_BYTES_PER_CLK = 16


def unsupported_operands(desc: GemmDesc, ab_dtype: str, kinds: tuple[str, ...]) -> str | None:
    """Why a kernel of `ab_dtype` operands on `kinds` layouts cannot take desc's operands or
    layout, or None."""
    if desc.ab_dtype != ab_dtype:
        return f"ab_dtype {desc.ab_dtype}"
    if desc.kind not in kinds:
        return f"layout {desc.kind}"
    return None


def supported(desc: GemmDesc) -> str | None:
    """Why the SM100 BF16 kernel cannot compute `desc`, or None when it can."""
    why = unsupported_operands(desc, "bf16", KINDS)
    if why is not None:
        return why
    if desc.epilogue != "none" and (
        desc.kind not in RAGGED_KINDS or desc.d_dtype != "bf16" or desc.with_c
    ):
        return f"the fused MoE epilogue {desc.epilogue} on {desc.kind} ({desc.d_dtype} out)"
    if desc.d_dtype not in ("bf16", "fp32"):
        return f"d_dtype {desc.d_dtype}"
    if desc.kind == "k_grouped" and desc.d_dtype != "fp32":
        return f"k_grouped with {desc.d_dtype} out (weight gradients are FP32)"
    return None


def raise_unsupported(why: str | None, arch: ArchSpec) -> None:
    """ValueError naming `why` (an SM100 family's supported(desc)) unless it is None."""
    if why is not None:
        raise ValueError(f"moegemm has no SM100 kernel for {why} yet (arch {arch.name})")


def smem_bytes_for(block_m: int, block_n: int, num_stages: int) -> int:
    """The kernel's Bf16Gemm::kSmemBytes: stages of A and B slabs with their barriers, the
    accumulator barriers and the tensor-memory address slot."""
    per_stage = (block_m + block_n) * BLOCK_K * 2 + BARRIER_BYTES_PER_STAGE
    return num_stages * per_stage + FIXED_SMEM_BYTES


def stages_for(block_m: int, block_n: int, arch: ArchSpec) -> int:
    per_stage = smem_bytes_for(block_m, block_n, 1) - FIXED_SMEM_BYTES
    return min(MAX_STAGES, (arch.smem_budget - FIXED_SMEM_BYTES) // per_stage)


def tmem_columns(config: GemmConfig) -> int:
    """Tensor-memory columns the kernel allocates: both FP32 accumulators (MMA N each), rounded
    up to a power of two of at least 32."""
    umma_n = config.layout.block_m if config.layout.swap_ab else config.layout.block_n
    cols = 32
    while cols < ACCUM_STAGES * umma_n:
        cols *= 2
    return cols


def swap_ab_for(desc: GemmDesc) -> tuple[bool, ...]:
    """The orientations enumerated for `desc`."""
    if desc.with_c or desc.kind == "k_grouped":
        return (False,)
    if desc.kind in GROUPED_KINDS:
        return (True,)
    return (False, True)


def segment_safe(desc: GemmDesc, block_ms: tuple[int, ...]) -> tuple[int, ...]:
    """The block_ms a tile of desc's layout may have: on m_indices a tile must not straddle two
    aligned segments."""
    if desc.kind == "m_grouped_contiguous":
        return tuple(bm for bm in block_ms if CONTIGUOUS_ALIGNMENT % bm == 0)
    return block_ms


def swap_block_m_choices(desc: GemmDesc) -> tuple[int, ...]:
    return segment_safe(desc, SWAP_AB_BLOCK_M)


def storage_of(block_m: int, block_n: int, k_grouped: bool) -> StorageConfig:
    """The kernel's TMA maps: K-major BLOCK_K boxes of a tile's rows, or (k-grouped, both
    operands MN-major) 64-column chunks of BLOCK_K rows; register stores."""
    if k_grouped:
        return StorageConfig(load_box_a=(64, BLOCK_K), load_box_b=(64, BLOCK_K), swizzle_a=128,
                             swizzle_b=128)  # fmt: skip
    return StorageConfig(load_box_a=(BLOCK_K, block_m), load_box_b=(BLOCK_K, block_n),
                         swizzle_a=128, swizzle_b=128)  # fmt: skip


def make_config(
    block_m: int, block_n: int, swap_ab: bool, arch: ArchSpec, k_grouped: bool = False
) -> GemmConfig:
    num_stages = stages_for(block_m, block_n, arch)
    return skeleton_config(
        Layout(block_m=block_m, block_n=block_n, block_k=BLOCK_K, swap_ab=swap_ab),
        storage_of(block_m, block_n, k_grouped),
        PipelineConfig(
            num_stages=num_stages, smem_bytes=smem_bytes_for(block_m, block_n, num_stages)
        ),
    )


def skeleton_config(layout: Layout, storage: StorageConfig, pipeline: PipelineConfig) -> GemmConfig:
    """A config of the SM100 kernel skeleton, whose threads are the same for every tile."""
    return GemmConfig(
        layout=layout,
        storage=storage,
        pipeline=pipeline,
        launch=LaunchConfig(num_threads=NUM_THREADS, num_math_warpgroups=EPILOGUE_WARPGROUPS),
    )


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> Iterator[GemmConfig]:
    raise_unsupported(supported(desc), arch)
    for swap_ab in swap_ab_for(desc):
        if swap_ab:
            for block_m in swap_block_m_choices(desc):
                yield make_config(block_m, SWAP_AB_BLOCK_N, True, arch)
        else:
            for block_n in block_n_choices(desc):
                yield make_config(UMMA_M, block_n, False, arch, desc.kind == "k_grouped")


def block_n_choices(desc: GemmDesc) -> tuple[int, ...]:
    """Unswapped block_n choices: the k-grouped kernel loads B's columns in 64-wide chunks."""
    return K_GROUPED_BLOCK_N if desc.kind == "k_grouped" else BLOCK_N_CHOICES


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """Whether the SM100 BF16 kernel of `config` computes `desc` on `arch`."""
    if supported(desc) is not None:
        return False
    lay = config.layout
    if lay.swap_ab:
        shape_ok = (
            lay.block_n == SWAP_AB_BLOCK_N
            and lay.block_m in swap_block_m_choices(desc)
            and not desc.with_c
            and desc.kind != "k_grouped"  # its kernel has one orientation
        )
    else:
        shape_ok = lay.block_m == UMMA_M and lay.block_n in block_n_choices(desc)
    # k-grouped: k is the rows per group (any count), m the output's rows (A's columns).
    k_grouped = desc.kind == "k_grouped"
    stages = config.pipeline.num_stages
    return (
        shape_ok
        and lay.block_k == BLOCK_K
        and lay.cluster_size == 1
        and lay.stripe_m == 0
        and lay.split_tail == 0
        and config.storage == storage_of(lay.block_m, lay.block_n, k_grouped)
        and MIN_STAGES <= stages <= MAX_STAGES
        and config.pipeline.smem_bytes == smem_bytes_for(lay.block_m, lay.block_n, stages)
        and config.pipeline.smem_bytes <= arch.smem_budget
        and tmem_columns(config) <= TMEM_COLUMNS
        and config.launch.num_threads == NUM_THREADS
        and config.launch.num_math_warpgroups == EPILOGUE_WARPGROUPS
        and desc.n % 8 == 0
        and (desc.k % 8 == 0 or k_grouped)
        and (desc.m % 8 == 0 or not k_grouped)
        # The fused MoE layer's epilogues run on swapped tiles; SwiGLU pairs rows in 16s.
        and (desc.epilogue == "none" or lay.swap_ab)
        and (not desc.epilogue.startswith("swiglu") or desc.n % 16 == 0)
    )


def rows_seen(desc: GemmDesc, multiple: int) -> int:
    """The rows an SM100 model reads: the typical group's rows (ragged), else m rounded up to
    `multiple`, which every block_m of the family divides (so tile counts are unchanged)."""
    if desc.kind in RAGGED_KINDS:
        return expected_rows_per_group(desc)
    return math.ceil(desc.m / multiple) * multiple


def _rows_seen(desc: GemmDesc) -> int:
    return rows_seen(desc, 16)


def _tile_cycles(
    config: GemmConfig, desc: GemmDesc, arch: ArchSpec, rows: int, l2_share: float
) -> tuple[float, float]:
    """(mainloop, epilogue) cycles of one tile: the slowest of the tensor core, shared memory
    and L2 over its k-blocks; the register stores of its rows (and C's reads)."""
    lay = config.layout
    k_padded = math.ceil(desc.k / BLOCK_K) * BLOCK_K
    umma_n = lay.block_m if lay.swap_ab else lay.block_n
    elem = DTYPE_BYTES[desc.ab_dtype]
    k_steps = k_padded // 16
    mma = k_steps * (2 * UMMA_M * umma_n * 16 / arch.mma_flops_per_clk + UMMA_ISSUE_CYCLES)
    smem = k_padded * (UMMA_M + umma_n) * elem / arch.smem_bytes_per_clk
    l2 = k_padded * (lay.block_m + lay.block_n) * elem / l2_share
    stored_rows = min(lay.block_m, rows)
    out_bytes = DTYPE_BYTES[desc.d_dtype] * (2 if desc.with_c else 1)
    epilogue = stored_rows * lay.block_n * out_bytes / STORE_BYTES_PER_CLK
    return max(mma, smem, l2) + TILE_OVERHEAD_CYCLES, epilogue


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> float:
    """Cycles of the whole problem on `arch.num_sms` persistent CTAs."""
    return problem_cycles(config, desc, arch, _rows_seen(desc), _tile_cycles)


def problem_cycles(
    config: GemmConfig,
    desc: GemmDesc,
    arch: ArchSpec,
    rows: int,
    tile_cycles: Callable[[GemmConfig, GemmDesc, ArchSpec, int, float], tuple[float, float]],
) -> float:
    """Cycles of the whole problem on `arch.num_sms` persistent CTAs from a family's
    tile_cycles(config, desc, arch, rows, l2_share): (mainloop, epilogue) of one tile; `rows`
    is the family's rows_seen and counts a balanced layout's tiles."""
    lay = config.layout
    model_desc = desc if desc.kind in RAGGED_KINDS else _with_rows(desc, rows)
    spread = waves_and_l2_share(model_desc, lay.block_m, lay.block_n, arch)
    if spread is None:
        return float(PIPELINE_FILL_CYCLES)
    waves, l2_share = spread
    mainloop, epilogue = tile_cycles(config, desc, arch, rows, l2_share)
    # Two accumulators: a tile's epilogue hides behind the next tile's mainloop.
    return waves * max(mainloop, epilogue) + epilogue + PIPELINE_FILL_CYCLES


def _with_rows(desc: GemmDesc, m: int) -> GemmDesc:
    return GemmDesc(
        desc.kind, m, desc.n, desc.k, desc.num_groups, desc.ab_dtype, desc.d_dtype, desc.with_c
    )


def select(desc: GemmDesc, arch: ArchSpec) -> GemmConfig:
    return search.select_legal(
        desc, arch, enumerate_configs, is_legal, estimate_cycles, "SM100 BF16"
    )


def selection_key(desc: GemmDesc) -> tuple:
    """Descs with equal keys get the same `select`: the desc without its rows, and the rows as
    the model reads them (dense, m_indices: m rounded up to 16; ragged: the typical group's rows
    and the wave model's RaggedBlocks per block_m; k-grouped: the output's m and the k-blocks of
    the expected rows per group)."""
    base = (desc.kind, desc.n, desc.num_groups, desc.ab_dtype, desc.d_dtype)
    base += (desc.with_c, desc.epilogue)
    if desc.kind == "k_grouped":  # m is the output's; of the rows per group only k-blocks count
        return (*base, desc.m, math.ceil(desc.k / BLOCK_K))
    base += (desc.k,)
    if desc.kind not in RAGGED_KINDS:
        return (*base, _rows_seen(desc))
    return (*base, *ragged_rows_key(desc, enumerate_configs))


def ragged_rows_key(desc: GemmDesc, enumerate_configs: search.Enumerate) -> tuple:
    """What an SM100 model reads of a ragged layout's rows: the typical group's rows and the
    wave model's RaggedBlocks per block_m that `enumerate_configs` yields."""
    # The block_m choices do not depend on the arch's numbers.
    block_ms = {c.layout.block_m for c in enumerate_configs(desc, SM100)}
    blocks = tuple(RaggedBlocks.of(desc, bm) for bm in sorted(block_ms))
    return (expected_rows_per_group(desc), blocks)
