"""The BF16 grouped family on the GPU: m-grouped (m_indices, offs, masked) and k-grouped,
against FP32 references on the exact operands, outputs poisoned first."""

from __future__ import annotations

import random

import pytest
import torch

import moegemm
from moegemm.testing import calc_diff

pytestmark = pytest.mark.gpu

TOL = 1e-5
ALIGN = 128  # get_mk_alignment_for_contiguous_layout()


def bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)


def nan(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


def offsets(sizes: list[int]) -> torch.Tensor:
    return torch.tensor(sizes, device="cuda", dtype=torch.int32).cumsum(0).to(torch.int32)


def max_group_diff(d: torch.Tensor, a: torch.Tensor, b: torch.Tensor, sizes: list[int]) -> float:
    """Largest calc_diff over non-empty groups of a packed (offs) layout."""
    worst, start = 0.0, 0
    for g, rows in enumerate(sizes):
        if rows:
            ref = a[start : start + rows].float() @ b[g].float().t()
            worst = max(worst, calc_diff(d[start : start + rows], ref))
        start += rows
    return worst


# (G, N, K, rows per group): G in {1, 4, 32, 128, 256 with 8 non-empty}, ragged 0..2000 with 1
# and non-multiples of 8, every K in {2880, 7168, 2048, 768} and N in {2880, 5760, 4096, 7168}.
def cases() -> list[tuple[int, int, int, list[int]]]:
    rng = random.Random(1)
    sparse = [0] * 256
    for g in rng.sample(range(256), 8):
        sparse[g] = rng.randint(1, 2000)
    return [
        (1, 2880, 2880, [1000]),
        (4, 5760, 2880, [0, 1, 2000, 77]),
        (32, 4096, 7168, [rng.randint(0, 300) for _ in range(32)]),
        (128, 2880, 768, [rng.choice([0, 1, 3, 9, 40, 129]) for _ in range(128)]),
        (256, 7168, 2048, sparse),
    ]


CASES = cases()
IDS = [f"G{c[0]}-N{c[1]}-K{c[2]}" for c in CASES]


@pytest.mark.parametrize("num_groups,n,k,sizes", CASES, ids=IDS)
def test_offs_layout(num_groups: int, n: int, k: int, sizes: list[int]) -> None:
    total = sum(sizes)
    a, b = bf16(total, k), bf16(num_groups, n, k, scale=0.02)
    storage = nan(total + 64, n)  # rows past the last group must stay untouched
    d = storage[:total]
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offsets(sizes))
    assert not d.isnan().any(), "every row of every group must be written"
    assert max_group_diff(d, a, b, sizes) < TOL
    assert storage[total:].isnan().all()


@pytest.mark.parametrize("num_groups,n,k,sizes", CASES, ids=IDS)
def test_m_indices_layout(num_groups: int, n: int, k: int, sizes: list[int]) -> None:
    padded = [-(-rows // ALIGN) * ALIGN for rows in sizes]
    total = sum(padded)
    m_indices = torch.full((total,), -1, dtype=torch.int32)
    a = bf16(total, k)
    start = 0
    for g, (rows, span) in enumerate(zip(sizes, padded)):
        m_indices[start : start + rows] = g
        start += span
    b = bf16(num_groups, n, k, scale=0.02)
    d = nan(total, n)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices.cuda())
    start, worst = 0, 0.0
    for g, (rows, span) in enumerate(zip(sizes, padded)):
        if rows:
            ref = a[start : start + rows].float() @ b[g].float().t()
            worst = max(worst, calc_diff(d[start : start + rows], ref))
        start += span
    assert worst < TOL


@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
def test_masked_layout(d_dtype: torch.dtype) -> None:
    num_groups, max_m, n, k = 6, 256, 4096, 7168
    masked = [0, 256, 1, 77, 130, 8]  # empty, full, one row, ragged
    a, b = bf16(num_groups, max_m, k), bf16(num_groups, n, k, scale=0.02)
    d = nan(num_groups, max_m, n, dtype=d_dtype)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m=96)
    for g, rows in enumerate(masked):
        if rows:
            ref = a[g, :rows].float() @ b[g].float().t()
            assert calc_diff(d[g, :rows], ref) < TOL
        assert d[g, rows:].isnan().all(), f"rows past masked_m[{g}] must stay untouched"


