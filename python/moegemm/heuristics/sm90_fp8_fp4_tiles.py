"""What the SM90 FP8 x FP4 kernels' configs share: the k-block, the TMA maps of FP8 tokens and
packed FP4 codes, the shared-memory rounding and budget, and the rules of the swapped kernel
(impls/sm90_fp8_fp4_swap_ab_gemm.cuh), whose two weight forms, raw (sm90_fp8_fp4_decode) and
prepared (sm90_fp8_fp4_table), differ only in their token blocks, their register limits, their
shared memory and their scale words."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .arch import ArchSpec
from .config import GemmConfig, LaunchConfig, Layout, PipelineConfig, StorageConfig

BLOCK_K = 128  # one 128-byte swizzle row of FP8 tokens; 64 bytes of packed codes
SMEM_RESERVE = 1024  # kept free of the opt-in budget (the kernels align their carve-up to 1 KiB)
BARRIER_BYTES = 16  # per stage of a ring
# A prepared 64-row block's codes of one k-block: 4096 contiguous bytes, as TMA rows of 256.
PREPARED_ROW_BYTES, PREPARED_ROWS_PER_BLOCK = 256, 16
# The swapped kernel: up to 4 math warpgroups of 64 weight rows each, beside the producer.
MAX_MATH_WARPGROUPS = 4
MIN_STAGES, MAX_STAGES = 2, 12
MIN_TOKENS = 8  # the smallest token block (wgmma N)


def kib(nbytes: int) -> int:
    """`nbytes` rounded up to the 1 KiB alignment of each shared-memory slab."""
    return -(-nbytes // 1024) * 1024


def stages_that_fit(smem_bytes: Callable[[int], int], arch: ArchSpec, most: int) -> int:
    """The most stages, up to `most`, whose `smem_bytes(stages)` fits `arch` beside the reserve;
    below the kernel's minimum none does."""
    fixed = smem_bytes(0)
    per_stage = smem_bytes(1) - fixed
    return min(most, (arch.smem_budget - SMEM_RESERVE - fixed) // per_stage)


def storage_of(
    tokens: int, weight_rows: int, store_cols: int = 0, scale_words: bool = False
) -> StorageConfig:
    """The TMA maps: FP8 token rows in BLOCK_K boxes of a tile's rows; the codes unswizzled, as
    whole 64-byte rows of the tile's rows, or with `scale_words` (prepared weights) as the
    4096 contiguous bytes of each of the tile's 64-row blocks (python/moegemm/api/
    mxfp4_weights.py; 16 rows of 256 bytes a block), then a plane row of offsets words; D staged
    in store_cols-wide boxes of 64 rows."""
    return StorageConfig(
        load_box_a=(BLOCK_K, tokens),
        load_box_b=(PREPARED_ROW_BYTES, PREPARED_ROWS_PER_BLOCK * weight_rows // 64)
        if scale_words
        else (BLOCK_K // 2, weight_rows),
        swizzle_a=128,
        swizzle_b=0,
        load_box_sfb=(weight_rows, 1) if scale_words else None,
        store_box_d=(store_cols, 64) if store_cols else None,
        swizzle_d=2 * store_cols,
    )


@dataclass(frozen=True, eq=False)
class SwappedForm:
    """The swapped kernel on one weight form: block_t tokens on the wgmma's N side, 64 weight
    rows per math warpgroup on its M side, register stores.

    max_tokens: the most tokens a config of W math warpgroups holds without spilling.
    smem_bytes_for: (block_t, block_w, num_stages) -> the kernel's shared memory.
    scale_words: whether the weights' scale words load by TMA (prepared weights).
    kblock_cycles_*: the fitted cost of a CTA's k-block (see kblock_cycles).
    """

    max_tokens: dict[int, int]
    smem_bytes_for: Callable[[int, int, int], int]
    scale_words: bool
    kblock_floor_cycles: float
    kblock_cycles_per_warpgroup: float
    kblock_cycles_per_token: float

    def max_stages(self, block_t: int, block_w: int, arch: ArchSpec) -> int:
        smem = self.smem_bytes_for
        return stages_that_fit(lambda stages: smem(block_t, block_w, stages), arch, MAX_STAGES)

    def make_config(self, block_t: int, num_wg: int, num_stages: int, arch: ArchSpec) -> GemmConfig:
        block_w = 64 * num_wg
        return GemmConfig(
            layout=Layout(block_m=block_t, block_n=block_w, block_k=BLOCK_K, swap_ab=True),
            storage=storage_of(block_t, block_w, scale_words=self.scale_words),
            pipeline=PipelineConfig(
                num_stages=num_stages, smem_bytes=self.smem_bytes_for(block_t, block_w, num_stages)
            ),
            launch=LaunchConfig(num_threads=128 * (1 + num_wg), num_math_warpgroups=num_wg),
        )

    def is_legal(self, config: GemmConfig, arch: ArchSpec, token_choices: Sequence[int]) -> bool:
        """Whether `config` is this form's with one of `token_choices` tokens."""
        lay, pipe, launch = config.layout, config.pipeline, config.launch
        num_wg = launch.num_math_warpgroups
        return (
            lay.swap_ab
            and lay.block_k == BLOCK_K
            and lay.block_m in token_choices
            and 1 <= num_wg <= MAX_MATH_WARPGROUPS
            and lay.block_m <= self.max_tokens[num_wg]
            and lay.block_n == 64 * num_wg
            and lay.cluster_m == 1
            and lay.cluster_n == 1
            and lay.stripe_m == 0
            and config.store_cols == 0
            and launch.num_threads == 128 * (1 + num_wg)
            and pipe.transform_stages == 0
            and MIN_STAGES <= pipe.num_stages <= MAX_STAGES
            and pipe.smem_bytes == self.smem_bytes_for(lay.block_m, lay.block_n, pipe.num_stages)
            and pipe.smem_bytes <= arch.smem_budget - SMEM_RESERVE
            and config.storage == storage_of(lay.block_m, lay.block_n, scale_words=self.scale_words)
        )

    def configs(self, arch: ArchSpec, token_choices: Sequence[int]) -> list[GemmConfig]:
        """Each of `token_choices` with each warpgroup count whose registers hold it, with as
        many stages as fit."""
        configs = []
        for block_t in token_choices:
            for num_wg in range(1, MAX_MATH_WARPGROUPS + 1):
                if block_t > self.max_tokens[num_wg]:
                    continue
                stages = self.max_stages(block_t, 64 * num_wg, arch)
                if stages >= MIN_STAGES:
                    configs.append(self.make_config(block_t, num_wg, stages, arch))
        return configs

    def kblock_cycles(self, block_t: int, num_wg: int) -> float:
        """Cycles of one k-block of a CTA: a floor plus a share per math warpgroup that grows
        with the tokens each promotes past the smallest block."""
        per_wg = self.kblock_cycles_per_warpgroup + self.kblock_cycles_per_token * (
            block_t - MIN_TOKENS
        )
        return self.kblock_floor_cycles + num_wg * per_wg
