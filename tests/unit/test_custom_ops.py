"""The public GEMMs as torch.library custom ops, traced without a GPU.

Dynamo traces meta tensors here (fake CUDA tensors under FakeTensorMode for the fake impls):
`fullgraph=True` fails on any graph break, so a compiled call proves that Dynamo saw the
custom op and nothing of the eager path (data pointers, the current device, the launcher)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import moegemm

BF16, FP32, I32 = torch.bfloat16, torch.float32, torch.int32
G, M, N, K = 4, 256, 64, 128

OPS = {
    "bf16_gemm_nt": "(Tensor a, Tensor b, Tensor(a2!) d, Tensor? c=None) -> ()",
    "m_grouped_bf16_gemm_nt_contiguous": (
        "(Tensor a, Tensor b, Tensor(a2!) d, Tensor? m_indices=None, Tensor? offs=None) -> ()"
    ),
    "m_grouped_bf16_gemm_nt_masked": (
        "(Tensor a, Tensor b, Tensor(a2!) d, Tensor masked_m, SymInt expected_m) -> ()"
    ),
    "k_grouped_bf16_gemm_tn_contiguous": (
        "(Tensor a, Tensor b, Tensor(a2!) d, Tensor offs, Tensor? c=None) -> ()"
    ),
}


def empty(*shape: int, dtype: torch.dtype = BF16, device: str = "meta") -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device)


def calls(device: str = "meta") -> dict[str, tuple[Callable, tuple]]:
    """(public function as the caller writes it, operands) for every function and layout."""

    def t(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
        return empty(*shape, dtype=dtype, device=device)

    return {
        "dense": (lambda a, b, d: moegemm.bf16_gemm_nt(a, b, d), (t(M, K), t(N, K), t(M, N))),
        "dense_c": (
            lambda a, b, d, c: moegemm.bf16_gemm_nt(a, b, d, c),
            (t(M, K), t(N, K), t(M, N, dtype=FP32), t(M, N, dtype=FP32)),
        ),
        "m_indices": (
            lambda a, b, d, i: moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, i),
            (t(M, K), t(G, N, K), t(M, N), t(M, dtype=I32)),
        ),
        "offs": (
            lambda a, b, d, o: moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=o),
            (t(200, K), t(G, N, K), t(200, N), t(G, dtype=I32)),
        ),
        "masked": (
            lambda a, b, d, mm: moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, mm, 16),
            (t(G, 32, K), t(G, N, K), t(G, 32, N), t(G, dtype=I32)),
        ),
        "k_grouped": (
            lambda a, b, d, o: moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, o),
            (t(300, M), t(300, N), t(G, M, N, dtype=FP32), t(G, dtype=I32)),
        ),
        "k_grouped_c_is_d": (
            lambda a, b, d, o: moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, o, d),
            (t(300, M), t(300, N), t(G, M, N, dtype=FP32), t(G, dtype=I32)),
        ),
    }


OP_OF = {
    "dense": "bf16_gemm_nt",
    "dense_c": "bf16_gemm_nt",
    "m_indices": "m_grouped_bf16_gemm_nt_contiguous",
    "offs": "m_grouped_bf16_gemm_nt_contiguous",
    "masked": "m_grouped_bf16_gemm_nt_masked",
    "k_grouped": "k_grouped_bf16_gemm_tn_contiguous",
    "k_grouped_c_is_d": "k_grouped_bf16_gemm_tn_contiguous",
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", list(OPS))
def test_the_ops_and_their_schemas(name: str) -> None:
    schema = getattr(torch.ops.moegemm, name).default._schema
    assert str(schema) == f"moegemm::{name}{OPS[name]}"
    written = [arg.name for arg in schema.arguments if arg.alias_info and arg.alias_info.is_write]
    assert written == ["d"] and not schema.returns


@pytest.mark.parametrize("case", list(OP_OF))
def test_fake_impls_under_fake_tensor_mode(case: str) -> None:
    with FakeTensorMode():
        _, args = calls("cuda")[case]
        op = getattr(torch.ops.moegemm, OP_OF[case])
        op_args = _op_args(case, args)
        assert op(*op_args) is None
        assert args[2].shape == calls("meta")[case][1][2].shape  # d as it was


def _op_args(case: str, args: tuple) -> tuple:
    """The op's positional arguments for a `calls()` case."""
    if case == "offs":
        return (*args[:3], None, args[3])
    if case == "masked":
        return (*args, 16)
    if case == "k_grouped_c_is_d":
        return (*args, args[2])
    return args