def test_masked_many_groups() -> None:
    num_groups, max_m, n, k = 32, 128, 5760, 2880
    rng = random.Random(2)
    masked = [rng.randint(0, max_m) for _ in range(num_groups)]
    a, b = bf16(num_groups, max_m, k), bf16(num_groups, n, k, scale=0.02)
    d = nan(num_groups, max_m, n)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m=64)
    for g, rows in enumerate(masked):
        ref = a[g, :rows].float() @ b[g].float().t()
        assert calc_diff(d[g, :rows], ref) < TOL
        assert d[g, rows:].isnan().all()


def k_grouped_reference(a, b, sizes, c=None):
    out, start = [], 0
    for g, rows in enumerate(sizes):
        ref = a[start : start + rows].float().t() @ b[start : start + rows].float()
        out.append(ref + c[g] if c is not None else ref)
        start += rows
    return torch.stack(out)


@pytest.mark.parametrize(
    "m,n,sizes",
    [
        (768, 2048, [0, 1, 2000, 333]),
        (2880, 768, [64, 0, 129, 7]),
        (4096, 512, [random.Random(3).randint(0, 700) for _ in range(8)] + [0]),
    ],
)
@pytest.mark.parametrize("with_c", [False, True])
def test_k_grouped(m: int, n: int, sizes: list[int], with_c: bool) -> None:
    total = sum(sizes)
    a, b = bf16(total, m), bf16(total, n)
    c = torch.randn(len(sizes), m, n, device="cuda") if with_c else None
    d = nan(len(sizes), m, n, dtype=torch.float32)
    moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offsets(sizes), c)
    ref = k_grouped_reference(a, b, sizes, c)
    for g in range(len(sizes)):
        assert calc_diff(d[g], ref[g]) < TOL, f"group {g} ({sizes[g]} rows)"


def test_k_grouped_accumulates_in_place() -> None:
    sizes = [100, 0, 250]
    a, b = bf16(sum(sizes), 256), bf16(sum(sizes), 128)
    d = torch.randn(3, 256, 128, device="cuda")
    ref = k_grouped_reference(a, b, sizes, d.clone())
    moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offsets(sizes), d)
    assert calc_diff(d, ref) < TOL


def skewed_sizes(num_groups: int, seed: int) -> list[int]:
    """Ragged rows with ties, empty groups and a few groups far above the rest: the k-grouped
    tile order ranks groups by rows, so ties and empties exercise its tie-break."""
    rng = random.Random(seed)
    sizes = [rng.choice([0, 7, 64, 64, 130, rng.randint(1, 300)]) for _ in range(num_groups)]
    for g in rng.sample(range(num_groups), min(3, num_groups)):
        sizes[g] = rng.randint(900, 1500)
    return sizes


