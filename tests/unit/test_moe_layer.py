"""The fused MoE layer's host side (no GPU): weight preparation, the workspace, every argument
check (raised before any launch, CPU tensors stand in), the references the GPU tests use, and
the GEMM descriptions the layer builds (legal configs, kernel specs)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import moegemm
from moegemm import _C
from moegemm.families import enumerate_configs, is_legal, kernel_spec, select_config, selection_key
from moegemm.heuristics import SM90, GemmDesc
from moegemm.heuristics.sm90_bf16 import smem_bytes_for
from moegemm.jit.codegen import sm90_bf16_gemm_spec
from moegemm.launch.plans import bound_integers
from moegemm.moe.weights import kernel_order, source_order, split_gate_up
from moegemm.testing.moe_reference import (
    expert_forward,
    fused_moe_reference,
    route_reference,
    swiglu,
)

E, I, H = 4, 32, 16


def w13_of(e: int = E, i: int = I, h: int = H) -> torch.Tensor:
    return torch.randn(e, 2 * i, h, generator=torch.Generator().manual_seed(1)).bfloat16()


@pytest.mark.parametrize("activation", ["silu", "swiglu_oai"])
def test_prepared_order_pairs_8_gate_with_their_8_up_rows(activation: str) -> None:
    w = w13_of()
    b = torch.randn(E, 2 * I)
    p = moegemm.prepare_moe_weights(w, activation=activation, w13_bias=b)
    gate, up = split_gate_up(w, activation)
    for q in range(I // 8):
        assert torch.equal(p.weight[:, 16 * q : 16 * q + 8], gate[:, 8 * q : 8 * q + 8])
        assert torch.equal(p.weight[:, 16 * q + 8 : 16 * q + 16], up[:, 8 * q : 8 * q + 8])
    assert torch.equal(source_order(p.weight, activation), w)
    assert p.bias.dtype == torch.float32 and torch.equal(source_order(p.bias, activation), b)
    assert p.weight.is_contiguous() and p.activation == activation
    assert (p.num_experts, p.intermediate, p.hidden) == (E, I, H)
    if activation == "swiglu_oai":  # gpt-oss: gate = even rows
        assert torch.equal(p.weight[:, 0], w[:, 0]) and torch.equal(p.weight[:, 8], w[:, 1])


def test_prepare_refuses_what_the_kernels_cannot_pair() -> None:
    with pytest.raises(ValueError, match="activation"):
        moegemm.prepare_moe_weights(w13_of(), activation="gelu")
    with pytest.raises(TypeError, match="bfloat16"):
        moegemm.prepare_moe_weights(w13_of().float())
    with pytest.raises(ValueError, match="multiple of 16"):
        moegemm.prepare_moe_weights(torch.zeros(2, 24, 16, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="H of 8"):
        moegemm.prepare_moe_weights(torch.zeros(2, 32, 12, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match="w13_bias must have shape"):
        moegemm.prepare_moe_weights(w13_of(), w13_bias=torch.zeros(E, I))


def test_workspace_sizes_and_refusals() -> None:
    ws = moegemm.MoEWorkspace(10, 2, E, H, I, device="cpu")
    assert ws.x_sorted.shape == (20, H) and ws.h.shape == (20, I)
    assert ws.offs.shape == (E,) and ws.slot_row.shape == ws.row_slot.shape == (20,)
    allocated = sum(
        t.numel() * t.element_size()
        for t in (ws.x_sorted, ws.h, ws.offs, ws.row_slot, ws.row_weight, ws.slot_row)
    )
    assert ws.nbytes == allocated
    # DeepSeek-V3 at 8192 tokens: no [rows, 2I] buffer, x_sorted reused for GEMM2's rows.
    assert moegemm.MoEWorkspace.bytes_for(8192, 8, 256, 7168, 2048) < 1.2 * 2**30
    with pytest.raises(ValueError, match="max_tokens"):
        moegemm.MoEWorkspace(0, 2, E, H, I, device="cpu")
    with pytest.raises(ValueError, match="weight_dtype"):
        moegemm.MoEWorkspace(4, 2, E, H, I, weight_dtype="fp16", device="cpu")
    assert ws.y is ws.x_sorted and ws.h8 is None  # BF16: GEMM2's rows reuse x_sorted
    fp8 = moegemm.MoEWorkspace(10, 2, E, 256, 160, weight_dtype="mxfp4", device="cpu")
    assert fp8.x_sorted.dtype == torch.float8_e4m3fn and fp8.h8.dtype == torch.float8_e4m3fn
    assert fp8.sfa_x.shape == (20, 2) and fp8.sfa_h.shape == (20, 2)  # ceil(160 / 128)
    assert fp8.y.shape == (20, 256) and fp8.y.dtype == torch.bfloat16
    buffers = (fp8.x_sorted, fp8.sfa_x, fp8.h, fp8.h8, fp8.sfa_h, fp8.y, fp8.offs,
               fp8.row_slot, fp8.row_weight, fp8.slot_row)  # fmt: skip
    assert fp8.nbytes == sum(t.numel() * t.element_size() for t in buffers)


def _call_args(t: int = 3, k: int = 2):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(t, H, generator=g).bfloat16()
    w13 = moegemm.prepare_moe_weights(w13_of())
    w2 = torch.randn(E, H, I, generator=g).bfloat16()
    ids = torch.randint(0, E, (t, k), generator=g, dtype=torch.int32)
    weights = torch.rand(t, k, generator=g)
    return x, w13, w2, weights, ids


@pytest.mark.parametrize(
    "change,error,match",
    [
        (lambda a: a.update(w13=w13_of()), TypeError, "prepare_moe_weights"),
        (lambda a: a.update(activation="swiglu_oai"), ValueError, "prepared for"),
        (lambda a: a.update(w13_bias=torch.zeros(E, 2 * I)), ValueError, "prepare_moe_weights"),
        (lambda a: a.update(x=a["x"].float()), TypeError, "x must have dtype"),
        (lambda a: a.update(x=a["x"][:, :8]), ValueError, "hidden"),
        (lambda a: a.update(topk_ids=a["topk_ids"].long()), TypeError, "topk_ids"),
        (lambda a: a.update(topk_ids=a["topk_ids"][:2]), ValueError, "rows"),
        (lambda a: a.update(topk_weights=a["topk_weights"][:, :1]), ValueError, "topk_weights"),
        (lambda a: a.update(topk_weights=a["topk_weights"].half()), TypeError, "topk_weights"),
        (lambda a: a.update(w2=a["w2"][:, :, :16]), ValueError, "w2 must have shape"),
        (lambda a: a.update(w2=a["w2"][:3]), ValueError, "w2 must have shape"),
        (lambda a: a.update(w2_bias=torch.zeros(E, H, dtype=torch.bfloat16)), TypeError, "w2_bias"),
        (lambda a: a.update(out=torch.empty(3, H)), TypeError, "out"),
        (lambda a: a.update(out=torch.empty(2, H, dtype=torch.bfloat16)), ValueError, "out"),
        (lambda a: None, ValueError, "CUDA device"),  # everything else right: CPU tensors
    ],
)
def test_fused_moe_checks_before_any_launch(change, error, match) -> None:
    x, w13, w2, weights, ids = _call_args()
    args = {"x": x, "w13": w13, "w2": w2, "topk_weights": weights, "topk_ids": ids}
    change(args)
    with pytest.raises(error, match=match):
        moegemm.fused_moe(**args)


def test_fused_moe_masked_checks_before_any_launch() -> None:
    _, w13, w2, _, _ = _call_args()
    x = torch.zeros(E, 5, H, dtype=torch.bfloat16)
    masked = torch.full((E,), 5, dtype=torch.int32)
    with pytest.raises(ValueError, match="shape"):
        moegemm.fused_moe_masked(x[:2], masked, w13, w2, 5)
    with pytest.raises(ValueError, match="expected_m"):
        moegemm.fused_moe_masked(x, masked, w13, w2, 0)
    with pytest.raises(TypeError, match="expected_m"):
        moegemm.fused_moe_masked(x, masked, w13, w2, 5.0)
    with pytest.raises((TypeError, ValueError), match="masked_m"):
        moegemm.fused_moe_masked(x, masked[:2], w13, w2, 5)
    with pytest.raises(ValueError, match="CUDA device"):
        moegemm.fused_moe_masked(x, masked, w13, w2, 5)


def test_reference_matches_a_per_token_loop() -> None:
    x, _, w2, weights, ids = _call_args(t=5, k=3)
    ids[0, 1] = -1
    ids[2, 0] = E + 3  # out of range: dropped like -1
    w13 = w13_of()
    b13, b2 = torch.randn(E, 2 * I), torch.randn(E, H)
    for act in ("silu", "swiglu_oai"):
        got = fused_moe_reference(x, w13, w2, weights, ids, act, b13, b2)
        for t in range(5):
            want = torch.zeros(H)
            for j in range(3):
                e = int(ids[t, j])
                if 0 <= e < E:
                    want += weights[t, j] * expert_forward(x[t : t + 1], w13[e], w2[e], act,
                                                           b13[e], b2[e])[0]  # fmt: skip
            torch.testing.assert_close(got[t], want, rtol=1e-4, atol=1e-4)


def test_swiglu_oai_clamps_as_gpt_oss() -> None:
    gate = torch.tensor([10.0, -3.0])
    up = torch.tensor([-9.0, 2.0])
    got = swiglu(gate, up, "swiglu_oai")
    want = torch.tensor(
        [
            (-7 + 1) * 7 * torch.sigmoid(torch.tensor(1.702 * 7)),
            3 * -3 * torch.sigmoid(torch.tensor(-3 * 1.702)),
        ]
    )
    torch.testing.assert_close(got, want)


def test_route_reference_is_the_stable_expert_order() -> None:
    ids = torch.tensor([[2, 0], [2, -1], [5, 2], [0, 1]], dtype=torch.int32)  # E = 3
    r = route_reference(ids, 3)
    assert r["offs"].tolist() == [2, 3, 6]
    # Expert 0: slots 1, 6; expert 1: slot 7; expert 2: slots 0, 2, 5; 3 and 4 dropped.
    assert r["row_slot"].tolist() == [1, 6, 7, 0, 2, 5]
    assert r["slot_row"].tolist() == [3, 0, 4, -1, -1, 5, 1, 2]


@pytest.mark.parametrize("epilogue", ["swiglu", "swiglu_oai", "row_scale"])
@pytest.mark.parametrize("rows", [1, 8, 64, 1024])
def test_layer_gemms_pick_legal_stores_and_paired_tiles(epilogue: str, rows: int) -> None:
    n, k = (4096, 7168) if epilogue != "row_scale" else (7168, 2048)
    swiglu = epilogue != "row_scale"
    for kind in ("m_grouped_offsets", "m_grouped_masked"):
        m = 8 * rows if kind == "m_grouped_offsets" else rows
        desc = GemmDesc(kind, m, n, k, 8, expected_m=rows, epilogue=epilogue)
        configs = list(enumerate_configs(desc, SM90))
        assert configs and all(is_legal(c, desc, SM90) for c in configs)
        assert all(c.layout.cluster_size == 1 for c in configs)
        staged = [c for c in configs if c.store_cols]
        assert staged and not any(c.layout.swap_ab for c in staged)
        if swiglu:
            assert all(c.layout.block_n % 16 == 0 for c in configs)
            assert all(c.layout.block_n % 32 == 0 for c in staged)
            # The staging holds the tile's BLOCK_N / 2 outputs: less than the plain kernel's.
            for c in staged:
                lay = c.layout
                assert c.pipeline.smem_bytes == smem_bytes_for(
                    lay.block_m, lay.block_n, c.pipeline.num_stages, c.store_cols,
                    out_cols=lay.block_n // 2,
                )  # fmt: skip
                assert (lay.block_n // 2) % c.store_cols == 0
        pick = select_config(desc, SM90)
        spec = kernel_spec(desc, pick)
        assert spec.name.endswith(epilogue) and "kMoeEpilogue" in spec.source
        if rows >= 1024:
            assert pick.store_cols, "prefill tiles stage their results for TMA stores"
        plain = GemmDesc(kind, m, n, k, 8, expected_m=rows)
        assert selection_key(desc, SM90) != selection_key(plain, SM90)


def test_moe_epilogues_refuse_other_kernels() -> None:
    desc = GemmDesc("m_grouped_offsets", 1024, 4096, 7168, 8, expected_m=128)
    pick = select_config(desc, SM90)
    with pytest.raises(ValueError, match="epilogue"):
        sm90_bf16_gemm_spec(pick, "bf16", False, "bf16_gemm_nt", epilogue="swiglu")
    with pytest.raises(ValueError, match="epilogue"):
        sm90_bf16_gemm_spec(pick, "bf16", True, "m_grouped_offsets", epilogue="row_scale")
    with pytest.raises(ValueError, match="unknown epilogue"):
        GemmDesc("m_grouped_offsets", 8, 64, 64, epilogue="gelu")
    # A plain TMA-store config stages whole BLOCK_N tiles: SwiGLU's staging is half that.
    tma = next(c for c in enumerate_configs(desc, SM90) if c.store_cols)
    moe = GemmDesc("m_grouped_offsets", 1024, 4096, 7168, 8, expected_m=128, epilogue="swiglu")
    assert not is_legal(tma, moe, SM90)
    row_scale = GemmDesc("m_grouped_offsets", 1024, 4096, 7168, 8, expected_m=128,
                         epilogue="row_scale")  # fmt: skip
    assert is_legal(tma, row_scale, SM90)
    # Staged SwiGLU outputs fill 16-column blocks: block_n 48 stages 24 columns, refused.
    odd = next(c for c in enumerate_configs(moe, SM90) if c.layout.block_n == 48)
    assert odd.store_cols == 0
    staged48 = replace(odd, storage=replace(odd.storage, store_box_d=(16, 64), swizzle_d=32))
    assert not is_legal(staged48, moe, SM90)
    with pytest.raises(ValueError, match="of 32 with TMA stores"):
        sm90_bf16_gemm_spec(staged48, "bf16", False, "m_grouped_offsets", epilogue="swiglu")


def test_kernel_order_is_its_own_inverse_on_biases() -> None:
    b = torch.arange(2 * 2 * 16, dtype=torch.float32).reshape(2, 32)
    for act in ("silu", "swiglu_oai"):
        assert torch.equal(source_order(kernel_order(b, act), act), b)


def test_the_layer_gemms_are_buildable_and_warmed() -> None:
    """The descs fused_moe and fused_moe_masked build (epilogue names included) make kernel
    specs, and `--layer`'s warmup covers every one of them for the preset's sizes."""
    from moegemm.moe.layer import layer_gemms, masked_gemms
    from moegemm.warmup.layer_specs import layer_specs, model_layer

    model = "qwen3_30b_a3b"
    e, h, i, top_k, activation = model_layer(model)
    assert (e, h, i, top_k, activation) == (128, 2048, 768, 8, "silu")
    tokens = [1, 3, 17, 64, 300]
    warmed = set(layer_specs(model, tokens, "sm_90a", 132))
    for t in tokens:
        sizes = {"tokens": t, "top_k": top_k, "experts": e, "hidden": h, "intermediate": i,
                 "ldw2": i, "ldw2_group": h * i}  # fmt: skip
        for desc, problem in layer_gemms(sizes, activation):
            args = bound_integers(_C.Bf16MoeGemmLauncher, problem)
            assert len(args) == 10 and args[0] == t * top_k
            assert kernel_spec(desc, select_config(desc, SM90)) in warmed
        for max_m in (t, max(tokens)):
            hint = min(max(1, -(-t * top_k // e)), max_m)
            for desc, problem in masked_gemms(e, max_m, h, i, hint, activation, i, h * i):
                assert problem.rows == e * max_m
                assert kernel_spec(desc, select_config(desc, SM90)) in warmed
    oai = model_layer("gpt-oss-20b")
    assert oai[-1] == "swiglu_oai"


def test_warmup_layer_flag(capsys, tmp_path) -> None:
    from moegemm.warmup.cli import main

    base = ["--warmup", "--dry-run", "--cache-dir", str(tmp_path), "--tokens", "1,8"]
    assert main([*base, "--model", "qwen3-30b-a3b", "--layer"]) == 0
    out = capsys.readouterr().out
    assert (
        "fused layer (silu, bf16 experts)" in out and "moe_route_gather" in out and "_swiglu" in out
    )
    assert main([*base, "--model", "gpt-oss-20b", "--layer"]) == 0  # MXFP4 preset
    out = capsys.readouterr().out
    assert "mxfp4 experts" in out and "moe_route_gather_t512_fp8" in out
    assert "moe_quantize_rows" in out and "_prepared_swiglu_oai" in out and "_raw_row_scale" in out
    assert main([*base, "--model", "gpt-oss-20b", "--weights", "bf16", "--layer"]) == 0
    assert "swiglu_oai" in capsys.readouterr().out
    shapes = tmp_path / "s.json"
    shapes.write_text('[{"n": 256, "k": 256, "num_groups": 4}]')
    assert main([*base, "--shapes", str(shapes), "--layer"]) == 2
    assert "--layer needs --model" in capsys.readouterr().err


def test_fullgraph_compile_sees_one_fused_moe_op() -> None:
    """Under torch.compile(fullgraph=True) a module calling fused_moe traces to the custom op
    moegemm::fused_moe (meta tensors: the fake implementation's checks run, nothing launches);
    aot_eager functionalizes its mutations."""
    dev = "meta"
    w13 = moegemm.prepare_moe_weights(torch.zeros(E, 2 * I, H, dtype=torch.bfloat16, device=dev))
    w2 = torch.zeros(E, H, I, dtype=torch.bfloat16, device=dev)
    ws = moegemm.MoEWorkspace(5, 2, E, H, I, device=dev)

    class Experts(torch.nn.Module):
        def forward(self, x, ids, weights):
            return moegemm.fused_moe(x, w13, w2, weights, ids, workspace=ws)

    args = (
        torch.zeros(5, H, dtype=torch.bfloat16, device=dev),
        torch.zeros(5, 2, dtype=torch.int32, device=dev),
        torch.zeros(5, 2, device=dev),
    )
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    out = torch.compile(Experts(), fullgraph=True, backend=backend)(*args)
    assert out.shape == (5, H) and len(graphs) == 1
    ops = [str(n.target) for n in graphs[0].graph.nodes if "moegemm" in str(n.target)]
    assert ops == ["moegemm.fused_moe"]
    assert torch.compile(Experts(), fullgraph=True, backend="aot_eager")(*args).shape == (5, H)
    bad = (args[0][:, :8], args[1], args[2])
    # The check raises while Dynamo traces (it reports it as its own exception type).
    with pytest.raises((ValueError, torch._dynamo.exc.Unsupported), match="hidden"):
        torch.compile(Experts(), fullgraph=True, backend=backend)(*bad)


@pytest.mark.parametrize("w2_prepared", [False, True])
def test_fullgraph_compile_sees_one_fused_moe_mxfp4_op(w2_prepared: bool) -> None:
    """The same with MXFP4 experts (gpt-oss's activation and biases): one moegemm::fused_moe_mxfp4
    node, the workspace's FP8 buffers among its mutated arguments; the fake implementation's
    checks reject a w2 of the wrong size while Dynamo traces."""
    dev, u8 = "meta", torch.uint8
    E, I, H = 4, 64, 128  # MXFP4 needs H and I multiples of 32
    blocks = torch.zeros(E, 2 * I, H // 2, dtype=u8, device=dev)
    scales = torch.zeros(E, 2 * I, H // 32, dtype=u8, device=dev)
    bias = torch.zeros(E, 2 * I, device=dev)
    w13 = moegemm.prepare_moe_weights((blocks, scales), activation="swiglu_oai", w13_bias=bias,
                                      mxfp4_layout="raw")  # fmt: skip
    if w2_prepared:  # the prepared layout's tensors: code rows of Ip / 2 bytes, offsets words
        kb = -(-I // 128)
        w2b = torch.zeros(E, H, 64 * kb, dtype=u8, device=dev)
        w2s = torch.zeros(E, 2 * kb, H, dtype=torch.int32, device=dev)
        w2 = moegemm.Mxfp4Weights(w2b, w2s, True)
    else:
        w2b = torch.zeros(E, H, I // 2, dtype=u8, device=dev)
        w2s = torch.zeros(E, H, I // 32, dtype=u8, device=dev)
        w2 = (w2b, w2s)
    b2 = torch.zeros(E, H, device=dev)
    ws = moegemm.MoEWorkspace(5, 2, E, H, I, "mxfp4", device=dev)

    class Experts(torch.nn.Module):
        def __init__(self, w2) -> None:
            super().__init__()
            self.w2 = w2

        def forward(self, x, ids, weights):
            return moegemm.fused_moe(x, w13, self.w2, weights, ids, w2_bias=b2, workspace=ws)

    args = (
        torch.zeros(5, H, dtype=torch.bfloat16, device=dev),
        torch.zeros(5, 2, dtype=torch.int32, device=dev),
        torch.zeros(5, 2, device=dev),
    )
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    out = torch.compile(Experts(w2), fullgraph=True, backend=backend)(*args)
    assert out.shape == (5, H) and len(graphs) == 1
    nodes = [n for n in graphs[0].graph.nodes if "moegemm" in str(n.target)]
    assert [str(n.target) for n in nodes] == ["moegemm.fused_moe_mxfp4"]
    assert nodes[0].args[-4:] == ("swiglu_oai", False, w2_prepared, "sm_90a")
    assert torch.compile(Experts(w2), fullgraph=True, backend="aot_eager")(*args).shape == (5, H)
    short = (torch.zeros(E, H, I // 4, dtype=u8, device=dev),
             torch.zeros(E, H, I // 32, dtype=u8, device=dev))  # fmt: skip
    with pytest.raises((ValueError, torch._dynamo.exc.Unsupported), match="w2 blocks"):
        torch.compile(Experts(short), fullgraph=True, backend=backend)(*args)


def _mxfp4_pair(e: int, n: int, k: int, seed: int):
    from moegemm.quant import quantize_mxfp4

    w = torch.randn(e, n, k, generator=torch.Generator().manual_seed(seed)) * 0.05
    return quantize_mxfp4(w)


@pytest.mark.parametrize("layout", ["raw", "prepared"])
def test_mxfp4_w13_keeps_its_rows_paired_and_its_values(layout: str) -> None:
    """The MXFP4 w13 gets the BF16 row order on codes and scales alike; its dequantized value
    in source order equals the checkpoint's (the prepared layout keeps every value)."""
    from moegemm.api.mxfp4_weights import Mxfp4Weights, unprepare_mxfp4_weights
    from moegemm.quant import dequantize_mxfp4

    b, sfb = _mxfp4_pair(2, 64, 64, 3)
    for act in ("silu", "swiglu_oai"):
        p = moegemm.prepare_moe_weights((b, sfb), activation=act, mxfp4_layout=layout)
        assert p.is_mxfp4 and p.mxfp4_prepared == (layout == "prepared")
        assert (p.num_experts, p.intermediate, p.hidden) == (2, 32, 64)
        codes, scales = p.weight, p.scales
        if layout == "prepared":
            codes, scales = unprepare_mxfp4_weights(Mxfp4Weights(p.weight, p.scales, k=p.hidden))
        want = dequantize_mxfp4(b, sfb)
        got = source_order(dequantize_mxfp4(codes, scales), act)
        assert torch.equal(got, want)
    blocks4 = b.reshape(2, 64, 2, 16)  # gpt-oss's [E, 2I, H/32, 16] view
    q = moegemm.prepare_moe_weights((blocks4, sfb), activation="swiglu_oai", mxfp4_layout="raw")
    assert q.weight.shape == (2, 64, 32)
    with pytest.raises(ValueError, match="scales"):
        moegemm.prepare_moe_weights((b, sfb[:, :, :1]))


def test_mxfp4_layer_checks_and_gemms() -> None:
    """MXFP4 experts: w2 must be MXFP4 too; the layer's GEMMs are FP8 x FP4 descs of both weight
    forms with the MoE epilogues, and compile to specs."""
    from moegemm.moe.mxfp4 import mxfp4_layer_gemms

    e, h, i = 4, 64, 32
    w13 = moegemm.prepare_moe_weights(_mxfp4_pair(e, 2 * i, h, 4), activation="swiglu_oai")
    w2 = _mxfp4_pair(e, h, i, 5)
    x = torch.zeros(3, h, dtype=torch.bfloat16)
    ids = torch.zeros(3, 2, dtype=torch.int32)
    weights = torch.zeros(3, 2)
    bf16_w2 = torch.zeros(e, h, i, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="MXFP4 too"):
        moegemm.fused_moe(x, w13, bf16_w2, weights, ids)
    with pytest.raises(ValueError, match="w2 blocks must have shape"):
        moegemm.fused_moe(x, w13, (w2[0][:, :, :8], w2[1]), weights, ids)
    with pytest.raises(ValueError, match="CUDA device"):
        moegemm.fused_moe(x, w13, w2, weights, ids)
    sizes = {"tokens": 5, "top_k": 2, "experts": e, "hidden": h, "intermediate": i}
    (d1, a1), (d2, a2) = mxfp4_layer_gemms(sizes, w13, False)
    assert d1.ab_dtype == d2.ab_dtype == "fp8_fp4"
    assert (d1.weights, d1.epilogue, d2.weights, d2.epilogue) == (
        "prepared", "swiglu_oai", "raw", "row_scale"
    )  # fmt: skip
    a1, a2 = (bound_integers(_C.Sm90Fp8Fp4MoeGemmLauncher, a) for a in (a1, a2))
    assert len(a1) == len(a2) == 15 and a1[:5] == (10, 10, 2 * i, h, e)
    for d in (d1, d2):
        spec = kernel_spec(d, select_config(d, SM90))
        assert "kMoeEpilogue" in spec.source and spec.name.endswith(d.epilogue)


def test_mxfp4_layer_gemms_are_warmed() -> None:
    from moegemm.moe.mxfp4 import mxfp4_layer_gemms
    from moegemm.moe.weights import PreparedW13
    from moegemm.warmup.layer_specs import layer_specs, model_layer

    model = "gpt_oss_20b"
    e, h, i, top_k, act = model_layer(model)
    tokens = [1, 7, 64]
    warmed = set(layer_specs(model, tokens, "sm_90a", 132, weights="mxfp4"))
    for prepared in (False, True):
        w13 = PreparedW13(torch.empty(e, 2 * i, h // 2, dtype=torch.uint8, device="meta"), None,
                          act, torch.empty(1, device="meta"), prepared)  # fmt: skip
        for t in tokens:
            sizes = {"tokens": t, "top_k": top_k, "experts": e, "hidden": h, "intermediate": i}
            for desc, _ in mxfp4_layer_gemms(sizes, w13, prepared):
                assert kernel_spec(desc, select_config(desc, SM90)) in warmed


def test_a_workspace_of_the_other_weight_kind_is_refused() -> None:
    """A BF16-expert call with an MXFP4 workspace (FP8 x_sorted, half the bytes) would write
    past it: refused before any launch (CPU tensors: the refusal comes first)."""
    from moegemm.moe.layer import _workspace_for

    x = torch.zeros(3, H, dtype=torch.bfloat16)
    fp8 = moegemm.MoEWorkspace(4, 2, E, H, I, weight_dtype="mxfp4", device="cpu")
    with pytest.raises(ValueError, match="weight_dtype"):
        _workspace_for(fp8, 3, 2, E, H, I, x)
    bf16 = moegemm.MoEWorkspace(4, 2, E, H, I, device="cpu")
    with pytest.raises(ValueError, match="weight_dtype"):
        _workspace_for(bf16, 3, 2, E, H, I, x, "mxfp4")
    with pytest.raises(ValueError, match="max_tokens"):
        _workspace_for(bf16, 5, 2, E, H, I, x)
    assert _workspace_for(bf16, 3, 2, E, H, I, x) is bf16
