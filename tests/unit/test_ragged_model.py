"""The cycle model's expectation over ragged groups (packed offsets, masked): the m-block
moments against a direct sum over the rows' distribution, the wave expectation against exact
counts where the rows are certain, and the decode case the old round-up model got wrong."""

from __future__ import annotations

import math
import random

import pytest

from moegemm.families import select_config
from moegemm.heuristics import SM90, GemmDesc, ragged, waves
from moegemm.heuristics import sm90_bf16 as sm90


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
    mean, var = ragged.group_m_blocks(desc, block_m)
    sigma = math.sqrt(expected_m + (ragged.ROUTING_SPREAD * expected_m) ** 2)
    want_mean, want_var = _moments_by_summation(expected_m, sigma, block_m, None)
    assert mean == pytest.approx(want_mean, rel=1e-3, abs=1e-3)
    assert var == pytest.approx(want_var, rel=1e-2, abs=1e-3)
    # Ragged rows can only add m-blocks over the round-up of the mean (ceil is convex enough
    # here: the mean itself needs ceil(mean / block_m) blocks half of the time or more).
    assert mean >= 0.5 * math.ceil(expected_m / block_m)


@pytest.mark.parametrize("cap,expected_m,block_m", [(64, 64, 64), (100, 90, 64), (200, 150, 128)])
def test_masked_groups_never_exceed_their_capacity(cap: int, expected_m: int, block_m: int):
    desc = GemmDesc("m_grouped_masked", cap, 4096, 2048, 8, expected_m=expected_m)
    mean, var = ragged.group_m_blocks(desc, block_m)
    sigma = math.sqrt(expected_m + (ragged.ROUTING_SPREAD * expected_m) ** 2)
    want_mean, want_var = _moments_by_summation(expected_m, sigma, block_m, cap)
    assert mean == pytest.approx(want_mean, abs=1e-6)
    assert var == pytest.approx(want_var, abs=1e-6)
    assert mean <= math.ceil(cap / block_m) + 1e-9


def test_balanced_layouts_keep_exact_wave_counts() -> None:
    for m, block_m, block_n in ((4096, 128, 256), (1000, 64, 128), (35044, 128, 240)):
        desc = GemmDesc("m_grouped_contiguous", m, 4096, 2048, 8)
        tiles = math.ceil(m / block_m) * math.ceil(4096 / block_n)
        assert waves.expected_waves(desc, block_m, block_n, 132) == math.ceil(tiles / 132)


def test_expected_waves_grow_with_the_tiles() -> None:
    desc = GemmDesc("m_grouped_offsets", 512, 4096, 14336, 8, expected_m=64)
    counts = [waves.expected_waves(desc, bm, 256, 132) for bm in (128, 64, 16)]
    assert counts == sorted(counts)
    # 8 groups of ~64 rows: 128-row tiles always fit one wave of 8 x 16 tiles; 64-row tiles
    # need a second block for about half of the groups, hence a second wave.
    assert counts[0] == pytest.approx(1.0, abs=1e-3)
    assert 1.5 < counts[1] < 2.01


def test_ragged_decode_picks_the_tile_that_fits_one_wave() -> None:
    # mixtral 8x7b linear2 at decode: 8 groups of 43-96 rows, N 4096, K 14336. On the H200 a
    # 128-row tile (one wave) ran 237 us against 284 us for a 64-row tile (two waves).
    desc = GemmDesc("m_grouped_offsets", 512, 4096, 14336, 8, expected_m=64)
    pick = select_config(desc, SM90)
    assert pick.layout.block_m == 128 and not pick.layout.swap_ab


def _exact_waves(mean: float, sigma: float, groups: int, block_m: int, n_blocks: int, sms: int):
    """E[ceil(n_blocks * B / sms)] with B the sum of independent groups' ceil(r / block_m), by
    convolving the per-group distribution (rows the rounded normal, as the model has it): the
    masked layout's case."""
    cdf = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))
    top = math.ceil((mean + 10 * sigma) / block_m)
    per_group = [0.0] * (top + 1)
    for b in range(top + 1):  # P(ceil(r / block_m) = b) = P((b - 1) block_m < r <= b block_m)
        hi = cdf((b * block_m + 0.5 - mean) / sigma)
        lo = cdf(((b - 1) * block_m + 0.5 - mean) / sigma) if b > 0 else 0.0
        per_group[b] = hi - lo
    total = [1.0]
    for _ in range(groups):
        nxt = [0.0] * (len(total) + top)
        for i, p in enumerate(total):
            if p > 1e-15:
                for b, q in enumerate(per_group):
                    nxt[i + b] += p * q
        total = nxt
    return sum(p * math.ceil(n_blocks * blocks / sms) for blocks, p in enumerate(total))


@pytest.mark.parametrize(
    "expected_m,groups,n,block_m,tol",
    [
        # 16 groups of 48 rows: the block count is 16 plus a rare 17th and so on, a skewed sum
        # whose normal stand-in is 0.1 wave off at the one-block boundary.
        (48, 16, 4096, 64, 0.12),
        (300, 16, 4096, 128, 0.06),  # the sum over waves
        (1024, 16, 4096, 128, 0.06),
        (500, 64, 8448, 32, 0.06),  # many waves; n_blocks = 33 divides 132 SMs
        (300, 2, 4096, 256, 0.06),  # two groups: the block count is bounded
    ],
)
def test_masked_waves_match_an_exact_count(expected_m, groups, n, block_m, tol) -> None:
    sms, block_n = 132, 256
    cap = 4 * expected_m
    desc = GemmDesc("m_grouped_masked", cap, n, 7168, groups, expected_m=expected_m)
    exact = _exact_waves(
        expected_m, ragged.rows_sigma(expected_m), groups, block_m, math.ceil(n / block_n), sms
    )
    got = waves.expected_waves(desc, block_m, block_n, sms)
    assert got == pytest.approx(exact, abs=tol, rel=0.01)


