"""The FP8 x FP4 table decode kernel with its last wave split along K (Layout.split_tail,
scheduler/tail_split_scheduler.cuh) through the public API (forced configs, and the pick where
it splits), on CTA counts (set_num_sms) chosen so that the last round splits 2, 3 or 4 ways
after whole rounds, or the whole problem splits where it has fewer tiles than CTAs: offsets and
masked layouts, ragged and empty groups, K not a multiple of 128, blocks on the exact path.
NaN-poisoned outputs against FP32 on the dequantized operands, and the same bits on a second
launch and in a CUDA graph replay (the parts are added in a fixed order)."""

from __future__ import annotations

import math

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


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def split_config(block_t: int, num_wg: int, parts: int):
    from moegemm.heuristics import SM90
    from moegemm.heuristics import sm90_fp8_fp4_table as table

    stages = table.max_stages(block_t, 64 * num_wg, SM90)
    return table.with_split_tail(table.make_config(block_t, num_wg, stages, SM90), parts)


def tiles_of(rows: list[int], block_t: int, num_wg: int, n: int) -> int:
    return sum(math.ceil(r / block_t) for r in rows) * math.ceil(n / (64 * num_wg))


def ctas_that_split(tiles: int, parts: int, whole: bool) -> int:
    """A CTA count (at most the GPU's SMs) whose plan splits the last round into `parts` parts
    after at least one whole round (`whole`), or splits every tile (fewer tiles than CTAs)."""
    from moegemm.heuristics.sm90_fp8_fp4_table import split_tail_plan

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for ctas in range(sms, 1, -1):
        rounds, tail, got = split_tail_plan(tiles, ctas, 1 << 16, parts)
        if got == parts and tail and (rounds >= 1) == whole:
            return ctas
    pytest.skip(f"no CTA count splits {tiles} tiles {parts} ways (whole rounds: {whole})")


@pytest.fixture
def num_sms():
    import moegemm

    yield moegemm.set_num_sms
    moegemm.set_num_sms(None)


CASES = [(48, 3, 3, True), (48, 3, 2, False), (16, 4, 4, True), (64, 2, 2, True), (32, 3, 4, False)]
IDS = [f"t{t}w{w}q{q}{'-whole' if h else '-all'}" for t, w, q, h in CASES]


@pytest.mark.parametrize("block_t,num_wg,parts,whole", CASES, ids=IDS)
def test_masked(block_t: int, num_wg: int, parts: int, whole: bool, num_sms) -> None:
    import moegemm

    groups, max_m, n, k = 6, 90, 2048, 2880  # K: 22.5 k-blocks
    masked = [0, 1, 8, 90, 33, 64]
    num_sms(ctas_that_split(tiles_of(masked, block_t, num_wg, n), parts, whole))
    g = gen(3 + block_t + parts)
    _, a, sfa = activations(groups, max_m, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    w = weights_arg(b, sfb, "prepared")
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    config = split_config(block_t, num_wg, parts)
    d = nan_bf16(groups, max_m, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), w, d, masked_m, 32, config=config)
    for grp, rows in enumerate(masked):
        if rows:
            ref = ref_fp32(a[grp, :rows], sfa[grp, :rows], b[grp], sfb[grp])
            assert calc_diff(d[grp, :rows].float(), ref) < TOL, grp
        assert d[grp, rows:].isnan().all(), grp
    again = nan_bf16(groups, max_m, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), w, again, masked_m, 32, config=config)
    assert torch.equal(again.view(torch.int16), d.view(torch.int16))


@pytest.mark.parametrize("block_t,num_wg,parts,whole", CASES, ids=IDS)
def test_offs(block_t: int, num_wg: int, parts: int, whole: bool, num_sms) -> None:
    import moegemm

    n, k = 2880, 2880
    sizes = [0, 1, 7, 33, 64, 0, 130, 9, 171]
    total, groups = sum(sizes), len(sizes)
    num_sms(ctas_that_split(tiles_of(sizes, block_t, num_wg, n), parts, whole))
    g = gen(17 + block_t + parts)
    _, a, sfa = activations(total + 16, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    spans = packed_spans(sizes)
    d = nan_bf16(total + 16, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a, sfa), weights_arg(b, sfb, "prepared"), d, offs=offsets(sizes),
        config=split_config(block_t, num_wg, parts),
    )  # fmt: skip
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        got = d[r0 : r0 + rows]
        assert not got.isnan().any(), (grp, "rows left unwritten")
        assert calc_diff(got.float(), ref) < TOL, (grp, calc_diff(got.float(), ref))
    assert d[total:].isnan().all()


