"""The cycle model's expectation over ragged groups (packed offsets, masked): the m-block
moments against a direct sum over the rows' distribution, the wave expectation against exact
counts where the rows are certain, and the decode case the old round-up model got wrong."""

from __future__ import annotations

import math

import pytest

from moegemm.heuristics import SM90, GemmDesc, select_config, sm90


def _moments_by_summation(mean: float, sigma: float, block_m: int, cap: int | None):
    """E and Var of ceil(r / block_m) with r the normal rounded to the nearest integer >= 0."""
    cdf = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))
    first = second = 0.0
    top = int(mean + 10 * sigma) + 1
    for r in range(top + 1):
        p = cdf((r + 0.5 - mean) / sigma) - cdf((r - 0.5 - mean) / sigma)
        if r == 0:
            p = cdf((0.5 - mean) / sigma)
        rows = min(r, cap) if cap is not None else r
        blocks = math.ceil(rows / block_m)
        first += p * blocks
        second += p * blocks * blocks
    return first, second - first * first


@pytest.mark.parametrize("expected_m", [1, 8, 30, 64, 100, 1024])
@pytest.mark.parametrize("block_m", [8, 16, 64, 128])
def test_m_block_moments_match_a_direct_sum(expected_m: int, block_m: int) -> None:
    desc = GemmDesc("m_grouped_offsets", expected_m * 16, 4096, 2048, 16, expected_m=expected_m)
    mean, var = sm90.group_m_blocks(desc, block_m)
    sigma = math.sqrt(expected_m + (sm90.ROUTING_SPREAD * expected_m) ** 2)
    want_mean, want_var = _moments_by_summation(expected_m, sigma, block_m, None)
    assert mean == pytest.approx(want_mean, rel=1e-3, abs=1e-3)
    assert var == pytest.approx(want_var, rel=1e-2, abs=1e-3)
    # Ragged rows can only add m-blocks over the round-up of the mean (ceil is convex enough
    # here: the mean itself needs ceil(mean / block_m) blocks half of the time or more).
    assert mean >= 0.5 * math.ceil(expected_m / block_m)


def test_masked_groups_never_exceed_their_capacity() -> None:
    desc = GemmDesc("m_grouped_masked", 64, 4096, 2048, 8, expected_m=64)
    mean, var = sm90.group_m_blocks(desc, 64)
    assert mean <= 1.0 + 1e-9  # max_m = 64 rows fit one 64-row block
    assert var <= 1e-6


def test_balanced_layouts_keep_exact_wave_counts() -> None:
    for m, block_m, block_n in ((4096, 128, 256), (1000, 64, 128), (35044, 128, 240)):
        desc = GemmDesc("m_grouped_contiguous", m, 4096, 2048, 8)
        tiles = math.ceil(m / block_m) * math.ceil(4096 / block_n)
        assert sm90.expected_waves(desc, block_m, block_n, 132) == math.ceil(tiles / 132)


def test_expected_waves_grow_with_the_tiles() -> None:
    desc = GemmDesc("m_grouped_offsets", 512, 4096, 14336, 8, expected_m=64)
    waves = [sm90.expected_waves(desc, bm, 256, 132) for bm in (128, 64, 16)]
    assert waves == sorted(waves)
    # 8 groups of ~64 rows: 128-row tiles always fit one wave of 8 x 16 tiles; 64-row tiles
    # need a second block for about half of the groups, hence a second wave.
    assert waves[0] == pytest.approx(1.0, abs=1e-3)
    assert 1.5 < waves[1] < 2.01


def test_ragged_decode_picks_the_tile_that_fits_one_wave() -> None:
    # mixtral 8x7b linear2 at decode: 8 groups of 43-96 rows, N 4096, K 14336. On the H200 a
    # 128-row tile (one wave) ran 237 us against 284 us for a 64-row tile (two waves).
    desc = GemmDesc("m_grouped_offsets", 512, 4096, 14336, 8, expected_m=64)
    pick = select_config(desc, SM90)
    assert pick.layout.block_m == 128 and not pick.layout.swap_ab


@pytest.mark.parametrize("expected_m", [300, 1024, 8192])
def test_many_wave_shortcut_matches_the_sum(expected_m: int) -> None:
    # Large prefill shapes take E[ceil(T / S)] ~ E[T] / S + 1/2; check it against the sum
    # over waves that smaller shapes use.
    groups, n, block_m, block_n, sms = 16, 4096, 128, 256, 132
    desc = GemmDesc(
        "m_grouped_offsets", expected_m * groups, n, 7168, groups, expected_m=expected_m
    )
    mean, var = sm90.group_m_blocks(desc, block_m)
    mu, sigma = groups * mean, math.sqrt(groups * var)
    n_blocks = math.ceil(n / block_n)
    direct = sum(
        0.5 * math.erfc((math.floor(w * sms / n_blocks) + 0.5 - mu) / sigma / math.sqrt(2.0))
        for w in range(int(mu * n_blocks / sms) + 200)
    )
    assert sm90.expected_waves(desc, block_m, block_n, sms) == pytest.approx(direct, abs=0.05)


def test_k_grouped_cost_follows_the_rows_per_group() -> None:
    # The k-grouped GEMM reduces over each group's rows (GemmDesc.k); its output is m x n. The
    # model once took m / groups as the k-loop, which made the estimates of the benchmark's
    # k-grouped cases 2-4x too small (they now land within ~10-20% of the measured times).
    config = select_config(GemmDesc("k_grouped", 4096, 7168, 4096, 4, d_dtype="fp32"), SM90)
    short, long = (
        sm90.estimate_cycles(config, GemmDesc("k_grouped", 4096, 7168, k, 4, d_dtype="fp32"), SM90)
        for k in (4096, 8192)
    )
    assert 1.7 < long / short < 2.05
    same_rows = GemmDesc("k_grouped", 4096, 7168, 4096, 16, d_dtype="fp32")
    assert sm90.estimate_cycles(config, same_rows, SM90) > 3.5 * short  # 4x the groups
