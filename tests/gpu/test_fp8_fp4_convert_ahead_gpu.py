"""The FP8 x FP4 convert-ahead kernel (impls/sm90_fp8_fp4_grouped_gemm.cuh on prepared weights
without a transform ring: a converter warpgroup writes an E4M3 copy of the weights into a
workspace, the FP8 mainloop reads it by TMA) through the public API with forced configs, both
tiles: every layout, ragged and empty groups, one group, N not a multiple of the tile, K not a
multiple of 128, a masked max_m of 90; back-to-back calls (fresh flags each), CUDA-graph replay
(the workspace allocated inside the capture), the pick on long groups, and weights with
exact-path blocks, which the kernel cannot carry: never picked, refused when forced.
NaN-poisoned outputs, FP32 references on the dequantized operands."""

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
# (block_n, store_cols): register stores, and the TMA-store epilogue
CONFIGS = [(128, 0), (192, 0), (192, 64)]


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def ca_config(block_n: int, store_cols: int = 0):
    from moegemm.heuristics import SM90
    from moegemm.heuristics import sm90_fp8_fp4_convert_ahead as ca

    return ca.make_config(block_n, ca.max_stages(block_n, store_cols, SM90), store_cols)


def windowed(b: torch.Tensor, sfb: torch.Tensor):
    w = weights_arg(b, sfb, "prepared")
    assert w.windowed, "random scales within the table's window"
    return w


@pytest.mark.parametrize("block_n,store_cols", CONFIGS)
def test_offs_layout(block_n: int, store_cols: int) -> None:
    import moegemm

    # N 2880: a partial last tile of either width; K 2880: a partial last k-block.
    n, k = 2880, 2880
    sizes = [0, 1, 7, 300, 64, 0, 130, 129]
    total, groups = sum(sizes), len(sizes)
    g = gen(7 + block_n)
    _, a, sfa = activations(total + 16, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    spans = packed_spans(sizes)
    d = nan_bf16(total + 16, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a, sfa), windowed(b, sfb), d, offs=offsets(sizes), config=ca_config(block_n, store_cols)
    )
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        got = d[r0 : r0 + rows]
        assert not got.isnan().any(), (grp, "rows left unwritten")
        assert calc_diff(got.float(), ref) < TOL, (grp, calc_diff(got.float(), ref))
    assert d[total:].isnan().all()


@pytest.mark.parametrize("block_n,store_cols", CONFIGS)
def test_masked_layout(block_n: int, store_cols: int) -> None:
    import moegemm

    groups, max_m, n, k = 6, 90, 2048, 800
    masked = [0, 1, 8, 90, 33, 64]
    g = gen(11 + block_n)
    _, a, sfa = activations(groups, max_m, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    d = nan_bf16(groups, max_m, n)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
        (a, sfa), windowed(b, sfb), d, masked_m, 32, config=ca_config(block_n, store_cols)
    )
    for grp, rows in enumerate(masked):
        if rows:
            ref = ref_fp32(a[grp, :rows], sfa[grp, :rows], b[grp], sfb[grp])
            assert calc_diff(d[grp, :rows].float(), ref) < TOL, grp
        assert d[grp, rows:].isnan().all(), grp


@pytest.mark.parametrize("block_n,store_cols", CONFIGS)
def test_dense_and_m_indices(block_n: int, store_cols: int) -> None:
    """Dense (M 333, one weight matrix) and m_indices (128-aligned segments, padding rows -1,
    an empty group)."""
    import moegemm

    n, k = 1536, 2880
    g = gen(21 + block_n)
    _, a, sfa = activations(333, k, gen=g)
    b, sfb = random_mxfp4(3, n=n, k=k, gen=g)
    d = nan_bf16(333 + 3, n)
    moegemm.fp8_fp4_gemm_nt(
        (a, sfa), windowed(b[0], sfb[0]), d[:333], config=ca_config(block_n, store_cols)
    )
    assert calc_diff(d[:333].float(), ref_fp32(a, sfa, b[0], sfb[0])) < TOL
    assert d[333:].isnan().all()
    sizes = [5, 0, 200]
    m_indices = torch.full((384,), -1, dtype=torch.int32, device="cuda")
    m_indices[0:5] = 0
    m_indices[128:328] = 2
    _, a2, sfa2 = activations(384, k, gen=g)
    d2 = nan_bf16(384, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a2, sfa2), windowed(b, sfb), d2, m_indices, config=ca_config(block_n, store_cols)
    )
    for grp, r0 in ((0, 0), (2, 128)):
        rows = sizes[grp]
        ref = ref_fp32(a2[r0 : r0 + rows], sfa2[r0 : r0 + rows], b[grp], sfb[grp])
        assert calc_diff(d2[r0 : r0 + rows].float(), ref) < TOL, grp


