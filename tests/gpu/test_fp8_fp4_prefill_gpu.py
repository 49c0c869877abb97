"""The FP8 x FP4 prefill kernel on prepared weights (impls/sm90_fp8_fp4_grouped_gemm.cuh with
pipeline/fp4_table_transform.cuh: tokens on the wgmma's M side, a transform warpgroup converting
the weights by table) through the public API with forced configs, so every tile and epilogue
runs: every layout, ragged and empty groups, N not a multiple of the tile, K not a multiple of
128, a masked max_m of 90, and the exact path (blocks whose scales span more than the table's
window) beside fast blocks in one tile. NaN-poisoned outputs, FP32 references on the dequantized
operands."""

from __future__ import annotations

import pytest
import torch
from fp8_fp4_reference import (
    activations,
    grouped_refs,
    nan_bf16,
    offsets,
    packed_spans,
    random_mxfp4,
    ref_fp32,
    weights_arg,
)

from moegemm.testing import calc_diff

pytestmark = pytest.mark.gpu
TOL = 1e-4
# (block_m, block_n, TMA-store epilogue)
TILES = [(64, 64, False), (64, 128, True), (128, 64, True), (128, 128, False), (128, 128, True)]
TILE_IDS = [f"m{m}n{n}{'-tma' if s else ''}" for m, n, s in TILES]


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def prefill_config(block_m: int, block_n: int, tma_store: bool, kind: str = "m_grouped_offsets"):
    from moegemm.heuristics import SM90, GemmDesc
    from moegemm.heuristics import sm90_fp8_fp4_table as table
    from moegemm.heuristics.sm90_bf16 import tma_store_cols

    desc = GemmDesc(kind, 128, 2048, 2048, 4, ab_dtype="fp8_fp4", weights="prepared")
    cols = tma_store_cols(block_n, desc) if tma_store else 0
    stages = table.prefill_max_stages(block_m, block_n, cols, SM90)
    return table.make_prefill_config(block_m, block_n, stages, SM90, cols)


@pytest.mark.parametrize("block_m,block_n,tma_store", TILES, ids=TILE_IDS)
def test_offs_layout(block_m: int, block_n: int, tma_store: bool) -> None:
    import moegemm

    # N 2880: the last 128-row tile holds one 64-row block; K 2880: a partial last k-block.
    n, k = 2880, 2880
    sizes = [0, 1, 7, 300, 64, 0, 130, 129]
    total, groups = sum(sizes), len(sizes)
    g = gen(7 + block_m + block_n)
    _, a, sfa = activations(total + 16, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    spans = packed_spans(sizes)
    d = nan_bf16(total + 16, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a, sfa), weights_arg(b, sfb, "prepared"), d, offs=offsets(sizes),
        config=prefill_config(block_m, block_n, tma_store),
    )  # fmt: skip
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        got = d[r0 : r0 + rows]
        assert not got.isnan().any(), (grp, "rows left unwritten")
        assert calc_diff(got.float(), ref) < TOL, (grp, calc_diff(got.float(), ref))
    assert d[total:].isnan().all()


@pytest.mark.parametrize("block_m,block_n,tma_store", TILES, ids=TILE_IDS)
def test_masked_layout(block_m: int, block_n: int, tma_store: bool) -> None:
    import moegemm

    groups, max_m, n, k = 6, 90, 2048, 800
    masked = [0, 1, 8, 90, 33, 64]
    g = gen(11 + block_m + block_n)
    _, a, sfa = activations(groups, max_m, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    d = nan_bf16(groups, max_m, n)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
        (a, sfa), weights_arg(b, sfb, "prepared"), d, masked_m, 32,
        config=prefill_config(block_m, block_n, tma_store, "m_grouped_masked"),
    )  # fmt: skip
    for grp, rows in enumerate(masked):
        if rows:
            ref = ref_fp32(a[grp, :rows], sfa[grp, :rows], b[grp], sfb[grp])
            assert calc_diff(d[grp, :rows].float(), ref) < TOL, grp
        assert d[grp, rows:].isnan().all(), grp


