"""Every SM100 family and layout on a Blackwell GPU (CC 10.x: B200 is 10.0, B300 10.3), through
the public functions, against FP32 references on the exact (dequantized) operands, outputs
NaN-poisoned first; then CUDA-graph replay with new group sizes and no host sync, one case per
family. Written before any Blackwell GPU was lent: nothing here has run on hardware yet.

Collected everywhere, skipped unless the current CUDA device is CC 10.x (so it skips on a CPU
machine and on the H200). A call that raises "no SM100 kernel ... yet" fails here on purpose:
it is a gap on the hardware, not a reason to skip. tools/gpu_run.sh LOG_DIR sm100 runs this file.

Helpers and references are the SM90 GPU tests' own (imported, not copied); BF16 bounds as
there (calc_diff < 1e-5), FP8 x FP4 as the FP8 x FP4 tests (< 1e-4). SM100's FP8 x FP4 rules:
weights from prepare_mxfp4_weights(b, sfb, arch="sm_100f"), sfa of powers of two
(per_token_cast_to_fp8(x, ue8m0=True)); the MXFP4 layer's reference rounds the same way.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import torch
from fp8_fp4_reference import TOL as FP4_TOL
from fp8_fp4_reference import random_mxfp4, ref_fp32, sfa_layout
from test_bf16_gemm_gpu import SHAPES as DENSE_SHAPES
from test_fp8_fp4_gpu import DENSE as FP4_DENSE
from test_fused_moe_gpu import MODELS, layer, routing
from test_fused_moe_gpu import run_and_check as run_bf16_layer
from test_grouped_gpu import CASES as GROUPED_CASES
from test_grouped_gpu import IDS as GROUPED_IDS
from test_grouped_gpu import bf16, k_grouped_reference, max_group_diff, nan, offsets

import moegemm
from moegemm.quant import dequantize_mxfp4, per_token_cast_to_fp8, quantize_mxfp4
from moegemm.testing import calc_diff, reference_gemm_nt
from moegemm.testing.moe_reference import (
    expert_forward,
    expert_forward_fp8,
    fused_moe_reference,
    fused_moe_reference_fp8,
)


def sm10x_device() -> bool:
    """Whether the current CUDA device is a Blackwell SM10x part (B200 10.0, B300 10.3)."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not sm10x_device(), reason="needs a CC 10.x GPU (B200, B300)"),
]

TOL = 1e-5
ALIGN = 128  # get_mk_alignment_for_contiguous_layout()
SM100 = "sm_100f"


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


# ---- BF16 dense ---------------------------------------------------------------------------


@pytest.mark.parametrize("with_c", [False, True])
@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("m,n,k", DENSE_SHAPES + [(8192, 4096, 7168)])
def test_bf16_dense(m: int, n: int, k: int, d_dtype: torch.dtype, with_c: bool) -> None:
    a, b = bf16(m, k), bf16(n, k, scale=0.02)
    c = torch.randn(m, n, device="cuda") if with_c else None
    storage = nan(m + 3, n, dtype=d_dtype)  # rows past M must stay untouched
    d = storage[:m]
    moegemm.bf16_gemm_nt(a, b, d, c)
    assert not d.isnan().any(), "every output element must be written"
    assert calc_diff(d, reference_gemm_nt(a, b, c)) < TOL
    assert storage[m:].isnan().all()


# ---- BF16 m-grouped -----------------------------------------------------------------------

# test_grouped_gpu's cases (1..256 groups, ragged, empty, one row, K 2880 and 768 not multiples
# of 128) and a large prefill one.
M_CASES = GROUPED_CASES + [(8, 4096, 7168, [8192, 0, 8000, 4000, 1, 127, 129, 6000])]
M_IDS = GROUPED_IDS + ["G8-N4096-K7168-large"]


