"""The fused MoE layer on the H200 (BF16 experts): against an FP32 reference of the whole layer
built from the source-layout weights, with skewed routing, empty experts, dropped (-1) and
out-of-range ids, k in {1, 2, 4, 6, 8}, T from 1 to 8192, published models' expert shapes; the
route kernel's placement bitwise against route_reference; NaN-poisoned outputs and workspace;
CUDA-graph replay with new routing; no host sync, no allocation, bitwise determinism; the
masked variant with a max_m of 90."""

from __future__ import annotations

import pytest
import torch

import moegemm
from moegemm.testing import calc_diff
from moegemm.testing.moe_reference import expert_forward, fused_moe_reference, route_reference

pytestmark = pytest.mark.gpu
TOL = 1e-5


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def layer(e: int, h: int, i: int, activation: str = "silu", bias: bool = False, seed: int = 0):
    g = gen(seed)
    w13 = (torch.randn(e, 2 * i, h, device="cuda", generator=g) / h**0.5).bfloat16()
    w2 = (torch.randn(e, h, i, device="cuda", generator=g) / i**0.5).bfloat16()
    b13 = torch.randn(e, 2 * i, device="cuda", generator=g) * 0.1 if bias else None
    b2 = torch.randn(e, h, device="cuda", generator=g) * 0.1 if bias else None
    prepared = moegemm.prepare_moe_weights(w13, activation=activation, w13_bias=b13)
    return w13, w2, b13, b2, prepared


def routing(t: int, k: int, e: int, seed: int, drop: float = 0.0):
    """Distinct experts per token drawn from a skewed (Zipf-like) load; `drop` of the slots -1."""
    g = gen(seed)
    load = 1.0 / torch.arange(1, e + 1, device="cuda", dtype=torch.float32) ** 1.2
    load = load[torch.randperm(e, device="cuda", generator=g)]
    ids = torch.multinomial(load.expand(max(t, 1), e), k, replacement=False, generator=g)[:t]
    ids = ids.to(torch.int32)
    if drop:
        ids[torch.rand(t, k, device="cuda", generator=g) < drop] = -1
    weights = torch.rand(t, k, device="cuda", generator=g)
    return ids.contiguous(), (weights / weights.sum(-1, keepdim=True)).contiguous()


def poisoned_workspace(t: int, k: int, e: int, h: int, i: int) -> moegemm.MoEWorkspace:
    ws = moegemm.MoEWorkspace(t, k, e, h, i)
    for buf in (ws.x_sorted, ws.h, ws.row_weight):
        buf.fill_(float("nan"))
    for buf in (ws.offs, ws.row_slot, ws.slot_row):
        buf.fill_(-7)
    return ws


def run_and_check(t, k, e, h, i, activation="silu", bias=False, drop=0.0, seed=0) -> float:
    w13, w2, b13, b2, prepared = layer(e, h, i, activation, bias, seed)
    ids, weights = routing(t, k, e, seed + 1, drop)
    x = torch.randn(t, h, device="cuda", generator=gen(seed + 2)).bfloat16()
    ws = poisoned_workspace(t, k, e, h, i)
    out = torch.full((t, h), float("nan"), device="cuda", dtype=torch.bfloat16)
    moegemm.fused_moe(x, prepared, w2, weights, ids, w2_bias=b2, out=out, workspace=ws)
    want = fused_moe_reference(x, w13, w2, weights, ids, activation, b13, b2)
    assert not out.isnan().any(), "rows left unwritten"
    diff = calc_diff(out.float(), want)
    assert diff < TOL, diff
    ref = route_reference(ids, e)
    kept = ref["row_slot"].numel()
    assert torch.equal(ws.offs, ref["offs"])
    assert torch.equal(ws.slot_row[: t * k], ref["slot_row"])
    assert torch.equal(ws.row_slot[:kept], ref["row_slot"])
    return diff


@pytest.mark.parametrize("k", [1, 2, 4, 6, 8])
@pytest.mark.parametrize("t", [1, 3, 64, 1000, 8192])
def test_small_experts_every_k_and_t(t: int, k: int) -> None:
    run_and_check(t, k, 16, 256, 128, drop=0.1, seed=t + k)


MODELS = {
    # name: (experts, top_k, hidden, intermediate, activation, bias)
    "mixtral-8x7b": (8, 2, 4096, 14336, "silu", False),
    "deepseek-v3": (256, 8, 7168, 2048, "silu", False),
    "qwen3-30b-a3b": (128, 8, 2048, 768, "silu", False),
    "gpt-oss-20b": (32, 4, 2880, 2880, "swiglu_oai", True),
    "gpt-oss-120b": (128, 4, 2880, 2880, "swiglu_oai", True),
}