# 1 group (no ordering), 48 (two rank slots per lane), 128 (the most that are sorted), 130 (more:
# group order, still snaked over the CTAs). Each with the heuristic's config and two forced
# tiles: 3 and 12 tiles per group, so most group counts end in a partial (reversed) round.
@pytest.mark.parametrize("tile", [None, (128, 256), (64, 128)])
@pytest.mark.parametrize("num_groups", [1, 48, 128, 130])
def test_k_grouped_tile_order_covers_every_tile_once(num_groups: int, tile) -> None:
    from moegemm.families import enumerate_configs
    from moegemm.heuristics import SM90, GemmDesc

    sizes = skewed_sizes(num_groups, seed=num_groups)
    m, n = 384, 256
    config = None
    if tile is not None:
        desc = GemmDesc("k_grouped", m, n, 256, num_groups, "bf16", "fp32", True)
        config = next(
            c for c in enumerate_configs(desc, SM90) if (c.layout.block_m, c.layout.block_n) == tile
        )
    a, b = bf16(sum(sizes), m), bf16(sum(sizes), n)
    c = torch.randn(num_groups, m, n, device="cuda")
    ref = k_grouped_reference(a, b, sizes, c)
    d = nan(num_groups, m, n, dtype=torch.float32)  # a tile never written stays NaN
    moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offsets(sizes), c, config=config)
    assert calc_diff(d, ref) < TOL
    # C accumulated in place: a tile visited twice would add its sum twice.
    d_in_place = c.clone()
    moegemm.k_grouped_bf16_gemm_tn_contiguous(
        a, b, d_in_place, offsets(sizes), d_in_place, config=config
    )
    assert calc_diff(d_in_place, ref) < TOL


def test_k_grouped_graph_replay_with_new_group_sizes() -> None:
    """The tile order is built on the device from the offsets: a replay with other sizes (and so
    another largest-first order) must still cover every tile."""
    num_groups, m, n, total = 40, 256, 128, 6000
    a, b = bf16(total, m), bf16(total, n)
    d = nan(num_groups, m, n, dtype=torch.float32)
    offs = offsets(skewed_sizes(num_groups, seed=5))
    offs.clamp_(max=total)
    moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offs)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offs)
    for seed in (6, 7, 8):
        sizes = skewed_sizes(num_groups, seed)
        scale = total / max(sum(sizes), 1)
        sizes = [int(r * scale) if scale < 1 else r for r in sizes]
        offs.copy_(offsets(sizes))
        a.copy_(bf16(total, m))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = k_grouped_reference(a, b, sizes)
        assert calc_diff(d, ref) < TOL, f"replay with sizes seed {seed}"


def test_bitwise_deterministic() -> None:
    sizes = [300, 0, 1000, 17]
    a, b = bf16(sum(sizes), 2048), bf16(4, 4096, 2048, scale=0.02)
    offs = offsets(sizes)
    runs = []
    for _ in range(2):
        d = nan(sum(sizes), 4096)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)
        runs.append(d)
    assert torch.equal(runs[0], runs[1])
    ka, kb = bf16(sum(sizes), 512), bf16(sum(sizes), 256)
    outs = []
    for _ in range(2):
        d = nan(4, 512, 256, dtype=torch.float32)
        moegemm.k_grouped_bf16_gemm_tn_contiguous(ka, kb, d, offs)
        outs.append(d)
    assert torch.equal(outs[0], outs[1])


def test_graph_replay_with_new_group_sizes() -> None:
    num_groups, max_m, n, k = 8, 64, 2048, 1024
    a, b = bf16(num_groups, max_m, k), bf16(num_groups, n, k, scale=0.02)
    d = nan(num_groups, max_m, n)
    masked_m = torch.zeros(num_groups, device="cuda", dtype=torch.int32)
    total = 300
    pa, pd = bf16(total, k), nan(total, n)
    offs = torch.zeros(num_groups, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m=32)  # compile outside
    moegemm.m_grouped_bf16_gemm_nt_contiguous(pa, b, pd, offs=offs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m=32)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(pa, b, pd, offs=offs)
    rng = random.Random(4)
    for _ in range(3):
        masked = [rng.randint(0, max_m) for _ in range(num_groups)]
        cuts = sorted(rng.randint(0, total) for _ in range(num_groups - 1)) + [total]
        sizes = [hi - lo for lo, hi in zip([0] + cuts[:-1], cuts)]
        masked_m.copy_(torch.tensor(masked, dtype=torch.int32))
        offs.copy_(offsets(sizes))
        a.copy_(bf16(num_groups, max_m, k))
        pa.copy_(bf16(total, k))
        d.fill_(float("nan"))
        pd.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        for g, rows in enumerate(masked):
            ref = a[g, :rows].float() @ b[g].float().t()
            assert calc_diff(d[g, :rows], ref) < TOL
            assert d[g, rows:].isnan().all()
        assert max_group_diff(pd, pa, b, sizes) < TOL


