"""The swapped-operand decode kernel (weights on the wgmma's M side) on the GPU: offsets and
masked layouts against FP32 references, outputs poisoned, every tile shape the heuristics may
pick, with group, N and K tails; determinism and CUDA-graph replay with new group sizes."""

from __future__ import annotations

import pytest
import torch

import moegemm
from moegemm.families import enumerate_configs
from moegemm.heuristics import SM90, GemmDesc
from moegemm.testing import calc_diff

pytestmark = pytest.mark.gpu

TOL = 1e-5
# N = 44 * 64 + 40: the last n-block of 64 weight rows is partly past N, and of 128 rows has
# one warpgroup partly past N and one idle; K = 15 * 64 + 40: a K tail.
N, K = 2856, 1000


def bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)


def nan(*shape: int) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)


def swap_configs(desc: GemmDesc) -> list:
    configs = [c for c in enumerate_configs(desc, SM90) if c.layout.swap_ab]
    assert {c.layout.block_m for c in configs} == {8, 16, 32, 48, 64, 96, 128}
    assert {c.layout.block_n for c in configs} == {64, 128}
    return configs


def test_swap_ab_offs_layout() -> None:
    # Empty groups, one row, rows that are no multiple of 8, groups spanning several token
    # blocks of every block_m, a last group ending the tensor.
    # 24 rows past the last group's end belong to no group and must stay untouched.
    sizes = [0, 1, 7, 33, 64, 65, 0, 200, 9, 128]
    total, groups, spare = sum(sizes), len(sizes), 24
    a, b = bf16(total + spare, K), bf16(groups, N, K, scale=0.02)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    desc = GemmDesc("m_grouped_offsets", total + spare, N, K, groups, expected_m=total // groups)
    refs, start = [], 0
    for g, rows in enumerate(sizes):
        refs.append(a[start : start + rows].float() @ b[g].float().t())
        start += rows
    for config in swap_configs(desc):
        d = nan(total + spare, N)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs, config=config)
        name = config.short_name()
        assert d[total:].isnan().all(), name
        assert not d[:total].isnan().any(), name
        start = 0
        for g, rows in enumerate(sizes):
            if rows:
                assert calc_diff(d[start : start + rows], refs[g]) < TOL, (name, g)
            start += rows
        again = nan(total + spare, N)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, again, offs=offs, config=config)
        assert torch.equal(again[:total], d[:total]), f"{name}: not deterministic"


def test_swap_ab_masked_layout_and_graph_replay() -> None:
    groups, max_m = 6, 160
    a, b = bf16(groups, max_m, K), bf16(groups, N, K, scale=0.02)
    desc = GemmDesc("m_grouped_masked", max_m, N, K, groups, expected_m=40)
    for config in swap_configs(desc):
        name = config.short_name()
        masked_m = torch.tensor([0, 1, 40, 160, 97, 8], device="cuda", dtype=torch.int32)
        d = nan(groups, max_m, N)

        def run(d=d, masked_m=masked_m, config=config) -> None:
            moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 40, config=config)

        run()  # compile and plan outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            run()
        for rows_list in ([0, 1, 40, 160, 97, 8], [160, 0, 3, 64, 65, 0]):
            masked_m.copy_(torch.tensor(rows_list, dtype=torch.int32))
            d.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            for g, rows in enumerate(rows_list):
                assert d[g, rows:].isnan().all(), (name, g)
                if rows:
                    ref = a[g, :rows].float() @ b[g].float().t()
                    assert calc_diff(d[g, :rows], ref) < TOL, (name, g, rows_list)


def test_heuristic_picks_swap_ab_where_it_runs() -> None:
    """The model sends 8 rows per group to the swapped kernel; the default path runs it."""
    from moegemm.families import select_config

    groups, rows, n, k = 32, 8, 4096, 7168
    desc = GemmDesc("m_grouped_offsets", groups * rows, n, k, groups, expected_m=rows)
    assert select_config(desc, SM90).layout.swap_ab, "the model should swap for 8 rows per group"
    a, b = bf16(groups * rows, k), bf16(groups, n, k, scale=0.02)
    offs = (torch.arange(1, groups + 1, device="cuda") * rows).to(torch.int32)
    d = nan(groups * rows, n)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)
    for g in range(groups):
        ref = a[g * rows : (g + 1) * rows].float() @ b[g].float().t()
        assert calc_diff(d[g * rows : (g + 1) * rows], ref) < TOL