@pytest.mark.parametrize("t", [1, 3, 64])
@pytest.mark.parametrize("model", sorted(MODELS))
def test_model_shapes(model: str, t: int) -> None:
    e, k, h, i, act, bias = MODELS[model]
    run_and_check(t, k, e, h, i, act, bias, drop=0.05, seed=len(model) + t)


def test_prefill_qwen3_1000_tokens() -> None:
    e, k, h, i, act, bias = MODELS["qwen3-30b-a3b"]
    run_and_check(1000, k, e, h, i, act, bias, seed=5)


def test_prefill_staged_epilogues_with_bias_and_n_tails() -> None:
    """gpt-oss-20b at prefill: both GEMMs stage their results for TMA stores (SwiGLU with
    biases, 5760 weight rows in 224-row tiles and 2880 columns in 208/224-wide tiles: the last
    n-block of each is clipped), the route kernel's histograms at a few thousand slots."""
    from moegemm.families import select_config
    from moegemm.heuristics import SM90
    from moegemm.moe.layer import layer_gemms

    e, k, h, i, act, bias = MODELS["gpt-oss-20b"]
    t = 1024
    sizes = {"tokens": t, "top_k": k, "experts": e, "hidden": h, "intermediate": i,
             "ldw2": i, "ldw2_group": h * i}  # fmt: skip
    picks = [select_config(desc, SM90) for desc, _ in layer_gemms(sizes, act)]
    assert all(c.store_cols and not c.layout.swap_ab for c in picks), picks
    run_and_check(t, k, e, h, i, act, bias, drop=0.05, seed=31)


def test_ids_out_of_range_are_dropped_and_nothing_outside_out_is_written() -> None:
    t, k, e, h, i = 40, 4, 16, 256, 128
    w13, w2, _, _, prepared = layer(e, h, i)
    ids, weights = routing(t, k, e, 3)
    ids[0, 0], ids[1, 1], ids[2] = e, -5, -1  # token 2: every slot dropped
    x = torch.randn(t, h, device="cuda", generator=gen(4)).bfloat16()
    guard = torch.full((t + 2, h), float("nan"), device="cuda", dtype=torch.bfloat16)
    out = guard[1 : t + 1]
    moegemm.fused_moe(x, prepared, w2, weights, ids, out=out)
    want = fused_moe_reference(x, w13, w2, weights, ids)
    assert calc_diff(out.float(), want) < TOL
    assert torch.equal(out[2], torch.zeros(h, device="cuda", dtype=torch.bfloat16))
    assert guard[0].isnan().all() and guard[-1].isnan().all()


def test_no_tokens() -> None:
    _, w2, _, _, prepared = layer(8, 256, 128)
    x = torch.empty(0, 256, device="cuda", dtype=torch.bfloat16)
    ids = torch.empty(0, 2, device="cuda", dtype=torch.int32)
    out = moegemm.fused_moe(x, prepared, w2, torch.empty(0, 2, device="cuda"), ids)
    assert out.shape == (0, 256)


def test_deterministic_sync_free_and_allocation_free() -> None:
    t, k, e, h, i = 512, 8, 64, 1024, 512
    _, w2, _, _, prepared = layer(e, h, i)
    ids, weights = routing(t, k, e, 9)
    x = torch.randn(t, h, device="cuda", generator=gen(10)).bfloat16()
    ws = moegemm.MoEWorkspace(t, k, e, h, i)
    out = torch.empty(t, h, device="cuda", dtype=torch.bfloat16)
    moegemm.fused_moe(x, prepared, w2, weights, ids, out=out, workspace=ws)
    first = out.clone()
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            moegemm.fused_moe(x, prepared, w2, weights, ids, out=out, workspace=ws)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    assert torch.equal(out, first)


