"""The FP8 x FP4 (MXFP4 weights) family on the GPU: dense, m-grouped contiguous (m_indices and
offs) and masked, with the raw checkpoint weights and prepare_mxfp4_weights' layout, sfa
row-major and MN-major TMA-aligned, against FP32 references on the dequantized operands
(calc_diff < 1e-4; the worst seen is printed at the end with, as information, the error
against the unquantized BF16 product). Outputs are NaN-poisoned first: rows no group owns
must stay NaN. Also CUDA-graph replay with new group sizes, no host sync, determinism.

moegemm's FP8 x FP4 functions are looked up inside the tests, so the file collects (and
skips without a GPU) whatever the state of the API. Scale edge cases: test_fp8_fp4_exactness_gpu.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
import torch
from fp8_fp4_reference import (
    TOL,
    VS_BF16,
    activations,
    grouped_refs,
    nan_bf16,
    offsets,
    packed_spans,
    quantized_weights,
    random_mxfp4,
    record,
    ref_fp32,
    sfa_layout,
    weights_arg,
    write_summary,
)

from moegemm.testing import calc_diff

pytestmark = pytest.mark.gpu

FORMS = ["raw", "prepared"]
LAYOUTS = ["row", "mn"]
ALIGN = 128  # get_mk_alignment_for_contiguous_layout()


def api():
    import moegemm

    return moegemm


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


@pytest.fixture(scope="module", autouse=True)
def _report(request: pytest.FixtureRequest) -> Iterator[None]:
    """The worst calc_diff per family (and the info-only error against BF16), shown without -s."""
    yield
    write_summary(request.config, "fp8_fp4")
    _WEIGHTS.clear()
    _PREPARED.clear()


# Random weights are shared between tests of one shape (the G=256 case is 1.9 GB of FP4).
_WEIGHTS: dict[tuple[int, int, int], tuple[torch.Tensor, torch.Tensor]] = {}


_PREPARED: dict[tuple[int, int, int], object] = {}


def grouped_weights(num_groups: int, n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    key = (num_groups, n, k)
    if key not in _WEIGHTS:
        _WEIGHTS[key] = random_mxfp4(num_groups, n=n, k=k, gen=gen(n + k + num_groups))
    return _WEIGHTS[key]


def grouped_weights_arg(num_groups: int, n: int, k: int, form: str) -> object:
    """grouped_weights in `form`, the prepared ones made once per shape too."""
    b, sfb = grouped_weights(num_groups, n, k)
    if form == "raw":
        return (b, sfb)
    key = (num_groups, n, k)
    if key not in _PREPARED:
        _PREPARED[key] = weights_arg(b, sfb, form)
    return _PREPARED[key]


def check_group(name: str, got: torch.Tensor, ref: torch.Tensor, what: object) -> None:
    assert not got.isnan().any(), f"{what}: rows of a group left unwritten (NaN)"
    diff = record(name, calc_diff(got, ref))
    assert diff < TOL, f"{what}: calc_diff {diff:.3e}"


# ---- dense --------------------------------------------------------------------------------

# gpt-oss (N 5760 / 2880, K 2880: not a multiple of 128), DeepSeek (4096 x 7168, 7168 x 2048),
# Qwen3 (1536 x 2048, 2048 x 768); M from 1 to 2000, ragged.
DENSE = [(1, 5760, 2880), (77, 2880, 2880), (2000, 4096, 7168), (513, 7168, 2048),
         (8, 1536, 2048), (1000, 2048, 768)]  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("m,n,k", DENSE, ids=[f"M{m}-N{n}-K{k}" for m, n, k in DENSE])
def test_dense(m: int, n: int, k: int, form: str, layout: str) -> None:
    g = gen(m * 7 + n + k)
    x, a, sfa = activations(m, k, gen=g)
    w, b, sfb = quantized_weights(n=n, k=k, gen=g)
    storage = nan_bf16(m + 5, n)  # rows past M must stay untouched
    d = storage[:m]
    out = api().fp8_fp4_gemm_nt((a, sfa_layout(sfa, layout)), weights_arg(b, sfb, form), d)
    assert out is d
    check_group("dense", d, ref_fp32(a, sfa, b, sfb), (m, n, k, form, layout))
    assert storage[m:].isnan().all(), "rows past M were written"
    info = calc_diff(d, x.float() @ w.float().t())
    VS_BF16[f"dense N{n} K{k}"] = max(VS_BF16.get(f"dense N{n} K{k}", 0.0), info)


@pytest.mark.parametrize("form", FORMS)
def test_dense_strided_d_keeps_padding(form: str) -> None:
    """d rows with a stride past N (16-byte aligned, as BF16 d accepts): the padding columns
    are no part of D and must stay NaN."""
    m, n, k = 300, 2880, 2880
    g = gen(11)
    _, a, sfa = activations(m, k, gen=g)
    b, sfb = random_mxfp4(n=n, k=k, gen=g)
    storage = nan_bf16(m, n + 64)
    d = storage[:, :n]
    api().fp8_fp4_gemm_nt((a, sfa), weights_arg(b, sfb, form), d)
    check_group("dense", d, ref_fp32(a, sfa, b, sfb), form)
    assert storage[:, n:].isnan().all()


# ---- m-grouped contiguous -----------------------------------------------------------------


# (G, N, K, rows per group): G in {1, 8, 32, 128, 256 with only 8 non-empty}, ragged rows
# 0..2000 with 1 and non-multiples of 8, the shapes of gpt-oss, DeepSeek and Qwen3.
def grouped_cases() -> list[tuple[int, int, int, list[int]]]:
    rng = random.Random(1)
    sparse = [0] * 256
    for grp in rng.sample(range(255), 8):  # the last group stays empty: offs[-1] == offs[-2]
        sparse[grp] = rng.randint(1, 2000)
    return [
        (1, 2880, 2880, [1000]),
        (8, 5760, 2880, [0, 1, 2000, 77, 0, 513, 8, 31]),
        (32, 4096, 7168, [rng.randint(0, 300) for _ in range(32)]),
        (128, 2048, 768, [rng.choice([0, 1, 3, 9, 40, 129]) for _ in range(128)]),
        (256, 7168, 2048, sparse),
        (8, 1536, 2048, [rng.randint(0, 700) for _ in range(7)] + [1]),
    ]


CASES = grouped_cases()
IDS = [f"G{c[0]}-N{c[1]}-K{c[2]}" for c in CASES]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("num_groups,n,k,sizes", CASES, ids=IDS)
def test_offs_layout(
    num_groups: int, n: int, k: int, sizes: list[int], form: str, layout: str
) -> None:
    total, spare = sum(sizes), 40
    b, sfb = grouped_weights(num_groups, n, k)
    # A has rows past the last group too: they belong to no group and D's must stay NaN.
    _, a, sfa = activations(total + spare, k, gen=gen(total + n))
    d = nan_bf16(total + spare, n)
    ends = offsets(sizes)
    api().m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a, sfa_layout(sfa, layout)), grouped_weights_arg(num_groups, n, k, form), d, offs=ends
    )
    spans = packed_spans(sizes)
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        check_group("offs", d[r0 : r0 + rows], ref, (grp, rows, form, layout))
    assert d[total:].isnan().all(), "rows past offs[-1] were written"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("num_groups,n,k,sizes", CASES, ids=IDS)
def test_m_indices_layout(
    num_groups: int, n: int, k: int, sizes: list[int], form: str, layout: str
) -> None:
    # -1 padding rows have an unspecified output (as BF16 and DeepGEMM): not checked.
    padded = [-(-rows // ALIGN) * ALIGN for rows in sizes]
    total = max(sum(padded), ALIGN)
    m_indices = torch.full((total,), -1, dtype=torch.int32)
    spans, start = [], 0
    for grp, (rows, span) in enumerate(zip(sizes, padded)):
        m_indices[start : start + rows] = grp
        if rows:
            spans.append((grp, start, rows))
        start += span
    b, sfb = grouped_weights(num_groups, n, k)
    _, a, sfa = activations(total, k, gen=gen(total + 3 * n))
    d = nan_bf16(total, n)
    api().m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a, sfa_layout(sfa, layout)),
        grouped_weights_arg(num_groups, n, k, form),
        d,
        m_indices.cuda(),
    )
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        check_group("m_indices", d[r0 : r0 + rows], ref, (grp, rows, form, layout))


def test_checkpoint_tensors_fed_without_copy() -> None:
    """gpt-oss stores `blocks` [E, N, K/32, 16] and `scales` [E, N, K/32]: b is their view."""
    e, n, k = 4, 5760, 2880
    g = gen(21)
    blocks = torch.randint(0, 256, (e, n, k // 32, 16), device="cuda", generator=g).to(torch.uint8)
    scales = torch.randint(118, 124, (e, n, k // 32), device="cuda", generator=g).to(torch.uint8)
    b = blocks.view(e, n, k // 2)
    assert b.data_ptr() == blocks.data_ptr()
    sizes = [5, 0, 300, 64]
    _, a, sfa = activations(sum(sizes), k, gen=g)
    d = nan_bf16(sum(sizes), n)
    api().m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, scales), d, offs=offsets(sizes))
    spans = [(0, 0, 5), (2, 5, 300), (3, 305, 64)]
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, scales, spans)):
        check_group("offs", d[r0 : r0 + rows], ref, ("checkpoint", grp))


# ---- masked -------------------------------------------------------------------------------


# (G, max_m, N, K, masked_m, expected_m): zero rows, full max_m, one row, max_m = 90 (no tile
# multiple), many ragged groups, every group empty.
MASKED = [
    (8, 256, 4096, 7168, [0, 256, 1, 77, 130, 8, 0, 200], 96),
    (6, 90, 2880, 2880, [90, 0, 1, 45, 89, 64], 48),
    (32, 128, 1536, 2048, [random.Random(5).randint(0, 128) for _ in range(32)], 64),
    (4, 16, 2048, 768, [0, 0, 0, 0], 8),
]
MASKED_IDS = [f"G{c[0]}-maxm{c[1]}-N{c[2]}-K{c[3]}" for c in MASKED]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("num_groups,max_m,n,k,masked,expected_m", MASKED, ids=MASKED_IDS)
def test_masked_layout(
    num_groups: int, max_m: int, n: int, k: int, masked: list[int], expected_m: int, form: str,
    layout: str,
) -> None:  # fmt: skip
    g = gen(max_m + n)
    _, a, sfa = activations(num_groups, max_m, k, gen=g)
    b, sfb = random_mxfp4(num_groups, n=n, k=k, gen=g)
    d = nan_bf16(num_groups, max_m, n)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    api().m_grouped_fp8_fp4_gemm_nt_masked(
        (a, sfa_layout(sfa, layout)), weights_arg(b, sfb, form), d, masked_m, expected_m
    )
    for grp, rows in enumerate(masked):
        if rows:
            ref = ref_fp32(a[grp, :rows], sfa[grp, :rows], b[grp], sfb[grp])
            check_group("masked", d[grp, :rows], ref, (grp, rows, form, layout))
        assert d[grp, rows:].isnan().all(), f"rows past masked_m[{grp}] = {rows} were written"


# ---- every tile shape ---------------------------------------------------------------------


def tile_configs(desc) -> list:
    """A few configs of the family: per (block_m, swap_ab), the smallest and largest block_n."""
    from moegemm.families import enumerate_configs
    from moegemm.heuristics import SM90

    picked: dict[tuple, object] = {}
    for c in enumerate_configs(desc, SM90):
        for end in ("min", "max"):
            key = (c.layout.block_m, c.layout.swap_ab, end)
            best = picked.get(key)
            better = best is None or (
                c.layout.block_n < best.layout.block_n
                if end == "min"
                else c.layout.block_n > best.layout.block_n
            )
            if better:
                picked[key] = c
    configs = list({c.short_name(): c for c in picked.values()}.values())
    assert configs, "the heuristics enumerate no FP8 x FP4 config"
    return configs[:8]


@pytest.mark.parametrize("form", FORMS)
def test_forced_tiles_with_n_and_k_tails(form: str) -> None:
    """N = 2856 (a partial last n-block for every block_n > 8; prepared weights take whole
    64-row blocks: 2880, a partial last block of the wider tiles), K = 2880 (a partial last
    128-K block), ragged groups: every config the heuristics may pick computes the same D."""
    from moegemm.heuristics import GemmDesc

    n, k = (2856 if form == "raw" else 2880), 2880
    sizes = [0, 1, 7, 33, 64, 65, 0, 200, 9, 128]
    total, groups = sum(sizes), len(sizes)
    g = gen(31)
    _, a, sfa = activations(total + 24, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    w = weights_arg(b, sfb, form)
    spans = packed_spans(sizes)
    refs = grouped_refs(a, sfa, b, sfb, spans)
    desc = GemmDesc("m_grouped_offsets", total + 24, n, k, groups, ab_dtype="fp8_fp4",
                    expected_m=total // groups, weights=form)  # fmt: skip
    for config in tile_configs(desc):
        d = nan_bf16(total + 24, n)
        api().m_grouped_fp8_fp4_gemm_nt_contiguous(
            (a, sfa), w, d, offs=offsets(sizes), config=config
        )
        for (grp, r0, rows), ref in zip(spans, refs):
            check_group("forced tiles", d[r0 : r0 + rows], ref, (config.short_name(), grp))
        assert d[total:].isnan().all(), config.short_name()


# ---- graphs, host sync, determinism, empty problems ---------------------------------------


def test_graph_replay_with_new_group_sizes() -> None:
    mg = api()
    groups, max_m, n, k, total = 8, 90, 2048, 2880, 600
    g = gen(41)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    prepared = weights_arg(b, sfb, "prepared")
    _, ma, msfa = activations(groups, max_m, k, gen=g)
    msfa_mn = sfa_layout(msfa, "mn")
    md = nan_bf16(groups, max_m, n)
    masked_m = torch.zeros(groups, device="cuda", dtype=torch.int32)
    _, pa, psfa = activations(total, k, gen=g)
    pd = nan_bf16(total, n)
    offs = torch.zeros(groups, device="cuda", dtype=torch.int32)
    _, ia, isfa = activations(groups * ALIGN, k, gen=g)
    idd = nan_bf16(groups * ALIGN, n)
    m_indices = torch.full((groups * ALIGN,), -1, device="cuda", dtype=torch.int32)

    def calls() -> None:
        mg.m_grouped_fp8_fp4_gemm_nt_masked((ma, msfa_mn), (b, sfb), md, masked_m, 32)
        mg.m_grouped_fp8_fp4_gemm_nt_contiguous((pa, psfa), prepared, pd, offs=offs)
        mg.m_grouped_fp8_fp4_gemm_nt_contiguous((ia, isfa), (b, sfb), idd, m_indices)

    calls()  # compile and plan outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        calls()
    rng = random.Random(4)
    for _ in range(3):
        masked = [rng.randint(0, max_m) for _ in range(groups)]
        ends = sorted(rng.randint(0, total) for _ in range(groups))  # rows past ends[-1]: none
        sizes = [hi - lo for lo, hi in zip([0] + ends[:-1], ends)]
        per_group = [rng.choice([0, 1, 50, 128]) for _ in range(groups)]
        masked_m.copy_(torch.tensor(masked, dtype=torch.int32))
        offs.copy_(offsets(sizes))
        idx = torch.full((groups * ALIGN,), -1, dtype=torch.int32)
        for grp, rows in enumerate(per_group):
            idx[grp * ALIGN : grp * ALIGN + rows] = grp
        m_indices.copy_(idx)
        for t in (ma, pa, ia):  # new activations too (any FP8 row with any scale is an input)
            t.view(torch.uint8).copy_(t.view(torch.uint8).roll(1 + rng.randint(0, 9), dims=-2))
        for t in (md, pd, idd):
            t.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for grp, rows in enumerate(masked):
            if rows:
                ref = ref_fp32(ma[grp, :rows], msfa[grp, :rows], b[grp], sfb[grp])
                check_group("graph", md[grp, :rows], ref, ("masked", grp, masked))
            assert md[grp, rows:].isnan().all()
        start = 0
        for grp, rows in enumerate(sizes):
            if rows:
                r = slice(start, start + rows)
                check_group(
                    "graph", pd[r], ref_fp32(pa[r], psfa[r], b[grp], sfb[grp]), ("offs", grp)
                )
            start += rows
        assert pd[start:].isnan().all()
        for grp, rows in enumerate(per_group):
            if rows:
                r = slice(grp * ALIGN, grp * ALIGN + rows)
                ref = ref_fp32(ia[r], isfa[r], b[grp], sfb[grp])
                check_group("graph", idd[r], ref, ("m_indices", grp))


def test_no_host_synchronization() -> None:
    mg = api()
    k, n = 2048, 1536
    g = gen(51)
    b, sfb = random_mxfp4(3, n=n, k=k, gen=g)
    prepared = weights_arg(b, sfb, "prepared")  # may scan the scales: before the check
    prepared_2d = weights_arg(b[1], sfb[1], "prepared")
    sizes = [40, 0, 90]
    offs = offsets(sizes)
    _, a, sfa = activations(sum(sizes), k, gen=g)
    sfa_mn = sfa_layout(sfa, "mn")
    d, d2 = nan_bf16(sum(sizes), n), nan_bf16(sum(sizes), n)
    m_indices = torch.full((384,), -1, device="cuda", dtype=torch.int32)
    m_indices[:40] = 0
    m_indices[256:346] = 2
    _, ia, isfa = activations(384, k, gen=g)
    id_ = nan_bf16(384, n)
    _, ma, msfa = activations(3, 64, k, gen=g)
    md = nan_bf16(3, 64, n)
    masked_m = torch.tensor([5, 64, 0], device="cuda", dtype=torch.int32)
    dd = nan_bf16(sum(sizes), n)

    def calls() -> None:
        mg.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, sfb), d, offs=offs)
        mg.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa_mn), prepared, d2, offs=offs)
        mg.m_grouped_fp8_fp4_gemm_nt_contiguous((ia, isfa), (b, sfb), id_, m_indices)
        mg.m_grouped_fp8_fp4_gemm_nt_masked((ma, msfa), prepared, md, masked_m, 32)
        mg.fp8_fp4_gemm_nt((a, sfa), (b[1], sfb[1]), dd)
        mg.fp8_fp4_gemm_nt((a, sfa_mn), prepared_2d, dd)

    calls()  # compile and load first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        calls()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    check_group("no sync", d[:40], ref_fp32(a[:40], sfa[:40], b[0], sfb[0]), "offs")
    check_group("no sync", d2[40:], ref_fp32(a[40:], sfa[40:], b[2], sfb[2]), "offs prepared")
    check_group("no sync", md[0, :5], ref_fp32(ma[0, :5], msfa[0, :5], b[0], sfb[0]), "masked")
    check_group("no sync", dd, ref_fp32(a, sfa, b[1], sfb[1]), "dense")


def test_bitwise_deterministic() -> None:
    mg = api()
    k, n = 7168, 4096
    g = gen(61)
    b, sfb = random_mxfp4(4, n=n, k=k, gen=g)
    sizes = [300, 0, 1000, 17]
    offs = offsets(sizes)
    _, a, sfa = activations(sum(sizes), k, gen=g)
    _, ma, msfa = activations(4, 96, k, gen=g)
    masked_m = torch.tensor([96, 0, 3, 50], device="cuda", dtype=torch.int32)
    for form in FORMS:
        w = weights_arg(b, sfb, form)
        w0 = weights_arg(b[0], sfb[0], form)
        runs = []
        for _ in range(2):
            d, md, dd = nan_bf16(sum(sizes), n), nan_bf16(4, 96, n), nan_bf16(sum(sizes), n)
            mg.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), w, d, offs=offs)
            mg.m_grouped_fp8_fp4_gemm_nt_masked((ma, msfa), w, md, masked_m, 40)
            mg.fp8_fp4_gemm_nt((a, sfa), w0, dd)
            runs.append((d, md, dd))
        for first, second, what in zip(runs[0], runs[1], ("offs", "masked", "dense")):
            # NaN == NaN bitwise: compare the bits, so unwritten rows compare too.
            assert torch.equal(first.view(torch.int16), second.view(torch.int16)), (form, what)


def test_empty_problems_write_nothing() -> None:
    mg = api()
    k, n = 768, 2048
    g = gen(71)
    b, sfb = random_mxfp4(8, n=n, k=k, gen=g)
    _, a, sfa = activations(64, k, gen=g)
    d = nan_bf16(64, n)
    zeros = torch.zeros(8, device="cuda", dtype=torch.int32)
    mg.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, sfb), d, offs=zeros)
    _, ma, msfa = activations(8, 16, k, gen=g)
    md = nan_bf16(8, 16, n)
    mg.m_grouped_fp8_fp4_gemm_nt_masked((ma, msfa), (b, sfb), md, zeros, 1)
    empty_a = a[:0]
    mg.fp8_fp4_gemm_nt((empty_a, sfa[:0]), (b[0], sfb[0]), d[:0])
    torch.cuda.synchronize()
    assert d.isnan().all() and md.isnan().all()
