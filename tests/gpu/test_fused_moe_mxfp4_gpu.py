"""The fused MoE layer with MXFP4 experts on the H200: against an FP32 reference on the
dequantized weights with the layer's own roundings (x and the intermediate through FP8 per 128,
the intermediate in BF16 first: moegemm.testing.moe_reference.fused_moe_reference_fp8),
calc_diff < 1e-4; both weight layouts; the gathered FP8 rows bitwise against
per_token_cast_to_fp8; gpt-oss shapes (swiglu_oai, biases); graphs; the masked variant."""

from __future__ import annotations

import pytest
import torch

import moegemm
from moegemm.quant import dequantize_mxfp4, per_token_cast_to_fp8, quantize_mxfp4
from moegemm.testing import calc_diff
from moegemm.testing.moe_reference import (
    expert_forward_fp8,
    fused_moe_reference_fp8,
    route_reference,
)

pytestmark = pytest.mark.gpu
TOL = 1e-4


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def mxfp4_layer(e, h, i, activation, bias, layout, seed=0):
    g = gen(seed)
    w13 = torch.randn(e, 2 * i, h, device="cuda", generator=g) / h**0.5
    w2 = torch.randn(e, h, i, device="cuda", generator=g) / i**0.5
    b13q, w2q = quantize_mxfp4(w13), quantize_mxfp4(w2)
    b13 = torch.randn(e, 2 * i, device="cuda", generator=g) * 0.1 if bias else None
    b2 = torch.randn(e, h, device="cuda", generator=g) * 0.1 if bias else None
    prepared = moegemm.prepare_moe_weights(
        b13q, activation=activation, w13_bias=b13, mxfp4_layout=layout
    )
    w2_arg = moegemm.prepare_mxfp4_weights(*w2q) if layout == "prepared" else w2q
    return dequantize_mxfp4(*b13q), dequantize_mxfp4(*w2q), b13, b2, prepared, w2_arg


def routing(t, k, e, seed, drop=0.0):
    g = gen(seed)
    load = 1.0 / torch.arange(1, e + 1, device="cuda", dtype=torch.float32) ** 1.2
    ids = torch.multinomial(load.expand(max(t, 1), e), k, replacement=False, generator=g)[:t]
    ids = ids.to(torch.int32)
    if drop:
        ids[torch.rand(t, k, device="cuda", generator=g) < drop] = -1
    w = torch.rand(t, k, device="cuda", generator=g)
    return ids.contiguous(), (w / w.sum(-1, keepdim=True)).contiguous()


def run_and_check(t, k, e, h, i, activation, bias, layout, drop=0.0, seed=0):
    w13f, w2f, b13, b2, prepared, w2 = mxfp4_layer(e, h, i, activation, bias, layout, seed)
    ids, weights = routing(t, k, e, seed + 1, drop)
    x = torch.randn(t, h, device="cuda", generator=gen(seed + 2)).bfloat16()
    ws = moegemm.MoEWorkspace(t, k, e, h, i, weight_dtype="mxfp4")
    ws.h.fill_(float("nan"))
    ws.y.fill_(float("nan"))
    out = torch.full((t, h), float("nan"), device="cuda", dtype=torch.bfloat16)
    moegemm.fused_moe(x, prepared, w2, weights, ids, w2_bias=b2, out=out, workspace=ws)
    want = fused_moe_reference_fp8(x, w13f, w2f, weights, ids, activation, b13, b2)
    assert not out.isnan().any()
    assert calc_diff(out.float(), want) < TOL, calc_diff(out.float(), want)
    ref = route_reference(ids, e)
    kept = ref["row_slot"].numel()
    assert torch.equal(ws.offs, ref["offs"])
    tokens = ref["row_slot"].long() // k
    a, sfa = per_token_cast_to_fp8(x)
    assert torch.equal(ws.x_sorted[:kept].view(torch.uint8), a[tokens].view(torch.uint8))
    assert torch.equal(ws.sfa_x[:kept], sfa[tokens])


@pytest.mark.parametrize("layout", ["raw", "prepared"])
@pytest.mark.parametrize("t,k", [(1, 1), (3, 2), (64, 4), (1000, 8)])
def test_small_experts(t: int, k: int, layout: str) -> None:
    run_and_check(t, k, 16, 256, 128, "silu", False, layout, drop=0.1, seed=t + k)


