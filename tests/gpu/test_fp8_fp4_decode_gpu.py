"""The FP8 x FP4 swapped kernels (impls/sm90_fp8_fp4_swap_ab_gemm.cuh: weights as register
operands, tokens on the wgmma's N side) through the public API with forced configs, so every
token block and warpgroup count runs: the table kernel on prepared weights (every layout,
tokens 8 to 160, 1 to 4 math warpgroups, its exact path) and the checkpoint-layout decode kernel
(offsets and masked, tokens 8 to 64); N and K tails, ragged and empty groups, scales that need
several passes, a NaN scale byte. NaN-poisoned outputs, FP32 references on the dequantized
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


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def decode_config(block_t: int, num_wg: int, form: str = "raw"):
    from moegemm.heuristics import SM90
    from moegemm.heuristics import sm90_fp8_fp4_decode as decode
    from moegemm.heuristics import sm90_fp8_fp4_table as table

    family = table if form == "prepared" else decode
    stages = family.max_stages(block_t, 64 * num_wg, SM90)
    return family.make_config(block_t, num_wg, stages, SM90)


CONFIGS = [(8, 1), (16, 4), (24, 3), (32, 2), (64, 2)]
TABLE_CONFIGS = [
    (8, 1), (8, 2), (16, 4), (24, 3), (32, 1), (32, 3), (48, 2), (48, 3), (64, 2), (64, 3), (96, 1),
    (128, 2), (160, 1), (160, 2)
]  # fmt: skip
FORM_CONFIGS = [("raw", *c) for c in CONFIGS] + [("prepared", *c) for c in TABLE_CONFIGS]
FORM_IDS = [f"{f}-t{t}w{w}" for f, t, w in FORM_CONFIGS]


@pytest.mark.parametrize("form,block_t,num_wg", FORM_CONFIGS, ids=FORM_IDS)
def test_offs_layout(block_t: int, num_wg: int, form: str) -> None:
    import moegemm

    # A partial last weight block (raw; prepared weights take whole 64-row blocks) and a
    # partial last 128-K block.
    n, k = (2856 if form == "raw" else 2880), 2880
    sizes = [0, 1, 7, 33, 64, 0, 130, 9, 171]
    total, groups = sum(sizes), len(sizes)
    g = gen(7 + block_t)
    _, a, sfa = activations(total + 16, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    spans = packed_spans(sizes)
    d = nan_bf16(total + 16, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a, sfa), weights_arg(b, sfb, form), d, offs=offsets(sizes),
        config=decode_config(block_t, num_wg, form),
    )  # fmt: skip
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        got = d[r0 : r0 + rows]
        assert not got.isnan().any(), (grp, "rows left unwritten")
        assert calc_diff(got.float(), ref) < TOL, (grp, calc_diff(got.float(), ref))
    assert d[total:].isnan().all()


@pytest.mark.parametrize("form,block_t,num_wg", FORM_CONFIGS, ids=FORM_IDS)
def test_masked_layout(block_t: int, num_wg: int, form: str) -> None:
    import moegemm

    groups, max_m, n, k = 6, 90, 2048, 768
    masked = [0, 1, 8, 90, 33, 64]
    g = gen(11 + block_t)
    _, a, sfa = activations(groups, max_m, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    d = nan_bf16(groups, max_m, n)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
        (a, sfa), weights_arg(b, sfb, form), d, masked_m, 32,
        config=decode_config(block_t, num_wg, form),
    )  # fmt: skip
    for grp, rows in enumerate(masked):
        if rows:
            ref = ref_fp32(a[grp, :rows], sfa[grp, :rows], b[grp], sfb[grp])
            assert calc_diff(d[grp, :rows].float(), ref) < TOL, grp
        assert d[grp, rows:].isnan().all(), grp


def test_scales_that_need_several_passes_and_a_nan_byte() -> None:
    """Scale bytes spread over 60 binades inside each row's 128 of K (2-4 passes a row), and one
    0xFF byte: that weight row's column is NaN for every token, every other one exact."""
    import moegemm

    n, k, groups, rows = 256, 512, 2, 16
    g = gen(5)
    _, a, sfa = activations(groups, rows, k, gen=g)
    b, _ = random_mxfp4(groups, n=n, k=k, gen=g)
    sfb = torch.randint(100, 160, (groups, n, k // 32), device="cuda", generator=g).to(torch.uint8)
    sfb[1, 77, 5] = 0xFF
    d = nan_bf16(groups, rows, n)
    masked_m = torch.full((groups,), rows, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
        (a, sfa), (b, sfb), d, masked_m, rows, config=decode_config(16, 4)
    )
    for grp in range(groups):
        ref = ref_fp32(a[grp], sfa[grp], b[grp], sfb[grp])
        finite = torch.ones(n, dtype=torch.bool, device="cuda")
        if grp == 1:
            finite[77] = False
            assert d[1, :, 77].isnan().all()
        got = d[grp][:, finite].float()
        assert not got.isnan().any()
        assert calc_diff(got.double(), ref[:, finite].double()) < TOL


@pytest.mark.parametrize("block_t,num_wg", [(16, 2), (128, 1), (8, 4)])
def test_table_kernel_dense_and_m_indices(block_t: int, num_wg: int) -> None:
    """The table kernel serves every layout of prepared weights: dense (M 77, not a multiple of
    a token block) and m_indices (128-aligned segments, padding rows -1, an empty group)."""
    import moegemm

    n, k = 1536, 2880
    g = gen(21 + block_t)
    config = decode_config(block_t, num_wg, "prepared")
    _, a, sfa = activations(77, k, gen=g)
    b, sfb = random_mxfp4(3, n=n, k=k, gen=g)
    w = weights_arg(b[0], sfb[0], "prepared")
    d = nan_bf16(77 + 3, n)
    moegemm.fp8_fp4_gemm_nt((a, sfa), w, d[:77], config=config)
    assert calc_diff(d[:77].float(), ref_fp32(a, sfa, b[0], sfb[0])) < TOL
    assert d[77:].isnan().all()
    sizes = [5, 0, 200]
    m_indices = torch.full((384,), -1, dtype=torch.int32, device="cuda")
    m_indices[0:5] = 0
    m_indices[128:328] = 2
    _, a2, sfa2 = activations(384, k, gen=g)
    d2 = nan_bf16(384, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a2, sfa2), weights_arg(b, sfb, "prepared"), d2, m_indices, config=config
    )
    for grp, r0 in ((0, 0), (2, 128)):
        rows = sizes[grp]
        ref = ref_fp32(a2[r0 : r0 + rows], sfa2[r0 : r0 + rows], b[grp], sfb[grp])
        assert calc_diff(d2[r0 : r0 + rows].float(), ref) < TOL, grp


def test_table_kernel_exact_path() -> None:
    """Prepared weights whose scale bytes spread over 60 binades inside 128 of K: every 64-row
    block takes the table kernel's exact path (per-32-block passes), and the result is exact;
    one block within the window beside them takes the fast path in the same call."""
    import moegemm
    from moegemm.api.mxfp4_weights import EXACT_FLAG

    n, k, groups, rows = 256, 640, 2, 16  # 5 k-blocks: an odd count
    g = gen(9)
    _, a, sfa = activations(groups, rows, k, gen=g)
    b, _ = random_mxfp4(groups, n=n, k=k, gen=g)
    sfb = torch.randint(100, 160, (groups, n, k // 32), device="cuda", generator=g).to(torch.uint8)
    sfb[:, 64:128] = torch.randint(115, 126, (groups, 64, k // 32), device="cuda", generator=g).to(
        torch.uint8
    )
    w = weights_arg(b, sfb, "prepared")
    flags = (w.sfb[:, : k // 128] & EXACT_FLAG) != 0
    assert flags[:, :, :64].all() and not flags[:, :, 64:128].any()
    for block_t, num_wg in ((16, 4), (48, 3), (64, 1)):
        d = nan_bf16(groups, rows, n)
        masked_m = torch.full((groups,), rows, device="cuda", dtype=torch.int32)
        moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
            (a, sfa), w, d, masked_m, rows, config=decode_config(block_t, num_wg, "prepared")
        )
        for grp in range(groups):
            ref = ref_fp32(a[grp], sfa[grp], b[grp], sfb[grp])
            assert calc_diff(d[grp].double(), ref.double()) < TOL, (block_t, grp)


@pytest.mark.parametrize("k", [96, 256, 384])
@pytest.mark.parametrize("block_t,num_wg", [(32, 1), (48, 3), (64, 2), (96, 2)])
def test_table_kernel_few_k_blocks(block_t: int, num_wg: int, k: int) -> None:
    """One, two and three k-blocks (the first partial): up to 64 tokens at one or two math
    warpgroups the kernel runs k-blocks in pairs, so a lone or odd last k-block pairs with zero
    registers; 96 tokens, and 48 at three warpgroups (two temporary sets), run them one at a
    time."""
    import moegemm

    n, m = 256, 50
    g = gen(31 + k + block_t)
    _, a, sfa = activations(m, k, gen=g)
    b, sfb = random_mxfp4(1, n=n, k=k, gen=g)
    d = nan_bf16(m, n)
    config = decode_config(block_t, num_wg, "prepared")
    moegemm.fp8_fp4_gemm_nt((a, sfa), weights_arg(b[0], sfb[0], "prepared"), d, config=config)
    assert calc_diff(d.float(), ref_fp32(a, sfa, b[0], sfb[0])) < TOL


@pytest.mark.parametrize("block_t,num_wg", [(48, 3), (8, 4)])
def test_table_kernel_walks_many_mostly_empty_groups(block_t: int, num_wg: int) -> None:
    """The table kernel reads its walk's next 32-group window before its stores: non-empty
    groups on both sides of window edges and the last group, offsets and masked layouts."""
    import moegemm

    num_groups, n, k = 200, 256, 256
    sizes = [0] * num_groups
    for grp, rows in {0: 3, 31: 1, 32: 50, 63: 17, 64: 7, 150: 33, 199: 40}.items():
        sizes[grp] = rows
    total = sum(sizes)
    g = gen(41 + block_t)
    _, a, sfa = activations(total + 8, k, gen=g)
    b, sfb = random_mxfp4(num_groups, n=n, k=k, gen=g)
    w = weights_arg(b, sfb, "prepared")
    config = decode_config(block_t, num_wg, "prepared")
    d = nan_bf16(total + 8, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), w, d, offs=offsets(sizes), config=config)
    spans = packed_spans(sizes)
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        assert calc_diff(d[r0 : r0 + rows].float(), ref) < TOL, grp
    assert d[total:].isnan().all()

    max_m = 48
    masked = [min(rows, max_m) for rows in sizes]
    _, ma, msfa = activations(num_groups, max_m, k, gen=g)
    md = nan_bf16(num_groups, max_m, n)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked((ma, msfa), w, md, masked_m, 1, config=config)
    for grp, rows in enumerate(masked):
        if rows:
            ref = ref_fp32(ma[grp, :rows], msfa[grp, :rows], b[grp], sfb[grp])
            assert calc_diff(md[grp, :rows].float(), ref) < TOL, grp
        assert md[grp, rows:].isnan().all(), grp