@pytest.mark.parametrize("expected_m,groups", [(8192, 8), (1000, 32), (256, 128), (64, 8)])
def test_offsets_waves_by_simulation(expected_m: int, groups: int) -> None:
    # Packed offsets hold m rows in all: sample ragged groups that sum to m (a multinomial
    # split of the rows after normal weights), count tiles exactly, average the waves.
    rng = random.Random(0)
    sms, block_m, block_n, n = 132, 128, 256, 4096
    m = expected_m * groups
    desc = GemmDesc("m_grouped_offsets", m, n, 7168, groups, expected_m=expected_m)
    n_blocks = math.ceil(n / block_n)
    sigma = ragged.rows_sigma(expected_m)
    samples = []
    for _ in range(400):
        weights = [max(0.0, rng.gauss(expected_m, sigma)) for _ in range(groups)]
        rows = [int(m * w / sum(weights)) for w in weights]
        rows[0] += m - sum(rows)
        blocks = sum(math.ceil(r / block_m) for r in rows)
        samples.append(math.ceil(blocks * n_blocks / sms))
    simulated = sum(samples) / len(samples)
    got = waves.expected_waves(desc, block_m, block_n, sms)
    assert got == pytest.approx(simulated, abs=0.15, rel=0.02)


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


def _config(desc: GemmDesc, block_m: int, block_n: int, tma_store: bool):
    for config in sm90.enumerate_configs(desc, SM90):
        tile = (config.layout.block_m, config.layout.block_n)
        single = not config.layout.swap_ab and config.layout.cluster_size == 1
        if tile == (block_m, block_n) and single and bool(config.store_cols) == tma_store:
            return config
    raise AssertionError(f"no m{block_m}n{block_n} config (TMA store {tma_store})")


def _epilogue_by_summation(desc: GemmDesc, config) -> float:
    """The grouped epilogue per tile, summed over every integer row count of a group (the
    rounded normal the model assumes; an empty group has no tile). Full blocks store whole
    tiles; in the last block each warpgroup stages when all its rows are valid (TMA-store
    builds), else stores its valid rows from registers."""
    cdf = lambda x: 0.5 * math.erfc(-x / math.sqrt(2.0))
    lay = config.layout
    num_wg = config.launch.num_math_warpgroups
    wg_rows = lay.block_m // num_wg
    tma = bool(config.store_cols)
    stage_row = lay.block_n * 2 / sm90.STMATRIX_BYTES_PER_CLK
    direct_row = lay.block_n * 2 / sm90.DIRECT_STORE_BYTES_PER_CLK
    sync = sm90.TMA_STORE_SYNC_CYCLES
    full_tile = lay.block_m * (stage_row if tma else direct_row) + (sync if tma else 0.0)
    mean = desc.expected_m
    sigma = ragged.rows_sigma(mean)
    tiles = cycles = 0.0
    for rows in range(1, int(mean + 10 * sigma) + 2):
        p = cdf((rows + 0.5 - mean) / sigma) - cdf((rows - 0.5 - mean) / sigma)
        blocks = math.ceil(rows / lay.block_m)
        left = rows - (blocks - 1) * lay.block_m
        last, staged_any = 0.0, False
        for wg in range(num_wg):
            valid = min(wg_rows, max(0, left - wg * wg_rows))
            if tma and valid == wg_rows:
                last += wg_rows * stage_row
                staged_any = True
            else:
                last += valid * direct_row
        last += sync if staged_any else 0.0
        tiles += p * blocks
        cycles += p * ((blocks - 1) * full_tile + last)
    return cycles / tiles


@pytest.mark.parametrize("tma_store", [True, False])
@pytest.mark.parametrize(
    "expected_m, block_m, block_n",
    [
        (20, 128, 256),
        (52, 64, 256),
        (64, 128, 256),
        (136, 128, 256),
        (200, 256, 128),
        (265, 128, 256),
        (300, 256, 128),
    ],
)
def test_grouped_epilogue_follows_each_warpgroup(
    expected_m: int, block_m: int, block_n: int, tma_store: bool
) -> None:
    # Each math warpgroup of a group's last m-block picks its own epilogue (TMA staging when all
    # its rows are valid, registers when it crosses the group's end); the model averages that
    # over 32 quantiles of the rows' spread. Check against the sum over every row count.
    desc = GemmDesc("m_grouped_masked", 8192, 7168, 2048, 32, expected_m=expected_m)
    config = _config(desc, block_m, block_n, tma_store=tma_store)
    got = sm90.epilogue_cycles(config, desc)
    assert got == pytest.approx(_epilogue_by_summation(desc, config), rel=0.03)


def test_masked_rows_around_64_pick_the_tma_store_tile() -> None:
    # deepseek-v3 linear2 masked, 32 groups of ~64 rows (45-83): the first warpgroup of a
    # 128-row tile usually holds 64 valid rows and stages them. Measured on the H200 at 44c65d6:
    # m128n256 with TMA stores (3 stages) 243.7 us against 251.4 us for register stores (4).
    desc = GemmDesc("m_grouped_masked", 2048, 7168, 2048, 32, expected_m=64)
    staged = _config(desc, 128, 256, tma_store=True)
    registers = _config(desc, 128, 256, tma_store=False)
    assert sm90.epilogue_cycles(staged, desc) < sm90.epilogue_cycles(registers, desc)
    assert select_config(desc, SM90).store_cols > 0