@pytest.mark.parametrize("layout", ["raw", "prepared"])
@pytest.mark.parametrize("t", [1, 3, 64])
@pytest.mark.parametrize("experts", [32, 128])  # gpt-oss-20b, gpt-oss-120b
def test_gpt_oss(experts: int, t: int, layout: str) -> None:
    run_and_check(t, 4, experts, 2880, 2880, "swiglu_oai", True, layout, drop=0.05, seed=40 + t)


@pytest.fixture
def kernel(request, monkeypatch):
    """Plans the FP8 x FP4 GEMMs with the heuristics' picks (at these sizes the decode kernel's
    128-token blocks and the prefill kernel rank within a few percent of each other), or with
    the prefill kernel (tokens on M, a transform ring) or the convert-ahead kernel (windowed
    weights, which random ones are) forced: the best-ranked of its configs. Yields the configs
    planned; the plan caches are cleared before and after."""
    from moegemm.heuristics import sm90_fp8_fp4 as family
    from moegemm.heuristics.sm90_fp8_fp4_convert_ahead import is_convert_ahead
    from moegemm.launch import plans

    picked, heuristics = [], plans.select_config
    wanted = {
        "prefill": lambda c: not c.layout.swap_ab and not is_convert_ahead(c),
        "convert_ahead": is_convert_ahead,
    }

    def select(desc, arch):
        if request.param in wanted:
            configs = [c for c in family.candidates(desc, arch) if wanted[request.param](c)]
            config = min(configs, key=lambda c: family.estimate_cycles(c, desc, arch))
        else:
            config = heuristics(desc, arch)
        picked.append(config)
        return config

    moegemm.set_num_sms(None)  # clears every plan cache
    monkeypatch.setattr(plans, "select_config", select)
    yield picked
    assert len(picked) == 2, picked  # both GEMMs of the layer were planned here
    if request.param in wanted:
        assert all(wanted[request.param](c) for c in picked)
    moegemm.set_num_sms(None)


@pytest.mark.parametrize("kernel", ["pick", "prefill", "convert_ahead"], indirect=True)
@pytest.mark.parametrize("activation,bias", [("silu", False), ("swiglu_oai", True)])
def test_prefill_sizes(activation: str, bias: bool, kernel: list) -> None:
    """~1000 rows an expert on prepared weights with the layer's epilogues (swiglu, swiglu_oai
    with biases, row_scale); 2I = 960 leaves a partial 128-row tile and K = I = 480 a partial
    k-block."""
    t, k, e, h, i = 2048, 4, 8, 1024, 480
    run_and_check(t, k, e, h, i, activation, bias, "prepared", drop=0.1, seed=80)


@pytest.mark.parametrize("kernel", ["pick", "prefill", "convert_ahead"], indirect=True)
def test_masked_prefill_sizes(kernel: list) -> None:
    e, max_m, h, i = 6, 700, 512, 256
    w13f, w2f, b13, b2, prepared, w2 = mxfp4_layer(e, h, i, "swiglu_oai", True, "prepared", 90)
    masked_m = torch.tensor([0, 1, 700, 90, 999, 513], device="cuda", dtype=torch.int32)
    x = torch.randn(e, max_m, h, device="cuda", generator=gen(91)).bfloat16()
    out = torch.full((e, max_m, h), float("nan"), device="cuda", dtype=torch.bfloat16)
    moegemm.fused_moe_masked(x, masked_m, prepared, w2, 500, w2_bias=b2, out=out)
    for g in range(e):
        rows = min(int(masked_m[g]), max_m)
        if rows:
            want = expert_forward_fp8(x[g, :rows], w13f[g], w2f[g], "swiglu_oai", b13[g], b2[g])
            assert calc_diff(out[g, :rows].float(), want) < TOL, g
        assert out[g, rows:].isnan().all()