def test_back_to_back_and_graph_replay() -> None:
    """Two calls in a row on other weights (each call's flags start at zero), then the call
    captured into a CUDA graph and replayed with new group sizes and activations."""
    import moegemm

    n, k, groups = 1024, 1152, 4
    g = gen(41)
    total = 1200
    _, a, sfa = activations(total, k, gen=g)
    weights = [random_mxfp4(groups, n=n, k=k, gen=g) for _ in range(2)]
    prepared = [windowed(b, sfb) for b, sfb in weights]
    config = ca_config(192)
    offs = offsets([300, 0, 500, 400])
    outs = [nan_bf16(total, n) for _ in range(2)]
    for w, d in zip(prepared, outs):
        moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), w, d, offs=offs, config=config)
    spans = packed_spans([300, 0, 500, 400])
    for (b, sfb), d in zip(weights, outs):
        for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
            assert calc_diff(d[r0 : r0 + rows].float(), ref) < TOL, grp

    d = nan_bf16(total, n)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
            (a, sfa), prepared[0], d, offs=offs, config=config
        )
    b, sfb = weights[0]
    for sizes in ([1, 1000, 0, 199], [0, 0, 0, 1200], [600, 300, 200, 100]):
        offs.copy_(offsets(sizes))
        a.view(torch.uint8).copy_(a.view(torch.uint8).roll(3, dims=0))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        spans = packed_spans(sizes)
        for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
            assert calc_diff(d[r0 : r0 + rows].float(), ref) < TOL, (sizes, grp)


def test_long_groups_pick_convert_ahead() -> None:
    """Thousands of rows per group on windowed weights: the heuristics pick the convert-ahead
    kernel, and it is exact."""
    import moegemm
    from moegemm.families import select_config
    from moegemm.heuristics import SM90, GemmDesc
    from moegemm.heuristics.sm90_fp8_fp4_convert_ahead import is_convert_ahead

    n, k, groups = 4096, 2048, 8
    sizes = [2048, 1900, 2100, 2048, 0, 2300, 2048, 1800]
    total = sum(sizes)
    desc = GemmDesc("m_grouped_offsets", total, n, k, groups, ab_dtype="fp8_fp4",
                    expected_m=-(-total // groups), weights="prepared", windowed=True)  # fmt: skip
    assert is_convert_ahead(select_config(desc, SM90))
    g = gen(31)
    _, a, sfa = activations(total, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    d = nan_bf16(total, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), windowed(b, sfb), d, offs=offsets(sizes))
    spans = packed_spans(sizes)
    for (grp, r0, rows), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        assert calc_diff(d[r0 : r0 + rows].float(), ref) < TOL, grp


def test_exact_path_weights_stay_on_the_table_kernels() -> None:
    """Scales spanning 60 binades in a block: prepare_mxfp4_weights finds them (windowed False),
    the pick on long groups is a table kernel and exact, and the convert-ahead config forced
    is refused before any launch."""
    import dataclasses

    import moegemm
    from moegemm.families import select_config
    from moegemm.heuristics import SM90, GemmDesc
    from moegemm.heuristics.sm90_fp8_fp4_convert_ahead import is_convert_ahead

    n, k, groups, rows = 1024, 1024, 2, 2048
    g = gen(51)
    _, a, sfa = activations(groups * rows, k, gen=g)
    b, _ = random_mxfp4(groups, n=n, k=k, gen=g)
    sfb = torch.randint(100, 160, (groups, n, k // 32), device="cuda", generator=g).to(torch.uint8)
    w = weights_arg(b, sfb, "prepared")
    assert not w.windowed
    d = nan_bf16(groups * rows, n)
    offs = offsets([rows, rows])
    with pytest.raises(ValueError):
        moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
            (a, sfa), w, d, offs=offs, config=ca_config(128)
        )
    assert d.isnan().all(), "nothing launched"
    desc = GemmDesc("m_grouped_offsets", groups * rows, n, k, groups, ab_dtype="fp8_fp4",
                    expected_m=rows, weights="prepared")  # fmt: skip
    assert not is_convert_ahead(select_config(desc, SM90))
    assert is_convert_ahead(select_config(dataclasses.replace(desc, windowed=True), SM90))
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), w, d, offs=offs)
    spans = packed_spans([rows, rows])
    for (grp, r0, m), ref in zip(spans, grouped_refs(a, sfa, b, sfb, spans)):
        assert calc_diff(d[r0 : r0 + m].double(), ref.double()) < TOL, grp


def test_malformed_m_indices_do_not_hang() -> None:
    """An m_indices segment naming a group past the weights: nothing converts it and nothing
    waits for it (its rows' output is unspecified); the other groups stay exact."""
    import moegemm

    n, k, groups = 1024, 1024, 2
    g = gen(61)
    _, a, sfa = activations(384, k, gen=g)
    b, sfb = random_mxfp4(groups, n=n, k=k, gen=g)
    m_indices = torch.full((384,), -1, dtype=torch.int32, device="cuda")
    m_indices[0:100] = 0
    m_indices[128:228] = groups  # past the weights
    m_indices[256:356] = 1
    d = nan_bf16(384, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(
        (a, sfa), windowed(b, sfb), d, m_indices, config=ca_config(128)
    )
    torch.cuda.synchronize()
    for grp, r0 in ((0, 0), (1, 256)):
        ref = ref_fp32(a[r0 : r0 + 100], sfa[r0 : r0 + 100], b[grp], sfb[grp])
        assert calc_diff(d[r0 : r0 + 100].float(), ref) < TOL, grp