def test_cuda_graph_replays_with_new_routing_and_fewer_tokens() -> None:
    max_t, k, e, h, i = 64, 4, 32, 512, 256
    w13, w2, b13, b2, prepared = layer(e, h, i, "swiglu_oai", bias=True)
    ws = moegemm.MoEWorkspace(max_t, k, e, h, i)
    x = torch.zeros(max_t, h, device="cuda", dtype=torch.bfloat16)
    ids = torch.full((max_t, k), -1, device="cuda", dtype=torch.int32)
    weights = torch.zeros(max_t, k, device="cuda")
    out = torch.empty(max_t, h, device="cuda", dtype=torch.bfloat16)

    def call() -> None:
        moegemm.fused_moe(x, prepared, w2, weights, ids, w2_bias=b2, out=out, workspace=ws)

    call()  # plans and kernels before the capture
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    for seed, t in ((11, 64), (12, 5), (13, 1)):
        new_ids, new_weights = routing(t, k, e, seed, drop=0.1)
        ids.fill_(-1)  # the padding tokens are dropped slots
        ids[:t], weights[:t] = new_ids, new_weights
        x.zero_()
        x[:t] = torch.randn(t, h, device="cuda", generator=gen(seed)).bfloat16()
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        want = fused_moe_reference(x[:t], w13, w2, weights[:t], ids[:t], "swiglu_oai", b13, b2)
        assert calc_diff(out[:t].float(), want) < TOL
        assert not out[t:].float().abs().sum() > 0  # padding tokens: zeros


@pytest.mark.parametrize("activation,bias", [("silu", False), ("swiglu_oai", True)])
def test_masked_variant(activation: str, bias: bool) -> None:
    e, max_m, h, i = 6, 90, 512, 256
    w13, w2, b13, b2, prepared = layer(e, h, i, activation, bias, seed=20)
    masked_m = torch.tensor([0, 1, 90, 37, 200, 64], device="cuda", dtype=torch.int32)
    x = torch.randn(e, max_m, h, device="cuda", generator=gen(21)).bfloat16()
    out = torch.full((e, max_m, h), float("nan"), device="cuda", dtype=torch.bfloat16)
    moegemm.fused_moe_masked(x, masked_m, prepared, w2, 48, w2_bias=b2, out=out)
    for g in range(e):
        rows = min(int(masked_m[g]), max_m)
        if rows:
            want = expert_forward(
                x[g, :rows],
                w13[g],
                w2[g],
                activation,
                None if b13 is None else b13[g],
                None if b2 is None else b2[g],
            )
            assert calc_diff(out[g, :rows].float(), want) < TOL, g
        assert out[g, rows:].isnan().all(), (g, "rows past masked_m written")


def test_masked_variant_staged_prefill_tiles() -> None:
    """Large masked groups: both GEMMs stage results for TMA stores where a warpgroup's rows all
    lie below masked_m and store from registers across it; rows past masked_m stay untouched."""
    from moegemm.families import select_config
    from moegemm.heuristics import SM90
    from moegemm.moe.layer import masked_gemms

    e, max_m, h, i, expected = 6, 300, 512, 256, 200
    picks = [select_config(d, SM90)
             for d, _ in masked_gemms(e, max_m, h, i, expected, "swiglu_oai", i, h * i)]  # fmt: skip
    assert all(c.store_cols for c in picks), picks
    w13, w2, b13, b2, prepared = layer(e, h, i, "swiglu_oai", True, seed=40)
    masked_m = torch.tensor([0, 1, 300, 137, 450, 64], device="cuda", dtype=torch.int32)
    x = torch.randn(e, max_m, h, device="cuda", generator=gen(41)).bfloat16()
    out = torch.full((e, max_m, h), float("nan"), device="cuda", dtype=torch.bfloat16)
    moegemm.fused_moe_masked(x, masked_m, prepared, w2, expected, w2_bias=b2, out=out)
    for g in range(e):
        rows = min(int(masked_m[g]), max_m)
        if rows:
            want = expert_forward(x[g, :rows], w13[g], w2[g], "swiglu_oai", b13[g], b2[g])
            assert calc_diff(out[g, :rows].float(), want) < TOL, g
        assert out[g, rows:].isnan().all(), (g, "rows past masked_m written")


def test_torch_compile_of_a_module_calling_it() -> None:
    t, k, e, h, i = 48, 4, 16, 256, 128
    _, w2, _, _, prepared = layer(e, h, i)
    ids, weights = routing(t, k, e, 30)
    x = torch.randn(t, h, device="cuda", generator=gen(31)).bfloat16()
    ws = moegemm.MoEWorkspace(t, k, e, h, i)

    class Experts(torch.nn.Module):
        def forward(self, x, ids, weights):
            return moegemm.fused_moe(x, prepared, w2, weights, ids, workspace=ws) * 2

    eager = Experts()(x, ids, weights)
    compiled = torch.compile(Experts(), fullgraph=True)(x, ids, weights)
    assert torch.equal(eager, compiled)
