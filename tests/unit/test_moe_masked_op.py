"""fused_moe_masked as the custom ops moegemm::fused_moe_masked (BF16 experts) and
moegemm::fused_moe_masked_mxfp4 (MXFP4 experts), traced without a GPU: what an expert-parallel
forward compiles with torch.compile(fullgraph=True). Meta tensors run the fake implementations;
FakeTensorMode stands in for CUDA tensors."""

from __future__ import annotations

import re

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import moegemm
from moegemm.moe.ops import _check_masked_call

BF16, FP32, I32, U8 = torch.bfloat16, torch.float32, torch.int32, torch.uint8
E, MAX_M, I, H = 4, 8, 64, 128  # MXFP4 needs H and I multiples of 32

SCHEMAS = {
    "fused_moe_masked": (
        "(Tensor x, Tensor masked_m, Tensor w13, Tensor? w13_bias, Tensor w2, Tensor? w2_bias, "
        "Tensor(a6!) out, Tensor(a7!) h, SymInt expected_m, Tensor? row_weight, str activation)"
        " -> ()"
    ),
    "fused_moe_masked_mxfp4": (
        "(Tensor x, Tensor masked_m, Tensor w13, Tensor w13_scales, Tensor? w13_bias, Tensor w2, "
        "Tensor w2_scales, Tensor? w2_bias, Tensor(a8!) out, Tensor(a9!) x8, Tensor(a10!) sfa_x, "
        "Tensor(a11!) h, Tensor(a12!) h8, Tensor(a13!) sfa_h, SymInt expected_m, "
        "Tensor? row_weight, str activation, bool w13_prepared, bool w2_prepared, "
        'str arch="sm_90a") -> ()'
    ),
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def z(*shape: int, dtype: torch.dtype = BF16, dev: str = "meta") -> torch.Tensor:
    return torch.zeros(shape, dtype=dtype, device=dev)


def bf16_experts(dev: str = "meta"):
    w13 = moegemm.prepare_moe_weights(z(E, 2 * I, H, dev=dev), w13_bias=z(E, 2 * I, dtype=FP32,
                                                                           dev=dev))  # fmt: skip
    return w13, z(E, H, I, dev=dev)


def mxfp4_experts(w2_prepared: bool, dev: str = "meta"):
    w13 = moegemm.prepare_moe_weights(
        (z(E, 2 * I, H // 2, dtype=U8, dev=dev), z(E, 2 * I, H // 32, dtype=U8, dev=dev)),
        activation="swiglu_oai", w13_bias=z(E, 2 * I, dtype=FP32, dev=dev), mxfp4_layout="raw",
    )  # fmt: skip
    if w2_prepared:  # the prepared layout: code rows of Ip / 2 bytes, offsets words
        kb = -(-I // 128)
        w2 = moegemm.Mxfp4Weights(z(E, H, 64 * kb, dtype=U8, dev=dev),
                                  z(E, 2 * kb, H, dtype=I32, dev=dev), True)  # fmt: skip
    else:
        w2 = (z(E, H, I // 2, dtype=U8, dev=dev), z(E, H, I // 32, dtype=U8, dev=dev))
    return w13, w2


class Recorder:
    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list):
        self.graphs.append(gm)
        return gm.forward


def moegemm_nodes(gm: torch.fx.GraphModule) -> list:
    return [n for n in gm.graph.nodes if "moegemm" in str(n.target)]


@pytest.mark.parametrize("name", list(SCHEMAS))
def test_the_ops_and_their_schemas(name: str) -> None:
    schema = getattr(torch.ops.moegemm, name).default._schema
    assert str(schema) == f"moegemm::{name}{SCHEMAS[name]}"


@pytest.mark.parametrize("with_workspace", [False, True])
@pytest.mark.parametrize("with_row_weight", [False, True])
def test_fullgraph_compile_bf16(with_workspace: bool, with_row_weight: bool) -> None:
    """An expert-parallel forward (per-expert rows, routing weights applied in GEMM2) traces to
    one moegemm::fused_moe_masked node; the workspace's h is the op's mutated buffer."""
    w13, w2 = bf16_experts()
    b2 = z(E, H, dtype=FP32)
    ws = moegemm.MoEWorkspace(E * MAX_M, 1, E, H, I, device="meta") if with_workspace else None

    def forward(x, masked_m, rw):
        return moegemm.fused_moe_masked(x, masked_m, w13, w2, 3, w2_bias=b2, workspace=ws,
                                        row_weight=rw if with_row_weight else None)  # fmt: skip

    args = (z(E, MAX_M, H), z(E, dtype=I32), z(E, MAX_M, dtype=FP32))
    backend = Recorder()
    out = torch.compile(forward, fullgraph=True, backend=backend)(*args)
    assert out.shape == (E, MAX_M, H) and len(backend.graphs) == 1
    nodes = moegemm_nodes(backend.graphs[0])
    assert [str(n.target) for n in nodes] == ["moegemm.fused_moe_masked"]
    assert nodes[0].args[-3] == 3 and (nodes[0].args[-2] is None) != with_row_weight
    assert torch.compile(forward, fullgraph=True, backend="aot_eager")(*args).shape == out.shape


@pytest.mark.parametrize("w2_prepared", [False, True])
@pytest.mark.parametrize("with_workspace", [False, True])
def test_fullgraph_compile_mxfp4(w2_prepared: bool, with_workspace: bool) -> None:
    w13, w2 = mxfp4_experts(w2_prepared)
    ws = (
        moegemm.MoEWorkspace(E * MAX_M, 1, E, H, I, "mxfp4", device="meta")
        if with_workspace
        else None
    )

    def forward(x, masked_m, rw):
        return moegemm.fused_moe_masked(x, masked_m, w13, w2, 5, w2_bias=z(E, H, dtype=FP32),
                                        workspace=ws, row_weight=rw)  # fmt: skip

    args = (z(E, MAX_M, H), z(E, dtype=I32), z(E, MAX_M, dtype=FP32))
    backend = Recorder()
    out = torch.compile(forward, fullgraph=True, backend=backend)(*args)
    assert out.shape == (E, MAX_M, H) and len(backend.graphs) == 1
    nodes = moegemm_nodes(backend.graphs[0])
    assert [str(n.target) for n in nodes] == ["moegemm.fused_moe_masked_mxfp4"]
    assert nodes[0].args[-4:] == ("swiglu_oai", False, w2_prepared, "sm_90a")
    assert torch.compile(forward, fullgraph=True, backend="aot_eager")(*args).shape == out.shape


def test_fake_checks_reject_while_tracing() -> None:
    w13, w2 = bf16_experts()
    small = moegemm.MoEWorkspace(2, 1, E, H, I, device="meta")  # 2 rows of h, the call needs 32

    def call(x, masked_m, rw, ws=None):
        return moegemm.fused_moe_masked(x, masked_m, w13, w2, 4, workspace=ws, row_weight=rw)

    x, mm = z(E, MAX_M, H), z(E, dtype=I32)
    exc = torch._dynamo.exc
    bad = (ValueError, TypeError, exc.Unsupported, exc.TorchRuntimeError)
    with pytest.raises(bad, match="row_weight must have shape"):
        torch.compile(call, fullgraph=True, backend=Recorder())(x, mm, z(E, 2, dtype=FP32))
    with pytest.raises(bad, match="masked_m must have shape"):
        torch.compile(call, fullgraph=True, backend=Recorder())(x, z(E + 1, dtype=I32), None)
    with pytest.raises(bad, match="workspace h holds 2 x 64 rows; this call needs 32 x 64"):
        torch.compile(lambda x, mm: call(x, mm, None, small), fullgraph=True, backend=Recorder())(
            x, mm
        )
    w13x, _ = mxfp4_experts(False)
    with pytest.raises(bad, match="w2 must be MXFP4 too"):
        torch.compile(
            lambda x, mm: moegemm.fused_moe_masked(x, mm, w13x, w2, 4),
            fullgraph=True,
            backend=Recorder(),
        )(x, mm)


def test_a_varying_expected_m_compiles_as_a_symint() -> None:
    w13, w2 = bf16_experts()
    compiled = torch.compile(
        lambda x, mm, em: moegemm.fused_moe_masked(x, mm, w13, w2, em),
        fullgraph=True,
        backend="aot_eager",
        dynamic=True,
    )
    for expected in (2, 6):
        assert compiled(z(E, MAX_M, H), z(E, dtype=I32), expected).shape == (E, MAX_M, H)


def test_fake_impls_under_fake_tensor_mode() -> None:
    """Called as the dispatcher would with fake CUDA tensors: shapes only, nothing launches."""
    with FakeTensorMode():
        # The op takes the prepared tensors as they are (preparation itself runs on the host).
        w13 = moegemm.moe.PreparedW13(z(E, 2 * I, H, dev="cuda"), z(E, 2 * I, dtype=FP32,
                                                                     dev="cuda"), "silu")  # fmt: skip
        w2 = z(E, H, I, dev="cuda")
        x, out, h = z(E, MAX_M, H, dev="cuda"), z(E, MAX_M, H, dev="cuda"), z(40, I, dev="cuda")
        mm, rw = z(E, dtype=I32, dev="cuda"), z(E, MAX_M, dtype=FP32, dev="cuda")
        op = torch.ops.moegemm.fused_moe_masked
        assert op(x, mm, w13.weight, w13.bias, w2, None, out, h, 4, rw, "silu") is None
        with pytest.raises(ValueError, match="^workspace h holds 16 x 64 rows"):
            op(x, mm, w13.weight, w13.bias, w2, None, out, z(16, I, dev="cuda"), 4, rw, "silu")
        with pytest.raises(ValueError, match="^expected_m must be a positive int"):
            op(x, mm, w13.weight, w13.bias, w2, None, out, h, 0, rw, "silu")


def test_opcheck_on_meta_tensors() -> None:
    w13, w2 = bf16_experts()
    args = (z(E, MAX_M, H), z(E, dtype=I32), w13.weight, w13.bias, w2, z(E, H, dtype=FP32),
            z(E, MAX_M, H), z(E * MAX_M, I), 4, z(E, MAX_M, dtype=FP32), "silu")  # fmt: skip
    torch.library.opcheck(torch.ops.moegemm.fused_moe_masked.default, args)


BAD_CALLS = {
    "x dtype": lambda a: {**a, "x": a["x"].float()},
    "x shape": lambda a: {**a, "x": a["x"][:, :, :64].contiguous()},
    "x strides": lambda a: {**a, "x": a["x"].transpose(0, 1).contiguous().transpose(0, 1)},
    "masked_m dtype": lambda a: {**a, "masked_m": a["masked_m"].long()},
    "masked_m shape": lambda a: {**a, "masked_m": a["masked_m"][:2]},
    "expected_m zero": lambda a: {**a, "expected_m": 0},
    "expected_m float": lambda a: {**a, "expected_m": 4.0},
    "w2 shape": lambda a: {**a, "w2": a["w2"][:, :, :32]},
    "w2_bias": lambda a: {**a, "w2_bias": torch.zeros(E, H + 8)},
    "row_weight dtype": lambda a: {**a, "row_weight": a["row_weight"].bfloat16()},
    "row_weight shape": lambda a: {**a, "row_weight": a["row_weight"][:, :4]},
    "out shape": lambda a: {**a, "out": a["out"][:, :4]},
    "out dtype": lambda a: {**a, "out": a["out"].float()},
}


@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_fake_checks_match_the_eager_ones(case: str) -> None:
    """The fake implementation's checks raise what the eager call raises (CPU tensors: the
    eager structural checks run before placement), type and words alike."""
    w13, w2 = bf16_experts("cpu")
    good = {"x": z(E, MAX_M, H, dev="cpu"), "masked_m": z(E, dtype=I32, dev="cpu"), "w2": w2,
            "expected_m": 4, "w2_bias": None, "out": z(E, MAX_M, H, dev="cpu"),
            "row_weight": z(E, MAX_M, dtype=FP32, dev="cpu")}  # fmt: skip
    a = BAD_CALLS[case](good)
    with pytest.raises((TypeError, ValueError)) as eager:
        moegemm.fused_moe_masked(a["x"], a["masked_m"], w13, a["w2"], a["expected_m"],
                                 w2_bias=a["w2_bias"], out=a["out"], row_weight=a["row_weight"])  # fmt: skip
    h = {"h": (z(E * MAX_M, I, dev="cpu"), BF16, I)}
    with pytest.raises(eager.type, match=f"^{re.escape(str(eager.value))}$"):
        _check_masked_call(a, w13, a["w2"], h)
    # And the good call passes them.
    _check_masked_call(good, w13, w2, h)