def padded_layout(sizes: list[int]) -> tuple[torch.Tensor, list[int]]:
    """m_indices of 128-row padded segments (-1 on padding) and each group's first row."""
    starts, total = [], 0
    for rows in sizes:
        starts.append(total)
        total += -(-rows // ALIGN) * ALIGN
    m_indices = torch.full((total,), -1, dtype=torch.int32)
    for g, (rows, start) in enumerate(zip(sizes, starts)):
        m_indices[start : start + rows] = g
    return m_indices.cuda(), starts


@pytest.mark.parametrize("num_groups,n,k,sizes", M_CASES, ids=M_IDS)
def test_bf16_offs(num_groups: int, n: int, k: int, sizes: list[int]) -> None:
    total = sum(sizes)
    a, b = bf16(total, k), bf16(num_groups, n, k, scale=0.02)
    storage = nan(total + 64, n)
    d = storage[:total]
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offsets(sizes))
    assert not d.isnan().any(), "every row of every group must be written"
    assert max_group_diff(d, a, b, sizes) < TOL
    assert storage[total:].isnan().all()


@pytest.mark.parametrize("num_groups,n,k,sizes", M_CASES, ids=M_IDS)
def test_bf16_m_indices(num_groups: int, n: int, k: int, sizes: list[int]) -> None:
    m_indices, starts = padded_layout(sizes)
    a, b = bf16(m_indices.numel(), k), bf16(num_groups, n, k, scale=0.02)
    d = nan(m_indices.numel(), n)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
    for g, (rows, start) in enumerate(zip(sizes, starts)):
        if rows:
            ref = a[start : start + rows].float() @ b[g].float().t()
            assert calc_diff(d[start : start + rows], ref) < TOL, f"group {g} ({rows} rows)"


# (groups, max_m, N, K, masked_m, expected_m): empty, full, one row, ragged, masked_m past
# max_m (clamped on the device), a max_m of 90, one group, K not a multiple of 128, decode.
MASKED = [
    (6, 256, 4096, 7168, [0, 256, 1, 77, 130, 8], 96),
    (6, 90, 2880, 2880, [0, 1, 90, 37, 200, 64], 48),
    (1, 90, 512, 1032, [90], 90),
    (32, 128, 5760, 2880, [random.Random(2).randint(0, 128) for _ in range(32)], 64),
    (64, 16, 7168, 2048, [random.Random(3).choice([0, 0, 1, 2, 16]) for _ in range(64)], 1),
]
MASKED_IDS = [f"G{c[0]}-maxm{c[1]}-N{c[2]}-K{c[3]}" for c in MASKED]


@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("num_groups,max_m,n,k,masked,expected", MASKED, ids=MASKED_IDS)
def test_bf16_masked(
    num_groups: int, max_m: int, n: int, k: int, masked: list[int], expected: int, d_dtype
) -> None:
    a, b = bf16(num_groups, max_m, k), bf16(num_groups, n, k, scale=0.02)
    d = nan(num_groups, max_m, n, dtype=d_dtype)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m=expected)
    for g, want in enumerate(masked):
        rows = min(want, max_m)
        if rows:
            ref = a[g, :rows].float() @ b[g].float().t()
            assert calc_diff(d[g, :rows], ref) < TOL, f"group {g} ({rows} rows)"
        assert d[g, rows:].isnan().all(), f"rows past masked_m[{g}] must stay untouched"


# ---- BF16 k-grouped (fails until the SM100 k-grouped kernel is merged) ----------------------


@pytest.mark.parametrize("with_c", [False, True])
@pytest.mark.parametrize(
    "m,n,sizes",
    [
        (768, 2048, [0, 1, 2000, 333]),
        (2880, 768, [64, 0, 129, 7]),
        (4096, 512, [random.Random(3).randint(0, 700) for _ in range(8)] + [0]),
        (256, 128, [5000]),
    ],
)
def test_bf16_k_grouped(m: int, n: int, sizes: list[int], with_c: bool) -> None:
    a, b = bf16(sum(sizes), m), bf16(sum(sizes), n)
    c = torch.randn(len(sizes), m, n, device="cuda") if with_c else None
    d = nan(len(sizes), m, n, dtype=torch.float32)
    moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offsets(sizes), c)
    ref = k_grouped_reference(a, b, sizes, c)
    for g in range(len(sizes)):  # an empty group's D is C (or zeros): written, never NaN
        assert calc_diff(d[g], ref[g]) < TOL, f"group {g} ({sizes[g]} rows)"