def test_deterministic_sync_free_and_allocation_free() -> None:
    t, k, e, h, i = 256, 4, 32, 1024, 512
    _, _, _, b2, prepared, w2 = mxfp4_layer(e, h, i, "swiglu_oai", True, "prepared", seed=70)
    ids, weights = routing(t, k, e, 71)
    x = torch.randn(t, h, device="cuda", generator=gen(72)).bfloat16()
    ws = moegemm.MoEWorkspace(t, k, e, h, i, weight_dtype="mxfp4")
    out = torch.empty(t, h, device="cuda", dtype=torch.bfloat16)
    moegemm.fused_moe(x, prepared, w2, weights, ids, w2_bias=b2, out=out, workspace=ws)
    first = out.clone()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            moegemm.fused_moe(x, prepared, w2, weights, ids, w2_bias=b2, out=out, workspace=ws)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    assert torch.equal(out, first)


def test_cuda_graph_replays_with_new_routing() -> None:
    max_t, k, e, h, i = 32, 4, 16, 512, 256
    w13f, w2f, b13, b2, prepared, w2 = mxfp4_layer(e, h, i, "swiglu_oai", True, "prepared")
    ws = moegemm.MoEWorkspace(max_t, k, e, h, i, weight_dtype="mxfp4")
    x = torch.zeros(max_t, h, device="cuda", dtype=torch.bfloat16)
    ids = torch.full((max_t, k), -1, device="cuda", dtype=torch.int32)
    weights = torch.zeros(max_t, k, device="cuda")
    out = torch.empty(max_t, h, device="cuda", dtype=torch.bfloat16)

    def call() -> None:
        moegemm.fused_moe(x, prepared, w2, weights, ids, w2_bias=b2, out=out, workspace=ws)

    call()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    for seed, t in ((50, 32), (51, 3)):
        new_ids, new_weights = routing(t, k, e, seed)
        ids.fill_(-1)
        ids[:t], weights[:t] = new_ids, new_weights
        x.zero_()
        x[:t] = torch.randn(t, h, device="cuda", generator=gen(seed)).bfloat16()
        graph.replay()
        torch.cuda.synchronize()
        want = fused_moe_reference_fp8(x[:t], w13f, w2f, weights[:t], ids[:t], "swiglu_oai",
                                       b13, b2)  # fmt: skip
        assert calc_diff(out[:t].float(), want) < TOL


def test_masked_variant_max_m_90() -> None:
    e, max_m, h, i = 6, 90, 512, 256
    w13f, w2f, b13, b2, prepared, w2 = mxfp4_layer(e, h, i, "silu", True, "raw", seed=60)
    masked_m = torch.tensor([0, 1, 90, 37, 200, 64], device="cuda", dtype=torch.int32)
    x = torch.randn(e, max_m, h, device="cuda", generator=gen(61)).bfloat16()
    for g in range(e):  # rows past masked_m hold NaN: they are never quantized nor read back
        x[g, min(int(masked_m[g]), max_m) :] = float("nan")
    out = torch.full((e, max_m, h), float("nan"), device="cuda", dtype=torch.bfloat16)
    moegemm.fused_moe_masked(x, masked_m, prepared, w2, 48, w2_bias=b2, out=out)
    for g in range(e):
        rows = min(int(masked_m[g]), max_m)
        if rows:
            want = expert_forward_fp8(x[g, :rows], w13f[g], w2f[g], "silu", b13[g], b2[g])
            assert calc_diff(out[g, :rows].float(), want) < TOL, g
        assert out[g, rows:].isnan().all()


@pytest.mark.parametrize("layout", ["raw", "prepared"])
def test_torch_compile_of_a_module_calling_it(layout: str) -> None:
    """torch.compile(fullgraph=True) over MXFP4 experts (moegemm::fused_moe_mxfp4): the compiled
    module's output equals the eager one bitwise."""
    t, k, e, h, i = 48, 4, 16, 256, 128
    _, _, _, b2, prepared, w2 = mxfp4_layer(e, h, i, "swiglu_oai", True, layout, seed=50)
    ids, weights = routing(t, k, e, 51)
    x = torch.randn(t, h, device="cuda", generator=gen(52)).bfloat16()
    ws = moegemm.MoEWorkspace(t, k, e, h, i, weight_dtype="mxfp4")

    class Experts(torch.nn.Module):
        def forward(self, x, ids, weights):
            return moegemm.fused_moe(x, prepared, w2, weights, ids, w2_bias=b2, workspace=ws) * 2

    eager = Experts()(x, ids, weights)
    compiled = torch.compile(Experts(), fullgraph=True)(x, ids, weights)
    assert torch.equal(eager, compiled)
