"""Split tails on the GPU (experimental, built when MOEGEMM_EXPERIMENTAL_SPLIT_TAILS=1): in the
two-warpgroup kernel with 128-row tiles, a tile whose rows fit the first m64 atom (a group's
last m-block, the dense problem's last rows) gives each warpgroup half of the columns. Every
epilogue path of such tiles (TMA boxes that tile the half, register stores where they do not,
a half past N, rows crossing into the next group) against FP32 references, with outputs
poisoned and rows outside each group checked untouched."""

from __future__ import annotations

import pytest
import torch

import moegemm
from moegemm.testing import calc_diff

pytestmark = pytest.mark.gpu

TOL = 1e-5


@pytest.fixture(autouse=True)
def split_tails_on(monkeypatch):
    from moegemm.jit.codegen import SPLIT_TAILS_ENV

    monkeypatch.setenv(SPLIT_TAILS_ENV, "1")  # read when a forced config's kernel is generated


def bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)


def nan(*shape: int) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)


def split_configs(desc) -> list:
    """128-row two-warpgroup configs: TMA stores on the halves (n256 e64, n128 e64), TMA on
    full tiles but registers on the halves (n240 e16, n224 e32), registers only with an
    extended-N half (n96, n176)."""
    from moegemm.heuristics import SM90, sm90

    wanted = {
        (256, 64), (128, 64), (240, 16), (224, 32), (96, 0), (176, 0),
    }  # fmt: skip
    picked = {}
    for config in sm90.enumerate_configs(desc, SM90):
        lay = config.layout
        key = (lay.block_n, sm90.store_cols(config))
        if (
            lay.block_m == 128
            and config.launch.num_math_warpgroups == 2
            and lay.cluster_m == 1
            and not lay.swap_ab
            and key in wanted
            and sm90.is_legal(config, desc, SM90)
        ):
            picked.setdefault(key, config)
    assert set(picked) == wanted, sorted(picked)
    from moegemm.jit.codegen import sm90_bf16_gemm_spec

    for config in picked.values():  # the flag reached the code generator
        assert sm90_bf16_gemm_spec(config, "bf16", False, desc.kind).name.endswith("_split")
    return list(picked.values())


SIZES = [0, 1, 8, 63, 64, 65, 127, 128, 129, 192, 200, 300]


def test_offsets_split_tails() -> None:
    from moegemm.heuristics import GemmDesc

    num_groups, n, k = len(SIZES), 2880, 2880  # 2880 = 11 * 256 + 64: the last half is past N
    total = sum(SIZES)
    a, b = bf16(total, k), bf16(num_groups, n, k, scale=0.02)
    offs = torch.tensor(SIZES, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)
    desc = GemmDesc("m_grouped_offsets", total, n, k, num_groups, expected_m=total // num_groups)
    for config in split_configs(desc):
        storage = nan(total + 64, n)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, storage[:total], offs=offs, config=config)
        name = config.short_name()
        assert storage[total:].isnan().all(), name
        start = 0
        for g, rows in enumerate(SIZES):
            if rows:
                ref = a[start : start + rows].float() @ b[g].float().t()
                diff = calc_diff(storage[start : start + rows], ref)
                assert diff < TOL, f"{name} group {g} ({rows} rows): {diff:.2e}"
            start += rows


def test_masked_split_tails() -> None:
    from moegemm.heuristics import GemmDesc

    masked = [0, 1, 64, 65, 128, 200, 256, 40]
    num_groups, max_m, n, k = len(masked), 256, 4096, 776  # K: 12 blocks of 64 and 8 columns
    a, b = bf16(num_groups, max_m, k), bf16(num_groups, n, k, scale=0.02)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    desc = GemmDesc("m_grouped_masked", max_m, n, k, num_groups, expected_m=64)
    for config in split_configs(desc):
        d = nan(num_groups, max_m, n)
        moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 64, config=config)
        name = config.short_name()
        for g, rows in enumerate(masked):
            if rows:
                ref = a[g, :rows].float() @ b[g].float().t()
                assert calc_diff(d[g, :rows], ref) < TOL, f"{name} group {g}"
            assert d[g, rows:].isnan().all(), f"{name} group {g} wrote past its rows"


@pytest.mark.parametrize("m", [1060, 40])  # the last 36 rows, or the whole problem, split
def test_dense_split_tail(m: int) -> None:
    from moegemm.heuristics import GemmDesc

    n, k = 2880, 2048
    a, b = bf16(m, k), bf16(n, k, scale=0.02)
    desc = GemmDesc("bf16_gemm_nt", m, n, k)
    ref = a.float() @ b.float().t()
    for config in split_configs(desc):
        storage = nan(m + 64, n)
        moegemm.bf16_gemm_nt(a, b, storage[:m], config=config)
        assert calc_diff(storage[:m], ref) < TOL, config.short_name()
        assert storage[m:].isnan().all(), config.short_name()