def test_fake_impls_refuse_bad_shapes_by_argument_name() -> None:
    op = torch.ops.moegemm
    with FakeTensorMode():

        def t(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
            return empty(*shape, dtype=dtype, device="cuda")

        a, d, offs = t(200, K), t(200, N), t(G, dtype=I32)
        with pytest.raises(ValueError, match=r"^b must have shape \(4, 64, 128\)"):
            op.m_grouped_bf16_gemm_nt_contiguous(a, t(G, N, K - 8), d, None, offs)
        with pytest.raises(ValueError, match=r"^offs must have shape \(4,\)"):
            op.m_grouped_bf16_gemm_nt_contiguous(a, t(G, N, K), d, None, t(G + 1, dtype=I32))
        with pytest.raises(TypeError, match="^masked_m must have dtype torch.int32"):
            op.m_grouped_bf16_gemm_nt_masked(
                t(G, 8, K), t(G, N, K), t(G, 8, N), t(G, dtype=torch.int64), 4
            )


def test_the_real_impls_are_the_checked_eager_path() -> None:
    a, b, d = torch.zeros(M, K, dtype=BF16), torch.zeros(N, K, dtype=BF16), torch.zeros(M, N)
    with pytest.raises(ValueError, match="^a must be on a CUDA device, got cpu$"):
        torch.ops.moegemm.bf16_gemm_nt(a, b, d)


class Recorder:
    """A torch.compile backend that keeps the graphs Dynamo hands it and runs them as traced."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs.append(gm)
        return gm.forward


def op_calls(gm: torch.fx.GraphModule) -> list[str]:
    """The moegemm ops a graph calls (Dynamo records the packet, make_fx the overload)."""
    return [
        str(node.target).removesuffix(".default")
        for node in gm.graph.nodes
        if node.op == "call_function" and "moegemm" in str(node.target)
    ]


@pytest.mark.parametrize("case", list(OP_OF))
def test_fullgraph_compile_sees_one_custom_op(case: str) -> None:
    fn, args = calls()[case]
    backend = Recorder()
    out = torch.compile(fn, fullgraph=True, backend=backend)(*args)
    assert out is args[2]  # the public functions return d
    assert len(backend.graphs) == 1
    assert op_calls(backend.graphs[0]) == [f"moegemm.{OP_OF[case]}"]


def test_one_graph_for_a_layer_that_calls_every_gemm() -> None:
    fns = calls()

    def layer(*tensors: torch.Tensor) -> torch.Tensor:
        at = 0
        for case in fns.values():
            fn, args = case
            fn(*tensors[at : at + len(args)])
            at += len(args)
        return tensors[2]

    flat = [t for _, args in fns.values() for t in args]
    explained = torch._dynamo.explain(layer)(*flat)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    assert len(op_calls(explained.graphs[0])) == len(fns)


@pytest.mark.parametrize("case", ["dense_c", "m_indices", "offs", "masked", "k_grouped_c_is_d"])
def test_functionalized_and_dynamic(case: str) -> None:
    """aot_eager functionalizes the mutation as inductor does; dynamic shapes reach the fake
    impls' checks as symbols (and a varying expected_m as a SymInt)."""
    fn, args = calls()[case]
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=True)
    assert compiled(*args) is args[2]
    if case == "masked":
        for expected in (8, 24):
            compiled_masked = torch.compile(
                lambda a, b, d, mm, e: moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, mm, e),
                fullgraph=True,
                backend="aot_eager",
                dynamic=True,
            )
            assert compiled_masked(*args, expected) is args[2]


def test_make_fx_traces_the_op_with_fake_tensors() -> None:
    def fn(a, b, d, offs):
        torch.ops.moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, None, offs)
        return d

    _, args = calls("cpu")["offs"]
    gm = make_fx(fn, tracing_mode="fake")(*args)
    assert op_calls(gm) == ["moegemm.m_grouped_bf16_gemm_nt_contiguous"]


FORCED_CONFIG = object()


def test_config_is_refused_under_compile() -> None:
    _, args = calls()["dense"]

    def fn(a, b, d):
        return moegemm.bf16_gemm_nt(a, b, d, config=FORCED_CONFIG)

    with pytest.raises(Exception, match="config= forces a kernel in eager calls only"):
        torch.compile(fn, fullgraph=True, backend=Recorder())(*args)


@pytest.mark.parametrize("case", ["dense_c", "m_indices", "offs", "masked", "k_grouped_c_is_d"])
def test_opcheck_on_meta_tensors(case: str) -> None:
    """torch.library's checks (schema, autograd registration, fake tensor, AOT dispatch with
    dynamic shapes); on meta tensors every call runs the fake implementation."""
    _, args = calls()[case]
    op = getattr(torch.ops.moegemm, OP_OF[case]).default
    torch.library.opcheck(op, _op_args(case, args))


def test_dynamic_rows_compile_once() -> None:
    """The fake impls' checks guard on the symbols without specializing them: new row counts
    reuse the graph (m_indices keeps its multiple-of-128 rule as a guard)."""
    backend = Recorder()

    def fn(a, b, d, info, offs):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, info, offs=offs)
        return d

    compiled = torch.compile(fn, fullgraph=True, backend=backend, dynamic=True)
    b = empty(G, N, K)
    for rows in (200, 300, 17):
        compiled(empty(rows, K), b, empty(rows, N), None, empty(G, dtype=I32))
    for rows in (256, 384):
        compiled(empty(rows, K), b, empty(rows, N), empty(rows, dtype=I32), None)
    assert len(backend.graphs) == 2  # one per layout