def test_no_host_synchronization() -> None:
    sizes = [40, 0, 90]
    offs = offsets(sizes)
    a, b = bf16(sum(sizes), 1024), bf16(3, 1024, 1024, scale=0.02)
    d = nan(sum(sizes), 1024)
    ma, md = bf16(3, 64, 1024), nan(3, 64, 1024)
    masked_m = torch.tensor([5, 64, 0], device="cuda", dtype=torch.int32)
    m_indices = torch.full((384,), -1, device="cuda", dtype=torch.int32)
    m_indices[:40] = 0
    m_indices[256:346] = 2
    ia, id_ = bf16(384, 1024), nan(384, 1024)
    ka, kb, kd = bf16(sum(sizes), 256), bf16(sum(sizes), 128), nan(3, 256, 128, dtype=torch.float32)

    def calls() -> None:
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)
        moegemm.m_grouped_bf16_gemm_nt_contiguous(ia, b, id_, m_indices)
        moegemm.m_grouped_bf16_gemm_nt_masked(ma, b, md, masked_m, expected_m=32)
        moegemm.k_grouped_bf16_gemm_tn_contiguous(ka, kb, kd, offs)

    calls()  # compile and load first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        calls()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert max_group_diff(d, a, b, sizes) < TOL


def test_argument_errors() -> None:
    a, b = bf16(256, 1024), bf16(4, 512, 1024)
    d = nan(256, 512)
    offs = offsets([64, 64, 64, 64])
    with pytest.raises(ValueError, match="exactly one of m_indices"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d)
    with pytest.raises(ValueError, match=r"offs must have shape \(4,\)"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs[:3])
    with pytest.raises(TypeError, match="offs must have dtype torch.int32"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs.long())
    with pytest.raises(ValueError, match="multiple of 128"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(
            a[:200], b, d[:200], torch.zeros(200, device="cuda", dtype=torch.int32)
        )
    with pytest.raises(ValueError, match="expected_m must be a positive int"):
        moegemm.m_grouped_bf16_gemm_nt_masked(
            bf16(4, 64, 1024), b, nan(4, 64, 512), offs, expected_m=0
        )
    with pytest.raises(ValueError, match="M .* multiple of 8"):
        moegemm.k_grouped_bf16_gemm_tn_contiguous(
            bf16(10, 100), bf16(10, 64), nan(4, 100, 64, dtype=torch.float32), offs
        )


def test_group_walk_over_many_mostly_empty_groups() -> None:
    """The warp-cooperative walk: non-empty groups on both sides of 32-group windows, the last
    group included, for both walked layouts."""
    num_groups, n, k = 1000, 512, 256
    sizes = [0] * num_groups
    for g, rows in {0: 3, 31: 1, 32: 130, 63: 64, 64: 7, 500: 257, 998: 0, 999: 40}.items():
        sizes[g] = rows
    total = sum(sizes)
    a, b = bf16(total, k), bf16(num_groups, n, k, scale=0.02)
    storage = nan(total + 8, n)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, storage[:total], offs=offsets(sizes))
    assert max_group_diff(storage[:total], a, b, sizes) < TOL
    assert not storage[:total].isnan().any() and storage[total:].isnan().all()

    max_m = 80
    masked = [min(rows, max_m) for rows in sizes]
    ma = bf16(num_groups, max_m, k)
    md = nan(num_groups, max_m, n)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_masked(ma, b, md, masked_m, expected_m=1)
    for g, rows in enumerate(masked):
        if rows:
            assert calc_diff(md[g, :rows], ma[g, :rows].float() @ b[g].float().t()) < TOL
    assert md[masked_m == 0].isnan().all()
    assert md[32, 80:].numel() == 0 and md[63, 64:].isnan().all() and md[999, 40:].isnan().all()