@pytest.mark.parametrize("block_m,block_n,tma_store", [(64, 128, False), (128, 64, True)])
def test_dense_and_m_indices(block_m: int, block_n: int, tma_store: bool) -> None:
    """Dense (M 333, not a multiple of the tile) and m_indices (128-aligned segments, padding
    rows -1, an empty group)."""
    import moegemm

    n, k = 1536, 2880
    g = gen(21 + block_m)
    _, a, sfa = activations(333, k, gen=g)
    b, sfb = random_mxfp4(3, n=n, k=k, gen=g)
    d = nan_bf16(333 + 3, n)
    config = prefill_config(block_m, block_n, tma_store, "bf16_gemm_nt")
    moegemm.fp8_fp4_gemm_nt((a, sfa), weights_arg(b[0], sfb[0], "prepared"), d[:333], config=config)
    assert calc_diff(d[:333].float(), ref_fp32(a, sfa, b[0], sfb[0])) < TOL
    assert d[333:].isnan().all()
    sizes = [5, 0, 200]
    m_indices = torch.full((384,), -1, dtype=torch.int32, device="cuda")
    m_indices[0:5] = 0
    m_indices[128:328] = 2
    _, a2, sfa2 = activations(384, k, gen=g)
    d2 = nan_bf16(384, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a2, sfa2), weights_arg(b, sfb, "prepared"), d2, m_indices,
        config=prefill_config(block_m, block_n, tma_store, "m_grouped_contiguous"),
    )  # fmt: skip
    for grp, r0 in ((0, 0), (2, 128)):
        rows = sizes[grp]
        ref = ref_fp32(a2[r0 : r0 + rows], sfa2[r0 : r0 + rows], b[grp], sfb[grp])
        assert calc_diff(d2[r0 : r0 + rows].float(), ref) < TOL, grp


@pytest.mark.parametrize("block_m,block_n", [(64, 128), (128, 64), (128, 128)])
def test_exact_path(block_m: int, block_n: int) -> None:
    """Scale bytes spread over 60 binades inside 128 of K on rows 0-63 (every such 64-row block
    takes the exact passes, with a factor per weight row) beside a block within the window
    (rows 64-127, pass 0 only) in the same tile, K with a partial last 32-block group (K 480:
    the last k-block holds 3 of its 4 blocks)."""
    import moegemm
    from moegemm.api.mxfp4_weights import EXACT_FLAG

    n, k, groups, rows = 256, 480, 2, 150
    g = gen(9 + block_m + block_n)
    _, a, sfa = activations(groups, rows, k, gen=g)
    b, _ = random_mxfp4(groups, n=n, k=k, gen=g)
    sfb = torch.randint(100, 160, (groups, n, k // 32), device="cuda", generator=g).to(torch.uint8)
    sfb[:, 64:128] = torch.randint(115, 126, (groups, 64, k // 32), device="cuda", generator=g).to(
        torch.uint8
    )
    w = weights_arg(b, sfb, "prepared")
    flags = (w.sfb[:, : -(-k // 128)] & EXACT_FLAG) != 0
    assert flags[:, :, :64].all() and not flags[:, :, 64:128].any()
    d = nan_bf16(groups, rows, n)
    masked_m = torch.tensor([rows, 77], device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
        (a, sfa), w, d, masked_m, rows,
        config=prefill_config(block_m, block_n, False, "m_grouped_masked"),
    )  # fmt: skip
    for grp, m in enumerate((rows, 77)):
        ref = ref_fp32(a[grp, :m], sfa[grp, :m], b[grp], sfb[grp])
        assert calc_diff(d[grp, :m].double(), ref.double()) < TOL, grp
        assert d[grp, m:].isnan().all()


@pytest.mark.parametrize("forced", [False, True], ids=["pick", "prefill"])
def test_long_groups(forced: bool) -> None:
    """Thousands of rows per group, exact through the heuristics' pick (the cost model ranks the
    decode kernel's 128-token blocks and the prefill kernel within a few percent of each other
    there) and through the prefill kernel forced."""
    import moegemm

    n, k, groups = 2048, 1024, 2
    sizes = [2000, 1500]
    g = gen(31)
    _, a, sfa = activations(sum(sizes), k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    d = nan_bf16(sum(sizes), n)
    config = prefill_config(128, 128, False) if forced else None
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a, sfa), weights_arg(b, sfb, "prepared"), d, offs=offsets(sizes), config=config
    )
    spans = [(0, 0, sizes[0]), (1, sizes[0], sizes[1])]
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        assert calc_diff(d[r0 : r0 + rows].float(), ref) < TOL, grp