def test_bf16_k_grouped_accumulates_in_place() -> None:
    sizes = [100, 0, 250]
    a, b = bf16(sum(sizes), 256), bf16(sum(sizes), 128)
    d = torch.randn(3, 256, 128, device="cuda")
    ref = k_grouped_reference(a, b, sizes, d.clone())
    moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offsets(sizes), d)
    assert calc_diff(d, ref) < TOL


# ---- FP8 x FP4 ----------------------------------------------------------------------------


def fp8_acts(*shape: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(a fp8, sfa fp32 powers of two) of random BF16 [..., M, K], as SM100 takes them."""
    x = torch.randn(*shape, device="cuda", generator=gen(seed)).bfloat16()
    return per_token_cast_to_fp8(x, ue8m0=True)


def mxfp4_weights(*lead: int, n: int, k: int, seed: int):
    """(b, sfb) checkpoint bytes (every code, a few binades per row) and their SM100 form."""
    b, sfb = random_mxfp4(*lead, n=n, k=k, gen=gen(seed))
    return b, sfb, moegemm.prepare_mxfp4_weights(b, sfb, arch=SM100)


def check_fp4(got: torch.Tensor, ref: torch.Tensor, what: object) -> None:
    assert not got.isnan().any(), f"{what}: rows left unwritten (NaN)"
    diff = calc_diff(got, ref)
    assert diff < FP4_TOL, f"{what}: calc_diff {diff:.3e}"


@pytest.mark.parametrize("layout", ["row", "mn"])
@pytest.mark.parametrize("m,n,k", FP4_DENSE, ids=[f"M{m}-N{n}-K{k}" for m, n, k in FP4_DENSE])
def test_fp8_fp4_dense(m: int, n: int, k: int, layout: str) -> None:
    a, sfa = fp8_acts(m, k, seed=m + n + k)
    b, sfb, w = mxfp4_weights(n=n, k=k, seed=n * 3 + k)
    storage = nan(m + 5, n)
    d = storage[:m]
    moegemm.fp8_fp4_gemm_nt((a, sfa_layout(sfa, layout)), w, d)
    check_fp4(d, ref_fp32(a, sfa, b, sfb), (m, n, k, layout))
    assert storage[m:].isnan().all(), "rows past M were written"


# (groups, N, K, rows per group): one group, ragged with empty and one-row groups, K 2880 (not
# a multiple of 128), 128 small groups, a prefill-sized one.
FP4_GROUPED = [
    (1, 2880, 2880, [1000]),
    (4, 5760, 2880, [0, 1, 2000, 77]),
    (32, 4096, 7168, [random.Random(5).randint(0, 300) for _ in range(32)]),
    (128, 1536, 2048, [random.Random(6).choice([0, 1, 3, 9, 40, 129]) for _ in range(128)]),
    (8, 2048, 768, [4096, 0, 3000, 1, 5000, 127, 129, 2000]),
]
FP4_GROUPED_IDS = [f"G{c[0]}-N{c[1]}-K{c[2]}" for c in FP4_GROUPED]


@pytest.mark.parametrize("num_groups,n,k,sizes", FP4_GROUPED, ids=FP4_GROUPED_IDS)
def test_fp8_fp4_offs(num_groups: int, n: int, k: int, sizes: list[int]) -> None:
    total = sum(sizes)
    a, sfa = fp8_acts(total, k, seed=total + k)
    b, sfb, w = mxfp4_weights(num_groups, n=n, k=k, seed=n + k)
    storage = nan(total + 64, n)
    d = storage[:total]
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), w, d, offs=offsets(sizes))
    start = 0
    for g, rows in enumerate(sizes):
        if rows:
            ref = ref_fp32(a[start : start + rows], sfa[start : start + rows], b[g], sfb[g])
            check_fp4(d[start : start + rows], ref, f"group {g} ({rows} rows)")
        start += rows
    assert storage[total:].isnan().all(), "rows past offs[-1] were written"


@pytest.mark.parametrize("num_groups,n,k,sizes", FP4_GROUPED, ids=FP4_GROUPED_IDS)
def test_fp8_fp4_m_indices(num_groups: int, n: int, k: int, sizes: list[int]) -> None:
    m_indices, starts = padded_layout(sizes)
    a, sfa = fp8_acts(m_indices.numel(), k, seed=len(sizes) + k)
    b, sfb, w = mxfp4_weights(num_groups, n=n, k=k, seed=n + k)
    d = nan(m_indices.numel(), n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), w, d, m_indices)
    for g, (rows, r0) in enumerate(zip(sizes, starts)):
        if rows:
            ref = ref_fp32(a[r0 : r0 + rows], sfa[r0 : r0 + rows], b[g], sfb[g])
            check_fp4(d[r0 : r0 + rows], ref, f"group {g} ({rows} rows)")


FP4_MASKED = [c for c in MASKED if c[3] % 32 == 0]


@pytest.mark.parametrize("layout", ["row", "mn"])
@pytest.mark.parametrize(
    "num_groups,max_m,n,k,masked,expected",
    FP4_MASKED,
    ids=[f"G{c[0]}-maxm{c[1]}-N{c[2]}-K{c[3]}" for c in FP4_MASKED],
)
def test_fp8_fp4_masked(
    num_groups: int, max_m: int, n: int, k: int, masked: list[int], expected: int, layout: str
) -> None:
    a, sfa = fp8_acts(num_groups, max_m, k, seed=max_m + k)
    b, sfb, w = mxfp4_weights(num_groups, n=n, k=k, seed=n + k + 1)
    d = nan(num_groups, max_m, n)
    masked_m = torch.tensor(masked, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked((a, sfa_layout(sfa, layout)), w, d, masked_m, expected)
    for g, want in enumerate(masked):
        rows = min(want, max_m)
        if rows:
            ref = ref_fp32(a[g, :rows], sfa[g, :rows], b[g], sfb[g])
            check_fp4(d[g, :rows], ref, f"group {g} ({rows} rows)")
        assert d[g, rows:].isnan().all(), f"rows past masked_m[{g}] were written"


# ---- the fused MoE layer, BF16 experts ----------------------------------------------------


@pytest.mark.parametrize("t,k", [(1, 1), (3, 2), (64, 8), (1000, 8)])
def test_fused_moe_bf16_small_experts(t: int, k: int) -> None:
    run_bf16_layer(t, k, 16, 256, 128, drop=0.1, seed=t + k)


@pytest.mark.parametrize("t", [1, 64, 2048])
@pytest.mark.parametrize("model", ["qwen3-30b-a3b", "gpt-oss-20b", "deepseek-v3"])
def test_fused_moe_bf16_models(model: str, t: int) -> None:
    e, k, h, i, act, bias = MODELS[model]
    run_bf16_layer(t, k, e, h, i, act, bias, drop=0.05, seed=len(model) + t)


@pytest.mark.parametrize("activation,bias", [("silu", False), ("swiglu_oai", True)])
def test_fused_moe_masked_bf16(activation: str, bias: bool) -> None:
    e, max_m, h, i = 6, 90, 512, 256
    w13, w2, b13, b2, prepared = layer(e, h, i, activation, bias, seed=21)
    masked_m = torch.tensor([0, 1, 90, 37, 200, 64], device="cuda", dtype=torch.int32)
    x = torch.randn(e, max_m, h, device="cuda", generator=gen(22)).bfloat16()
    out = nan(e, max_m, h)
    moegemm.fused_moe_masked(x, masked_m, prepared, w2, 48, w2_bias=b2, out=out)
    for g in range(e):
        rows = min(int(masked_m[g]), max_m)
        if rows:
            bias13, bias2 = (b13[g], b2[g]) if bias else (None, None)
            want = expert_forward(x[g, :rows], w13[g], w2[g], activation, bias13, bias2)
            assert calc_diff(out[g, :rows].float(), want) < TOL, g
        assert out[g, rows:].isnan().all(), (g, "rows past masked_m written")


# ---- the fused MoE layer, MXFP4 experts ------------------------------------------------------


def mxfp4_layer(e: int, h: int, i: int, activation: str, bias: bool, seed: int):
    """(w13, w2 dequantized FP32 in source order, b13, b2, prepared w13, SM100 w2)."""
    g = gen(seed)
    w13q = quantize_mxfp4(torch.randn(e, 2 * i, h, device="cuda", generator=g) / h**0.5)
    w2q = quantize_mxfp4(torch.randn(e, h, i, device="cuda", generator=g) / i**0.5)
    b13 = torch.randn(e, 2 * i, device="cuda", generator=g) * 0.1 if bias else None
    b2 = torch.randn(e, h, device="cuda", generator=g) * 0.1 if bias else None
    prepared = moegemm.prepare_moe_weights(w13q, activation=activation, w13_bias=b13, arch=SM100)
    w2 = moegemm.prepare_mxfp4_weights(*w2q, arch=SM100)
    return dequantize_mxfp4(*w13q), dequantize_mxfp4(*w2q), b13, b2, prepared, w2


MXFP4_LAYERS = [  # (T, k, experts, hidden, intermediate, activation, bias)
    (1, 1, 16, 256, 128, "silu", False),
    (64, 4, 16, 256, 128, "silu", False),
    (1000, 8, 16, 512, 256, "silu", False),
    (3, 4, 32, 2880, 2880, "swiglu_oai", True),  # gpt-oss-20b
    (256, 4, 128, 2880, 2880, "swiglu_oai", True),  # gpt-oss-120b
]


@pytest.mark.parametrize("t,k,e,h,i,activation,bias", MXFP4_LAYERS)
def test_fused_moe_mxfp4(t: int, k: int, e: int, h: int, i: int, activation: str, bias: bool):
    w13f, w2f, b13, b2, prepared, w2 = mxfp4_layer(e, h, i, activation, bias, seed=t + e)
    ids, weights = routing(t, k, e, seed=t + 1, drop=0.05)
    x = torch.randn(t, h, device="cuda", generator=gen(t + 2)).bfloat16()
    ws = moegemm.MoEWorkspace(t, k, e, h, i, weight_dtype="mxfp4")
    out = nan(t, h)
    moegemm.fused_moe(x, prepared, w2, weights, ids, w2_bias=b2, out=out, workspace=ws)
    want = fused_moe_reference_fp8(x, w13f, w2f, weights, ids, activation, b13, b2, ue8m0=True)
    check_fp4(out.float(), want, (t, k, e, h, i, activation))


@pytest.mark.parametrize("activation,bias", [("silu", False), ("swiglu_oai", True)])
def test_fused_moe_masked_mxfp4(activation: str, bias: bool) -> None:
    e, max_m, h, i = 6, 90, 512, 256
    w13f, w2f, b13, b2, prepared, w2 = mxfp4_layer(e, h, i, activation, bias, seed=60)
    masked_m = torch.tensor([0, 1, 90, 37, 200, 64], device="cuda", dtype=torch.int32)
    x = torch.randn(e, max_m, h, device="cuda", generator=gen(61)).bfloat16()
    out = nan(e, max_m, h)
    moegemm.fused_moe_masked(x, masked_m, prepared, w2, 48, w2_bias=b2, out=out)
    for g in range(e):
        rows = min(int(masked_m[g]), max_m)
        if rows:
            bias13, bias2 = (b13[g], b2[g]) if bias else (None, None)
            want = expert_forward_fp8(
                x[g, :rows], w13f[g], w2f[g], activation, bias13, bias2, ue8m0=True
            )
            check_fp4(out[g, :rows].float(), want, g)
        assert out[g, rows:].isnan().all(), (g, "rows past masked_m written")


# ---- CUDA graphs and host syncs, one case per family --------------------------------------

# A family case: call() runs the family once; refill(seed) writes new group sizes (routing)
# and inputs in place and NaN-poisons the output; check() compares with the reference.
Family = tuple[Callable[[], object], Callable[[int], None], Callable[[], None]]


def ragged(total: int, groups: int, seed: int) -> list[int]:
    """`groups` sizes summing to at most `total`, some empty."""
    rng = random.Random(seed)
    cuts = sorted(rng.randint(0, total) for _ in range(groups - 1)) + [rng.randint(0, total)]
    cuts = sorted(cuts)
    return [hi - lo for lo, hi in zip([0] + cuts[:-1], cuts)]


def dense_family() -> Family:
    a, b = bf16(300, 1024), bf16(512, 1024, scale=0.02)
    c, d = torch.randn(300, 512, device="cuda"), nan(300, 512, dtype=torch.float32)

    def refill(seed: int) -> None:
        a.copy_(bf16(300, 1024))
        d.fill_(float("nan"))

    def check() -> None:
        assert calc_diff(d, reference_gemm_nt(a, b, c)) < TOL

    return (lambda: moegemm.bf16_gemm_nt(a, b, d, c)), refill, check


def offs_family(fp4: bool) -> Family:
    groups, total, n, k = 8, 600, 1024, 2048
    offs = torch.zeros(groups, device="cuda", dtype=torch.int32)
    sizes = [0] * groups
    if fp4:
        raw_b, sfb, w = mxfp4_weights(groups, n=n, k=k, seed=7)
    else:
        w = bf16(groups, n, k, scale=0.02)
    a16 = bf16(total, k)
    a8, sfa = per_token_cast_to_fp8(a16, ue8m0=True)
    d = nan(total, n)

    def call() -> None:
        if fp4:
            moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a8, sfa), w, d, offs=offs)
        else:
            moegemm.m_grouped_bf16_gemm_nt_contiguous(a16, w, d, offs=offs)

    def refill(seed: int) -> None:
        sizes[:] = ragged(total, groups, seed)
        offs.copy_(offsets(sizes))
        a16.copy_(bf16(total, k))
        q, s = per_token_cast_to_fp8(a16, ue8m0=True)
        a8.copy_(q)
        sfa.copy_(s)
        d.fill_(float("nan"))

    def check() -> None:
        if not fp4:
            assert max_group_diff(d, a16, w, sizes) < TOL
            return
        start = 0
        for g, rows in enumerate(sizes):
            if rows:
                ref = ref_fp32(
                    a8[start : start + rows], sfa[start : start + rows], raw_b[g], sfb[g]
                )
                check_fp4(d[start : start + rows], ref, g)
            start += rows
        assert d[start:].isnan().all()

    return call, refill, check


def masked_family(fp4: bool) -> Family:
    groups, max_m, n, k = 6, 90, 1024, 2880
    masked_m = torch.zeros(groups, device="cuda", dtype=torch.int32)
    sizes = [0] * groups
    if fp4:
        raw_b, sfb, w = mxfp4_weights(groups, n=n, k=k, seed=8)
    else:
        w = bf16(groups, n, k, scale=0.02)
    a16 = bf16(groups, max_m, k)
    a8, sfa = per_token_cast_to_fp8(a16, ue8m0=True)
    d = nan(groups, max_m, n)

    def call() -> None:
        if fp4:
            moegemm.m_grouped_fp8_fp4_gemm_nt_masked((a8, sfa), w, d, masked_m, 32)
        else:
            moegemm.m_grouped_bf16_gemm_nt_masked(a16, w, d, masked_m, 32)

    def refill(seed: int) -> None:
        rng = random.Random(seed)
        sizes[:] = [rng.choice([0, 1, rng.randint(1, max_m), max_m]) for _ in range(groups)]
        masked_m.copy_(torch.tensor(sizes, dtype=torch.int32))
        a16.copy_(bf16(groups, max_m, k))
        q, s = per_token_cast_to_fp8(a16, ue8m0=True)
        a8.copy_(q)
        sfa.copy_(s)
        d.fill_(float("nan"))

    def check() -> None:
        for g, rows in enumerate(sizes):
            if rows and fp4:
                ref = ref_fp32(a8[g, :rows], sfa[g, :rows], raw_b[g], sfb[g])
                check_fp4(d[g, :rows], ref, g)
            elif rows:
                assert calc_diff(d[g, :rows], a16[g, :rows].float() @ w[g].float().t()) < TOL
            assert d[g, rows:].isnan().all()

    return call, refill, check


def k_grouped_family() -> Family:
    groups, total, m, n = 6, 3000, 256, 384
    offs = torch.zeros(groups, device="cuda", dtype=torch.int32)
    sizes = [0] * groups
    a, b = bf16(total, m), bf16(total, n)
    c, d = torch.randn(groups, m, n, device="cuda"), nan(groups, m, n, dtype=torch.float32)

    def refill(seed: int) -> None:
        sizes[:] = ragged(total, groups, seed)
        offs.copy_(offsets(sizes))
        a.copy_(bf16(total, m))
        d.fill_(float("nan"))

    def check() -> None:
        assert calc_diff(d, k_grouped_reference(a, b, sizes, c)) < TOL

    return (lambda: moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offs, c)), refill, check


def layer_family(mxfp4: bool) -> Family:
    max_t, k, e, h, i = 64, 4, 16, 512, 256
    if mxfp4:
        w13, w2f, b13, b2, prepared, w2 = mxfp4_layer(e, h, i, "swiglu_oai", True, seed=80)
    else:
        w13, w2, b13, b2, prepared = layer(e, h, i, "swiglu_oai", True, seed=80)
        w2f = w2
    ws = moegemm.MoEWorkspace(max_t, k, e, h, i, weight_dtype="mxfp4" if mxfp4 else "bf16")
    x = torch.zeros(max_t, h, device="cuda", dtype=torch.bfloat16)
    ids = torch.full((max_t, k), -1, device="cuda", dtype=torch.int32)
    weights = torch.zeros(max_t, k, device="cuda")
    out = nan(max_t, h)

    def call() -> None:
        moegemm.fused_moe(x, prepared, w2, weights, ids, w2_bias=b2, out=out, workspace=ws)

    def refill(seed: int) -> None:  # fewer tokens than captured: the rest marked -1
        t = max_t if seed % 2 else 5
        new_ids, new_weights = routing(t, k, e, seed)
        ids.fill_(-1)
        weights.zero_()
        ids[:t], weights[:t] = new_ids, new_weights
        x.copy_(torch.randn(max_t, h, device="cuda", generator=gen(seed)).bfloat16())
        out.fill_(float("nan"))

    def check() -> None:
        if mxfp4:
            want = fused_moe_reference_fp8(
                x, w13, w2f, weights, ids, "swiglu_oai", b13, b2, ue8m0=True
            )
            check_fp4(out.float(), want, "layer")
        else:
            want = fused_moe_reference(x, w13, w2f, weights, ids, "swiglu_oai", b13, b2)
            assert calc_diff(out.float(), want) < TOL

    return call, refill, check


FAMILIES: dict[str, Callable[[], Family]] = {
    "bf16_dense": dense_family,
    "bf16_offs": lambda: offs_family(fp4=False),
    "bf16_masked": lambda: masked_family(fp4=False),
    "bf16_k_grouped": k_grouped_family,
    "fp8_fp4_offs": lambda: offs_family(fp4=True),
    "fp8_fp4_masked": lambda: masked_family(fp4=True),
    "fused_moe_bf16": lambda: layer_family(mxfp4=False),
    "fused_moe_mxfp4": lambda: layer_family(mxfp4=True),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_no_host_sync_then_graph_replay_with_new_sizes(family: str) -> None:
    call, refill, check = FAMILIES[family]()
    refill(1)
    call()  # compiles and loads outside the checks
    torch.cuda.synchronize()
    refill(2)
    torch.cuda.set_sync_debug_mode("error")
    try:
        call()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    check()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for seed in (3, 4, 5):
        refill(seed)
        graph.replay()
        torch.cuda.synchronize()
        check()
