"""Ragged group statistics: how many m-blocks the groups of a routed layout need.

Arch- and dtype-neutral. The packed-offsets and masked layouts only know the mean rows per group
on the host, and routed groups are ragged around it: their m-blocks are expectations over a
spread of rows (a group of 64 +- 16 rows needs two 64-row blocks about half the time, one 128-row
block always). Rows routed to one expert scatter around the mean: Poisson noise plus a relative
spread from uneven routing (the ragged lists of the workload suites show 0.12-0.23 beyond
Poisson; 0.1 and 0.2 pick alike on 110 of the 112 heuristic-quality cases, 0.1 the faster on the
other two). A group's rows are Normal(mean, rows_sigma(mean)) rounded to integers.
"""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from statistics import NormalDist

from .config import GemmDesc

ROUTING_SPREAD = 0.1
# Layouts whose groups are ragged around a host-side mean (the others know every row).
RAGGED_KINDS = ("m_grouped_offsets", "m_grouped_masked")


def expected_rows_per_group(desc: GemmDesc) -> int:
    """The caller's hint (masked), the rows per group of the packed layouts (offsets,
    k-grouped: GemmDesc.expected_m or k), else m spread evenly over the groups."""
    if desc.expected_m > 0:
        return desc.expected_m
    return max(1, math.ceil(desc.m / max(1, desc.num_groups)))


def routed_view(desc: GemmDesc) -> GemmDesc:
    """The packed-offsets layout with fewer rows than groups (decode: T tokens x top-k slots
    over E experts) as the model should see it: m slots routed over G groups hit about
    G (1 - (1 - 1 / G)^m) distinct groups (T = 1: exactly its top-k), and the others are empty
    (the view's group count makes that many non-empty under the model's spread of rows).
    The per-group mean of rows (1 when m < G) would instead spread m rows over most groups, as
    if nearly every expert's weights were read and tiled. Other layouts: `desc` unchanged (a
    masked layout's empty groups are unknown on the host; its expected_m is the caller's)."""
    g, m = desc.num_groups, desc.m
    if desc.kind != "m_grouped_offsets" or m <= 0 or m >= g:
        return desc
    active = max(1, min(m, round(g * (1.0 - (1.0 - 1.0 / g) ** m))))
    mean = math.ceil(m / active)
    # The model's groups spread around their mean and some come out empty; routed ones hold a
    # row each: as many more groups as make the non-empty ones `active`.
    reached = normal_sf((0.5 - mean) / rows_sigma(mean))
    return replace(desc, num_groups=min(g, round(active / reached)), expected_m=mean)


def masked_capacity(desc: GemmDesc) -> int | None:
    """The most rows one group can hold: the masked buffer's max_m; None where unbounded."""
    return desc.m if desc.kind == "m_grouped_masked" else None


def normal_sf(x: float) -> float:
    """P(Z > x) for a standard normal Z."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def rows_sigma(mean: float) -> float:
    """Spread of one group's rows around the mean: Poisson noise plus ROUTING_SPREAD."""
    return math.sqrt(mean + (ROUTING_SPREAD * mean) ** 2)


def group_m_blocks(desc: GemmDesc, block_m: int) -> tuple[float, float]:
    """(mean, variance) of ceil(rows / block_m) for one group of a ragged layout; a masked group
    holds at most max_m rows."""
    mean = expected_rows_per_group(desc)
    return m_block_moments(mean, block_m, capacity_blocks(mean, masked_capacity(desc), block_m))


def uncapped_last_block(mean: int, block_m: int) -> int:
    """Past this many blocks the rows' distribution (cut at mean + 8 sigma) has no mass."""
    return math.ceil((mean + 8 * rows_sigma(mean)) / block_m)


def capacity_blocks(mean: int, cap: int | None, block_m: int) -> int | None:
    """The block count m_block_moments reads of a capacity of `cap` rows: ceil(cap / block_m),
    or the distribution's own end if that comes first (ceil is monotone: any larger capacity
    reads the same); None for unbounded groups."""
    if cap is None:
        return None
    return min(math.ceil(cap / block_m), uncapped_last_block(mean, block_m))


@functools.lru_cache(maxsize=1 << 16)  # keyed on what it reads: shared by layouts and shapes
def m_block_moments(mean: int, block_m: int, cap_blocks: int | None) -> tuple[float, float]:
    """(mean, variance) of ceil(r / block_m), r ~ Normal(mean, rows_sigma(mean)) rounded to an
    integer, for a group that holds at most cap_blocks blocks (None: unbounded). ceil(r / b)
    counts the j >= 0 with r > j * b, so E = sum_j P(r > j b) and
    E[ceil^2] = sum_j (2 j + 1) P(r > j b)."""
    sigma = rows_sigma(mean)
    last = uncapped_last_block(mean, block_m)
    if cap_blocks is not None:
        last = min(last, cap_blocks)
    # Every j below mean - 8 sigma counts with probability 1: sum_{j < j0} (2 j + 1) = j0^2.
    j0 = min(last, max(0, math.floor((mean - 8 * sigma) / block_m)))
    if last - j0 > 48 and cap_blocks is None:
        # Rows spread over many blocks: r mod b is uniform over the b residues, so ceil adds
        # (b - 1) / 2b on average and (b^2 - 1) / 12 b^2 to the variance (keeps planning of
        # large prefill shapes cheap).
        fill = (block_m - 1) / (2 * block_m)
        return mean / block_m + fill, (sigma / block_m) ** 2 + (block_m**2 - 1) / (12 * block_m**2)
    first, second = float(j0), float(j0 * j0)
    for j in range(j0, last):
        p_more = normal_sf((j * block_m + 0.5 - mean) / sigma)
        first += p_more
        second += (2 * j + 1) * p_more
    return first, max(0.0, second - first * first)


# Rows of one routed group, sampled at the midpoints of equal-probability bins of
# Normal(mean, rows_sigma(mean)): enough to average a group's last block over the spread.
ROW_QUANTILES = tuple(NormalDist().inv_cdf((i + 0.5) / 32) for i in range(32))


@functools.cache
def quantile_rows(mean: int) -> tuple[int, ...]:
    """The rows of ROW_QUANTILES' 32 sample groups for a mean of `mean` rows, empty ones too."""
    sigma = rows_sigma(mean)
    return tuple(round(mean + sigma * q) for q in ROW_QUANTILES)
