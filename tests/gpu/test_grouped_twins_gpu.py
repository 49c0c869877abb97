"""Twins on the GPU: configs that must write the same bits as each other on the grouped and
dense kernels (register vs TMA-store epilogues, striped vs whole-group walks, 2-CTA clusters vs
one CTA per tile, k-grouped in-place reduce-add vs a separate C), each forced through
`config=`, outputs NaN-poisoned first and checked against FP32 too."""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch
from test_grouped_gpu import ALIGN, TOL, bf16, k_grouped_reference, max_group_diff, nan, offsets

import moegemm
from moegemm.testing import calc_diff

pytestmark = pytest.mark.gpu


def with_walk(config, stripe_m: int):
    """`config` with its grouped walk forced: stripes of `stripe_m` m-blocks, 0 the whole group
    (the walk only orders the tiles, so both must write the same bits)."""
    return dataclasses.replace(config, layout=dataclasses.replace(config.layout, stripe_m=stripe_m))


def with_cluster(config, cluster_m: int, cluster_n: int):
    """A single-CTA `config` as a 2-CTA cluster: (2, 1) shares B between neighbouring
    m-blocks, (1, 2) shares A between neighbouring n-blocks, each CTA loading its half of the
    shared operand's box. The heuristics do not choose clusters (measured no faster); a forced
    `config=` reaches them."""
    lay = config.layout
    assert lay.cluster_size == 1 and not lay.swap_ab, config.short_name()
    return dataclasses.replace(
        config,
        layout=dataclasses.replace(lay, cluster_m=cluster_m, cluster_n=cluster_n),
        storage=dataclasses.replace(
            config.storage,
            load_box_a=(lay.block_k, lay.block_m // cluster_n),
            load_box_b=(lay.block_k, lay.block_n // cluster_m),
        ),
    )


def epilogue_pairs(desc, block_ms=(64, 128, 256)):
    """(register-store config, TMA-store config) of the same tile, for each block_m."""
    from moegemm.families import enumerate_configs
    from moegemm.heuristics import SM90

    by_tile: dict[tuple[int, int], dict[bool, object]] = {}
    for config in enumerate_configs(desc, SM90):
        lay = config.layout
        if lay.cluster_m == 1:
            by_tile.setdefault((lay.block_m, lay.block_n), {})[bool(config.store_cols)] = config
    pairs = []
    for block_m in block_ms:
        # The widest tile with both epilogues, plus one whose width needs 16- or 32-column boxes.
        tiles = sorted(t for t, v in by_tile.items() if t[0] == block_m and len(v) == 2)
        for tile in {tiles[-1], next(t for t in tiles if t[1] % 64)}:
            pairs.append((by_tile[tile][False], by_tile[tile][True]))
    return pairs


def assert_offs_twins_agree(a, b, sizes: list[int], first, second) -> None:
    """Two configs of the packed-offsets layout write the same bits, nothing past the rows, and
    the right result (FP32 reference per group)."""
    total, n = a.shape[0], b.shape[1]
    offs = offsets(sizes)
    outs = []
    for config in (first, second):
        storage = nan(total + 64, n)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, storage[:total], offs=offs, config=config)
        assert storage[total:].isnan().all(), config.short_name()
        outs.append(storage[:total])
    assert torch.equal(outs[0], outs[1]), f"{first.short_name()} vs {second.short_name()}"
    assert max_group_diff(outs[1], a, b, sizes) < TOL, second.short_name()


def test_tma_store_epilogue_matches_register_stores() -> None:
    """Both epilogues write the same bits, and only inside each group: tiles whose rows cross a
    group boundary, the N tail and the tensor's last rows all take their own path."""
    from moegemm.heuristics import GemmDesc

    sizes = [0, 1, 127, 128, 300, 1000, 64, 65]
    num_groups, n, k = len(sizes), 2880, 2048  # 2880 = 11 * 256 + 64: an N tail for most tiles
    total = sum(sizes)
    a, b = bf16(total, k), bf16(num_groups, n, k, scale=0.02)
    desc = GemmDesc("m_grouped_offsets", total, n, k, num_groups, expected_m=total // num_groups)
    for direct, staged in epilogue_pairs(desc):
        assert_offs_twins_agree(a, b, sizes, direct, staged)


def test_walk_stripes_match_whole_group_walk() -> None:
    """The grouped walk in balanced stripes of m-blocks (the default where K >= 4096 and groups
    are long) writes the same bits as the whole-group walk, only inside each group: groups of 0,
    1 and thousands of rows (5 to 24 m-blocks: stripes of 4 to 8), several tiles per CTA,
    packed offsets and masked, one CTA per tile and a 2-CTA cluster sharing B."""
    from moegemm.families import enumerate_configs, is_legal
    from moegemm.heuristics import SM90, GemmDesc

    sizes = [0, 3000, 1, 1500, 2100, 640, 1030]
    num_groups, n, k = len(sizes), 2880, 4096
    total = sum(sizes)
    a, b = bf16(total, k), bf16(num_groups, n, k, scale=0.02)
    desc = GemmDesc("m_grouped_offsets", total, n, k, num_groups, expected_m=total // num_groups)
    single = next(
        c
        for c in enumerate_configs(desc, SM90)
        if (c.layout.block_m, c.layout.block_n) == (128, 256)
        and c.layout.cluster_size == 1
        and c.store_cols
    )
    # Both walks forced, on one CTA per tile and on a 2x1 cluster (whose walk counts cluster
    # m-blocks: stripes of 8 cover 16 CTA m-blocks).
    for pick in (single, with_cluster(single, 2, 1)):
        whole, striped = with_walk(pick, 0), with_walk(pick, 8)
        assert is_legal(whole, desc, SM90) and is_legal(striped, desc, SM90), pick.short_name()
        assert_offs_twins_agree(a, b, sizes, whole, striped)

    masked, max_m = [2048, 0, 1500, 100], 2048
    ma, mb = bf16(len(masked), max_m, k), bf16(len(masked), n, k, scale=0.02)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    mdesc = GemmDesc("m_grouped_masked", max_m, n, k, len(masked), expected_m=max_m)
    config = next(
        c for c in enumerate_configs(mdesc, SM90)
        if (c.layout.block_m, c.layout.block_n) == (128, 256)
        and c.layout.cluster_size == 1 and c.store_cols
    )  # fmt: skip
    whole, striped = with_walk(config, 0), with_walk(config, 8)
    outs = []
    for config in (whole, striped):
        d = nan(len(masked), max_m, n)
        moegemm.m_grouped_bf16_gemm_nt_masked(ma, mb, d, masked_m, max_m, config=config)
        for g, rows in enumerate(masked):
            assert d[g, rows:].isnan().all(), config.short_name()
        outs.append(d)
    assert torch.equal(outs[0].nan_to_num(), outs[1].nan_to_num())
    for g, rows in enumerate(masked):
        if rows:
            ref = ma[g, :rows].float() @ mb[g].float().t()
            assert calc_diff(outs[1][g, :rows], ref) < TOL


def test_tma_store_epilogue_masked_and_dense() -> None:
    from moegemm.heuristics import GemmDesc

    num_groups, max_m, n, k = 4, 256, 4096, 768
    masked = [256, 0, 200, 64]  # full (TMA), empty, crossing (registers), one atom
    a, b = bf16(num_groups, max_m, k), bf16(num_groups, n, k, scale=0.02)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    desc = GemmDesc("m_grouped_masked", max_m, n, k, num_groups, expected_m=max_m)
    for _, staged in epilogue_pairs(desc):
        d = nan(num_groups, max_m, n)
        moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, max_m, config=staged)
        for g, rows in enumerate(masked):
            if rows:
                ref = a[g, :rows].float() @ b[g].float().t()
                assert calc_diff(d[g, :rows], ref) < TOL, staged.short_name()
            assert d[g, rows:].isnan().all(), staged.short_name()
    m = 1000  # the last m-block runs past the tensor: TMA clips it
    da, db = bf16(m, k), bf16(n, k, scale=0.02)
    storage = nan(m + 64, n)
    moegemm.bf16_gemm_nt(da, db, storage[:m])
    assert calc_diff(storage[:m], da.float() @ db.float().t()) < TOL
    assert storage[m:].isnan().all()


@pytest.mark.parametrize("block_m,block_n", [(64, 256), (64, 176), (128, 48), (256, 96)])
def test_register_stores_stay_inside_rows_and_columns(block_m: int, block_n: int) -> None:
    """Register stores (16 bytes per lane over groups of four 8-column slices, pairs for the
    rest of a tile's width) into a D whose rows are longer than N: the valid rows of each group
    are right and nothing else is written, neither padding columns nor rows past masked_m."""
    from moegemm.families import enumerate_configs
    from moegemm.heuristics import SM90, GemmDesc

    num_groups, max_m, n, k, pad = 4, 200, 1000, 768, 24  # 1000 = 3 * 256 + 232: N tails
    masked = [200, 37, 0, 129]
    desc = GemmDesc("m_grouped_masked", max_m, n, k, num_groups, expected_m=max_m)
    config = next(
        c
        for c in enumerate_configs(desc, SM90)
        if (c.layout.block_m, c.layout.block_n) == (block_m, block_n)
        and not c.layout.swap_ab
        and c.layout.cluster_size == 1
        and not c.store_cols
    )
    a, b = bf16(num_groups, max_m, k), bf16(num_groups, n, k, scale=0.02)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    storage = nan(num_groups, max_m, n + pad)
    moegemm.m_grouped_bf16_gemm_nt_masked(a, b, storage[:, :, :n], masked_m, max_m, config=config)
    for g, rows in enumerate(masked):
        if rows:
            ref = a[g, :rows].float() @ b[g].float().t()
            assert calc_diff(storage[g, :rows, :n], ref) < TOL, (config.short_name(), g)
        assert storage[g, rows:].isnan().all(), (config.short_name(), g)
        assert storage[g, :, n:].isnan().all(), (config.short_name(), g)


@pytest.mark.parametrize("m", [200, 256])  # 200: the second warpgroup's rows run past M
@pytest.mark.parametrize("with_c", [False, True])
def test_k_grouped_tma_store_matches_register_stores(m: int, with_c: bool) -> None:
    from moegemm.families import enumerate_configs
    from moegemm.heuristics import SM90, GemmDesc

    sizes, n = [300, 0, 129, 64], 320  # 320 = 256 + 64: an N tail for 256-wide tiles
    total = sum(sizes)
    a, b = bf16(total, m), bf16(total, n)
    c = torch.randn(len(sizes), m, n, device="cuda") if with_c else None
    desc = GemmDesc("k_grouped", m, n, total // len(sizes), len(sizes), "bf16", "fp32", with_c)
    configs = {}
    for config in enumerate_configs(desc, SM90):
        configs.setdefault(config.layout, {})[bool(config.store_cols)] = config
    ref = k_grouped_reference(a, b, sizes, c)
    for layout in [lay for lay in configs if lay.block_m == 128]:
        outs = []
        for config in (configs[layout][False], configs[layout][True]):
            d = nan(len(sizes), m, n, dtype=torch.float32)
            moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offsets(sizes), c, config=config)
            outs.append(d)
        assert torch.equal(outs[0], outs[1]), layout
        for g in range(len(sizes)):
            assert calc_diff(outs[1][g], ref[g]) < TOL, f"{layout} group {g}"


# Cluster shapes each layout takes: B sharing needs consecutive m-blocks of one group, which the
# m_indices layout cannot promise, so it takes only 1x2 (A shared along N).
CLUSTER_SHAPES = {
    "bf16_gemm_nt": ((2, 1), (1, 2)),
    "m_grouped_offsets": ((2, 1), (1, 2)),
    "m_grouped_masked": ((2, 1), (1, 2)),
    "m_grouped_contiguous": ((1, 2),),
}


def cluster_twins(desc):
    """(single-CTA config, 2-CTA cluster config) pairs of the same tile and epilogue, for both
    cluster shapes (2x1 shares B, 1x2 shares A) where the layout has them."""
    from moegemm.families import enumerate_configs, is_legal
    from moegemm.heuristics import SM90

    by_key: dict = {}
    for config in enumerate_configs(desc, SM90):
        lay = config.layout
        if lay.swap_ab or lay.cluster_size != 1:
            continue
        by_key.setdefault((lay.block_m, lay.block_n, config.storage.store_box_d), config)
    # 2880 columns: 12 n-blocks of 240 or 256, 23 of 128 (the second CTA of the last 1x2
    # cluster tile lies past N; 64 x 128 brings that case to the m_indices layout too).
    wanted = [
        (128, 256, (64, 64)),
        (128, 240, (16, 64)),
        (64, 256, None),
        (256, 128, None),
        (64, 128, None),
    ]
    pairs = [
        (by_key[key], with_cluster(by_key[key], *shape))
        for key in wanted
        if key in by_key
        for shape in CLUSTER_SHAPES[desc.kind]
    ]
    for _, clustered in pairs:  # what config= accepts, though never enumerated
        assert is_legal(clustered, desc, SM90), clustered.short_name()
    assert len(pairs) >= 2 * len(CLUSTER_SHAPES[desc.kind]), [p[1].short_name() for p in pairs]
    return pairs


def check_cluster_twins(pairs, run) -> None:
    """run(config) -> output; each cluster config must give its single-CTA twin's bits."""
    assert pairs, "no cluster configs enumerated"
    for single, clustered in pairs:
        # Masked outputs keep NaN past each group's rows: NaN must match NaN, bit for bit.
        torch.testing.assert_close(
            run(clustered), run(single), rtol=0, atol=0, equal_nan=True,
            msg=clustered.short_name(),
        )  # fmt: skip


@pytest.mark.parametrize("pdl", [False, True])
def test_cluster_multicast_matches_single_cta(pdl: bool) -> None:
    """2-CTA clusters forced through `config=` (B multicast along M, A multicast along N): the
    same bits as one CTA per tile, on groups with odd m-block counts (the second CTA of a
    group's last 2x1 cluster tile has no rows), empty groups, more than 32 groups, an N tail
    whose second B half lies past N, an odd n-block count (the second CTA of the last 1x2 tile
    lies past N), masked groups, dense M tails and the m_indices layout (1x2 only); with and
    without PDL."""
    from moegemm.heuristics import GemmDesc

    pdl_before = moegemm.get_pdl()
    moegemm.set_pdl(pdl)
    try:
        rng = random.Random(7)
        n, k = 2880, 1000  # 2880 = 11 * 256 + 64; K = 1000: a K tail
        for sizes in ([0, 1, 127, 128, 300, 1000, 64, 65, 129],
                      [rng.choice([0, 0, 1, 63, 64, 65, 200, 257]) for _ in range(41)]):  # fmt: skip
            num_groups, total = len(sizes), sum(sizes)
            a, b = bf16(total, k), bf16(num_groups, n, k, scale=0.02)
            offs = offsets(sizes)
            desc = GemmDesc("m_grouped_offsets", total, n, k, num_groups, expected_m=200)

            def run_offs(config, a=a, b=b, offs=offs, total=total):
                storage = nan(total + 64, n)
                moegemm.m_grouped_bf16_gemm_nt_contiguous(
                    a, b, storage[:total], offs=offs, config=config
                )
                assert storage[total:].isnan().all(), config.short_name()
                return storage[:total]

            check_cluster_twins(cluster_twins(desc), run_offs)
            out = run_offs(cluster_twins(desc)[0][1])
            assert max_group_diff(out, a, b, sizes) < TOL

        max_m, masked = 320, [320, 0, 65, 200, 1]
        ma, mb = bf16(len(masked), max_m, k), bf16(len(masked), n, k, scale=0.02)
        masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
        mdesc = GemmDesc("m_grouped_masked", max_m, n, k, len(masked), expected_m=max_m)

        def run_masked(config):
            d = nan(len(masked), max_m, n)
            moegemm.m_grouped_bf16_gemm_nt_masked(ma, mb, d, masked_m, max_m, config=config)
            for g, rows in enumerate(masked):
                assert d[g, rows:].isnan().all(), config.short_name()
            return d

        check_cluster_twins(cluster_twins(mdesc), run_masked)
        d = run_masked(cluster_twins(mdesc)[0][1])
        for g, rows in enumerate(masked):
            if rows:
                ref = ma[g, :rows].float() @ mb[g].float().t()
                assert calc_diff(d[g, :rows], ref) < TOL

        # Dense: the scheduler's cluster tiles with an idle second CTA at the M tail (300, 4160)
        # and more cluster tiles than CTAs (4160 x 2880).
        for m in (300, 4160):
            da, db = bf16(m, k), bf16(n, k, scale=0.02)
            ddesc = GemmDesc("bf16_gemm_nt", m, n, k)

            def run_dense(config, da=da, db=db, m=m):
                storage = nan(m + 64, n)
                moegemm.bf16_gemm_nt(da, db, storage[:m], config=config)
                assert storage[m:].isnan().all(), config.short_name()
                return storage[:m]

            check_cluster_twins(cluster_twins(ddesc), run_dense)

        # m_indices: only 1x2 clusters (both CTAs share an m-block, so its group); padding
        # blocks between the groups are skipped by both.
        sizes = [0, 1, 300, 128, 129, 64]
        padded = [-(-rows // ALIGN) * ALIGN for rows in sizes]
        m_indices = torch.full((sum(padded),), -1, dtype=torch.int32)
        start = 0
        for g, (rows, span) in enumerate(zip(sizes, padded)):
            m_indices[start : start + rows] = g
            start += span
        ia, ib = bf16(sum(padded), k), bf16(len(sizes), n, k, scale=0.02)
        m_indices = m_indices.cuda()
        idesc = GemmDesc("m_grouped_contiguous", sum(padded), n, k, len(sizes))

        def run_indices(config):
            d = nan(sum(padded), n)
            moegemm.m_grouped_bf16_gemm_nt_contiguous(ia, ib, d, m_indices, config=config)
            return d

        pairs = cluster_twins(idesc)
        assert all(c.layout.cluster_n == 2 for _, c in pairs)
        check_cluster_twins(pairs, run_indices)
        d, start = run_indices(pairs[0][1]), 0
        for g, (rows, span) in enumerate(zip(sizes, padded)):
            if rows:
                ref = ia[start : start + rows].float() @ ib[g].float().t()
                assert calc_diff(d[start : start + rows], ref) < TOL
            start += span
    finally:
        moegemm.set_pdl(pdl_before)


@pytest.mark.parametrize("m", [200, 256])  # 200: the second warpgroup's rows run past M
def test_k_grouped_in_place_reduce_add_matches_separate_c(m: int) -> None:
    """C = D in place goes out as TMA reduce-adds (C never read); the result must equal, bit for
    bit, a separate C (read and added in registers) and the register-store epilogue."""
    from moegemm.families import enumerate_configs
    from moegemm.heuristics import SM90, GemmDesc

    sizes, n = [300, 0, 129, 64, 1000], 320
    total = sum(sizes)
    a, b = bf16(total, m), bf16(total, n)
    c = torch.randn(len(sizes), m, n, device="cuda")
    desc = GemmDesc("k_grouped", m, n, total // len(sizes), len(sizes), "bf16", "fp32", True)
    staged = [x for x in enumerate_configs(desc, SM90) if x.store_cols]
    direct = [x for x in enumerate_configs(desc, SM90) if not x.store_cols]
    assert staged and direct
    ref = k_grouped_reference(a, b, sizes, c)
    separate = nan(len(sizes), m, n, dtype=torch.float32)
    moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, separate, offsets(sizes), c, config=direct[0])
    for config in staged[:2] + direct[:1]:
        d = c.clone()
        moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offsets(sizes), d, config=config)
        assert torch.equal(d, separate), config.short_name()
        for g in range(len(sizes)):
            assert calc_diff(d[g], ref[g]) < TOL