def test_exact_path_blocks_in_split_parts(num_sms) -> None:
    """Scale bytes over 60 binades in every other 64-row block: those blocks take the exact
    passes, which read their scale bytes at the part's own k-blocks."""
    import moegemm
    from moegemm.api.mxfp4_weights import EXACT_FLAG

    groups, rows, n, k = 4, 40, 1024, 1280  # 10 k-blocks
    g = gen(41)
    _, a, sfa = activations(groups, rows, k, gen=g)
    b, _ = random_mxfp4(groups, n=n, k=k, gen=g)
    sfb = torch.randint(115, 126, (groups, n, k // 32), device="cuda", generator=g)
    for blk in range(0, n // 64, 2):
        sfb[:, 64 * blk : 64 * blk + 64] = torch.randint(
            100, 160, (groups, 64, k // 32), device="cuda", generator=g
        )
    sfb = sfb.to(torch.uint8)
    w = weights_arg(b, sfb, "prepared")
    assert ((w.sfb[:, : k // 128] & EXACT_FLAG) != 0).any()
    num_sms(ctas_that_split(tiles_of([rows] * groups, 48, 3, n), 3, True))
    d = nan_bf16(groups, rows, n)
    masked_m = torch.full((groups,), rows, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
        (a, sfa), w, d, masked_m, rows, config=split_config(48, 3, 3)
    )
    for grp in range(groups):
        ref = ref_fp32(a[grp], sfa[grp], b[grp], sfb[grp])
        assert calc_diff(d[grp].double(), ref.double()) < TOL, grp


def test_graph_replay_matches_eager(num_sms) -> None:
    """Captured once, replayed on new rows: the same bits as an eager launch (a fresh workspace
    and zeroed tickets each call, from the graph's pool under capture)."""
    import moegemm

    groups, max_m, n, k = 8, 48, 2048, 1024
    masked = [48, 0, 17, 40, 48, 3, 33, 48]
    num_sms(ctas_that_split(tiles_of(masked, 48, 3, n), 3, True))
    g = gen(53)
    _, a, sfa = activations(groups, max_m, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    w = weights_arg(b, sfb, "prepared")
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    config = split_config(48, 3, 3)
    d = nan_bf16(groups, max_m, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), w, d, masked_m, 32, config=config)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moegemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), w, d, masked_m, 32, config=config)
    _, a_new, sfa_new = activations(groups, max_m, k, gen=g)
    a.copy_(a_new)
    sfa.copy_(sfa_new)
    d.fill_(float("nan"))
    graph.replay()
    eager = nan_bf16(groups, max_m, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), w, eager, masked_m, 32, config=config)
    torch.cuda.synchronize()
    for grp, rows in enumerate(masked):
        if rows:
            assert torch.equal(d[grp, :rows].view(torch.int16), eager[grp, :rows].view(torch.int16))
            ref = ref_fp32(a[grp, :rows], sfa[grp, :rows], b[grp], sfb[grp])
            assert calc_diff(d[grp, :rows].float(), ref) < TOL, grp


def test_the_pick_splits_and_is_exact() -> None:
    """The heuristics' own pick where it splits (DeepSeek-V3 L1 at 32 rows a group: 5.3 waves of
    long tiles), through the plain call with no config: ragged and empty groups, the
    transient workspace from the caching allocator."""
    import moegemm
    from moegemm.families import select_config
    from moegemm.heuristics import SM90, GemmDesc

    groups, max_m, n, k = 32, 128, 4096, 7168
    desc = GemmDesc("m_grouped_masked", max_m, n, k, groups, ab_dtype="fp8_fp4",
                    expected_m=32, weights="prepared")  # fmt: skip
    assert select_config(desc, SM90).layout.split_tail
    g = gen(71)
    rows = torch.randint(22, 43, (groups,), generator=torch.Generator().manual_seed(5))
    rows[3] = 0
    _, a, sfa = activations(groups, max_m, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    w = weights_arg(b, sfb, "prepared")
    masked_m = rows.to(device="cuda", dtype=torch.int32)
    d = nan_bf16(groups, max_m, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), w, d, masked_m, 32)
    for grp, r in enumerate(rows.tolist()):
        if r:
            ref = ref_fp32(a[grp, :r], sfa[grp, :r], b[grp], sfb[grp])
            assert calc_diff(d[grp, :r].float(), ref) < TOL, grp
        assert d[grp, r:].isnan().all(), grp
