"""The wave model: tiles of a problem and the waves a persistent grid of `num_sms` CTAs needs.

Arch- and dtype-neutral (an arch comes as an argument). Balanced layouts (dense, m_indices,
k-grouped) count exactly; ragged ones (packed offsets, masked) take expectations over the groups'
spread of rows (ragged.py).
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

from .arch import ArchSpec
from .config import GemmDesc
from .ragged import (
    capacity_blocks,
    expected_rows_per_group,
    m_block_moments,
    masked_capacity,
    normal_sf,
    rows_sigma,
)

# The wave sum stops at the first wave w past the mean whose P(tiles > w S) is below this.
WAVE_TAIL_P = 1e-4
# normal_sf(WAVE_TAIL_Z) < WAVE_TAIL_P: a threshold this many sigmas above the mean ends the sum.
WAVE_TAIL_Z = 3.8


class RaggedBlocks(NamedTuple):
    """Everything the wave model reads of a ragged desc for one block_m, and nothing else: the
    rows per group, the block count a masked group's capacity allows (capacity_blocks: None for
    packed offsets) and the bound on the total m-blocks where it can end the wave sum (None
    where it never does). Descs with equal RaggedBlocks get equal tiles and waves."""

    mean_rows: int
    cap_blocks: int | None
    max_blocks: int | None

    @staticmethod
    def of(desc: GemmDesc, block_m: int) -> RaggedBlocks:
        mean = expected_rows_per_group(desc)
        cap_blocks = capacity_blocks(mean, masked_capacity(desc), block_m)
        per_group_max = math.ceil(desc.m / block_m)
        max_blocks = desc.num_groups * per_group_max
        if desc.kind == "m_grouped_offsets":
            # Packed offsets hold m rows in all: no more blocks than one group with all of them.
            max_blocks = min(max_blocks, per_group_max + desc.num_groups - 1)
        mu, sigma = _total_blocks(desc.kind, desc.num_groups, mean, block_m, cap_blocks)
        # The sum continues only while p >= WAVE_TAIL_P or threshold <= mu, so every threshold
        # it passes is below mu + WAVE_TAIL_Z sigma: a bound at or above that never ends it.
        if max_blocks >= mu + WAVE_TAIL_Z * sigma:
            return RaggedBlocks(mean, cap_blocks, None)
        return RaggedBlocks(mean, cap_blocks, max_blocks)


@functools.lru_cache(maxsize=4096)  # count_tiles and expected_waves both ask, per config
def ragged_blocks(desc: GemmDesc, block_m: int) -> RaggedBlocks:
    return RaggedBlocks.of(desc, block_m)


def _total_blocks(
    kind: str, num_groups: int, mean: int, block_m: int, cap_blocks: int | None
) -> tuple[float, float]:
    """(mean, sigma) of the m-blocks of all groups."""
    mean_blocks, var_blocks = m_block_moments(mean, block_m, cap_blocks)
    if kind == "m_grouped_offsets":
        row_part = (rows_sigma(mean) / block_m) ** 2
        var_blocks = max(0.0, var_blocks - row_part)
    return num_groups * mean_blocks, math.sqrt(num_groups * var_blocks)


def count_tiles(desc: GemmDesc, block_m: int, block_n: int) -> float:
    """Tiles of the problem; for ragged layouts, the expected count."""
    n_blocks = math.ceil(desc.n / block_n)
    if desc.kind in ("bf16_gemm_nt", "m_grouped_contiguous"):
        return math.ceil(desc.m / block_m) * n_blocks
    if desc.kind == "k_grouped":
        return desc.num_groups * math.ceil(desc.m / block_m) * n_blocks
    blocks = ragged_blocks(desc, block_m)
    mean_blocks, _ = m_block_moments(blocks.mean_rows, block_m, blocks.cap_blocks)
    return desc.num_groups * mean_blocks * n_blocks


def expected_waves(desc: GemmDesc, block_m: int, block_n: int, num_sms: int) -> float:
    """E[ceil(tiles / num_sms)]: exact for balanced layouts; for ragged ones see ragged_waves."""
    if desc.kind not in ("m_grouped_offsets", "m_grouped_masked"):
        return math.ceil(count_tiles(desc, block_m, block_n) / num_sms)
    blocks = ragged_blocks(desc, block_m)
    return ragged_waves(
        desc.kind, desc.num_groups, blocks, block_m, math.ceil(desc.n / block_n), num_sms
    )


@functools.lru_cache(maxsize=1 << 16)
def ragged_waves(
    kind: str, num_groups: int, blocks: RaggedBlocks, block_m: int, n_blocks: int, num_sms: int
) -> float:
    """E[ceil(T / S)] with T = m-blocks * n_blocks: the groups' m-block count is a sum over
    groups (normal) and E[ceil(T / S)] = sum_w P(T > w S). Masked groups are independent. Packed
    offsets hold m rows in all, so only each group's round-up varies: ceil(r / b) = r / b + fill,
    the r / b sum to m / b, and the variance left is that of the fills."""
    mu, sigma = _total_blocks(kind, num_groups, blocks.mean_rows, block_m, blocks.cap_blocks)
    if sigma < 1e-6:
        return math.ceil(round(mu) * n_blocks / num_sms)
    if 16 * sigma * n_blocks / num_sms > 48:
        # Spread over many waves: T / S is uniform over the multiples of gcd(n_blocks, S) / S
        # modulo 1, so ceil adds (1 - gcd / S) / 2.
        return mu * n_blocks / num_sms + 0.5 * (1 - math.gcd(n_blocks, num_sms) / num_sms)
    # No group holds more blocks than its capacity (masked) or all the rows (offsets); None:
    # the bound lies past every threshold the sum reaches (RaggedBlocks.of).
    max_blocks = math.inf if blocks.max_blocks is None else blocks.max_blocks
    # Waves below mu - 8 sigma m-blocks are certain; start the sum after them.
    w = max(0, int((mu - 8 * sigma - 1) * n_blocks / num_sms))
    waves = float(w)
    while True:
        # m-blocks are integers: T > w S  <=>  blocks >= floor(w S / n_blocks) + 1.
        threshold = math.floor(w * num_sms / n_blocks) + 0.5
        p = normal_sf((threshold - mu) / sigma)
        if threshold > max_blocks or (p < WAVE_TAIL_P and threshold > mu):
            return waves
        waves += p
        w += 1


def tile_count_spread(desc: GemmDesc, block_m: int, block_n: int) -> list[tuple[int, float]]:
    """The tiles a problem may have, with their probabilities: one count for balanced layouts;
    for ragged ones the groups' total m-blocks (normal, as ragged_waves) times the n-blocks,
    from 5 sigma below the mean to 5 above (the end counts holding the tails) and no more than
    the layout's bound on m-blocks (RaggedBlocks.max_blocks)."""
    n_blocks = math.ceil(desc.n / block_n)
    if desc.kind not in ("m_grouped_offsets", "m_grouped_masked"):
        return [(round(count_tiles(desc, block_m, block_n)), 1.0)]
    blocks = ragged_blocks(desc, block_m)
    mu, sigma = _total_blocks(
        desc.kind, desc.num_groups, blocks.mean_rows, block_m, blocks.cap_blocks
    )
    if sigma < 1e-6:
        return [(round(mu) * n_blocks, 1.0)]
    top = math.inf if blocks.max_blocks is None else blocks.max_blocks
    hi = min(top, math.ceil(mu + 5 * sigma))
    lo = min(hi, max(0, math.floor(mu - 5 * sigma)))
    spread = [
        (
            b * n_blocks,
            (1.0 if b == lo else normal_sf((b - 0.5 - mu) / sigma))
            - (0.0 if b == hi else normal_sf((b + 0.5 - mu) / sigma)),
        )
        for b in range(lo, hi + 1)
    ]
    return spread


def waves_and_l2_share(
    desc: GemmDesc, block_m: int, block_n: int, arch: ArchSpec
) -> tuple[float, float] | None:
    """The expected waves of desc's block_m x block_n tiles on arch.num_sms persistent CTAs,
    and the L2 bandwidth each busy SM gets per clock; None where the problem has no tile."""
    num_tiles = count_tiles(desc, block_m, block_n)
    if num_tiles == 0:
        return None
    num_ctas = min(num_tiles, arch.num_sms)
    waves = expected_waves(desc, block_m, block_n, arch.num_sms)
    # L2 bandwidth is shared: fewer busy SMs each get a larger share, up to the SM's own port.
    return waves, min(64.0, arch.l2_bytes_per_clk * arch.num_sms / num_ctas)
