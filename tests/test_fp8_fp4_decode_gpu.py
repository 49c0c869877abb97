"""The FP8 x FP4 decode kernel (impls/sm90_fp8_fp4_swap_ab_gemm.cuh: weights as register
operands, tokens on the wgmma's N side) through the public API with forced configs (the
heuristics pick it at decode; forcing covers every token block and warpgroup count): offsets and
masked layouts, both weight forms, token blocks 8 to 64 and 1 to 4 math warpgroups, N and K tails, ragged and empty groups, scales that need several
passes, a NaN scale byte. NaN-poisoned outputs, FP32 references on the dequantized operands."""

from __future__ import annotations

import pytest
import torch
from fp8_fp4_reference import (
    activations,
    grouped_refs,
    nan_bf16,
    offsets,
    random_mxfp4,
    ref_fp32,
    weights_arg,
)

from moegemm.testing import calc_diff

pytestmark = pytest.mark.gpu
TOL = 1e-4


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def decode_config(block_t: int, num_wg: int):
    from moegemm.heuristics import SM90
    from moegemm.heuristics import sm90_fp8_fp4_decode as decode

    stages = decode.max_stages(block_t, 64 * num_wg, SM90)
    return decode.make_config(block_t, num_wg, stages, SM90)


CONFIGS = [(8, 1), (16, 4), (24, 3), (32, 2), (64, 2)]


@pytest.mark.parametrize("form", ["raw", "prepared"])
@pytest.mark.parametrize("block_t,num_wg", CONFIGS)
def test_offs_layout(block_t: int, num_wg: int, form: str) -> None:
    import moegemm

    n, k = 2856, 2880  # a partial last weight block and a partial last 128-K block
    sizes = [0, 1, 7, 33, 64, 0, 130, 9]
    total, groups = sum(sizes), len(sizes)
    g = gen(7 + block_t)
    _, a, sfa = activations(total + 16, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    spans, start = [], 0
    for grp, rows in enumerate(sizes):
        if rows:
            spans.append((grp, start, rows))
        start += rows
    d = nan_bf16(total + 16, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a, sfa), weights_arg(b, sfb, form), d, offs=offsets(sizes),
        config=decode_config(block_t, num_wg),
    )  # fmt: skip
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        got = d[r0 : r0 + rows]
        assert not got.isnan().any(), (grp, "rows left unwritten")
        assert calc_diff(got.float(), ref) < TOL, (grp, calc_diff(got.float(), ref))
    assert d[total:].isnan().all()


@pytest.mark.parametrize("form", ["raw", "prepared"])
@pytest.mark.parametrize("block_t,num_wg", CONFIGS)
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
        config=decode_config(block_t, num_wg),
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
