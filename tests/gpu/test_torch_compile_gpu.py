"""torch.compile of every public GEMM on the GPU: `fullgraph=True` with the default (inductor)
backend, checked against the eager call and an FP32 reference, then the compiled function
captured in a CUDA graph and replayed with new data and new group sizes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch

import moegemm
from moegemm.testing import calc_diff

pytestmark = pytest.mark.gpu

TOL = 1e-5
BF16, FP32, I32 = torch.bfloat16, torch.float32, torch.int32
G, N, K = 4, 512, 256
ALIGN = 128  # get_mk_alignment_for_contiguous_layout()


def bf16(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(BF16)


def offsets(sizes: list[int]) -> torch.Tensor:
    return torch.tensor(sizes, device="cuda", dtype=I32).cumsum(0).to(I32)


def segments(sizes: list[int]) -> list[tuple[int, int, int]]:
    """(group, start row, rows) of packed groups."""
    out, start = [], 0
    for g, rows in enumerate(sizes):
        out.append((g, start, rows))
        start += rows
    return out


@dataclass
class Case:
    """A call, its operands, the rows of d it writes against an FP32 reference, and how to put
    another problem of the same shapes (new data, new group sizes) into the same operands."""

    fn: Callable[..., torch.Tensor]
    args: tuple  # d at index 2
    check: Callable[[tuple], float]  # worst calc_diff of the written parts against FP32
    refill: Callable[[tuple], None]  # new values in place (what a CUDA graph replay reads)
    same: Callable[[torch.Tensor, torch.Tensor], bool]  # written parts of two d's equal


def dense_case(with_c: bool) -> Case:
    a, b = bf16(300, K), bf16(N, K)
    d = torch.zeros(300, N, device="cuda", dtype=FP32 if with_c else BF16)
    c = torch.randn(300, N, device="cuda") if with_c else None

    def fn(a, b, d, *c):
        return moegemm.bf16_gemm_nt(a, b, d, *c)

    def check(args: tuple) -> float:
        a, b, d, *c = args
        ref = a.float() @ b.float().t() + (c[0] if c else 0)
        return calc_diff(d, ref)

    def refill(args: tuple) -> None:
        args[0].copy_(bf16(300, K))
        args[1].copy_(bf16(N, K))

    return Case(fn, (a, b, d) + ((c,) if with_c else ()), check, refill, torch.equal)


def offs_case() -> Case:
    sizes = [0, 37, 200, 63]
    rows = sum(sizes)
    a, b, d = bf16(rows, K), bf16(G, N, K), torch.zeros(rows, N, device="cuda", dtype=BF16)
    offs = offsets(sizes)
    state = {"sizes": sizes}

    def fn(a, b, d, offs):
        return moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)

    def check(args: tuple) -> float:
        a, b, d, _ = args
        worst = 0.0
        for g, start, n_rows in segments(state["sizes"]):
            if n_rows:
                ref = a[start : start + n_rows].float() @ b[g].float().t()
                worst = max(worst, calc_diff(d[start : start + n_rows], ref))
        return worst

    def refill(args: tuple) -> None:
        state["sizes"] = [120, 0, 30, 150]  # the same rows, other groups
        args[0].copy_(bf16(rows, K))
        args[3].copy_(offsets(state["sizes"]))

    def same(x: torch.Tensor, y: torch.Tensor) -> bool:
        return torch.equal(x[: sum(state["sizes"])], y[: sum(state["sizes"])])

    return Case(fn, (a, b, d, offs), check, refill, same)


def indices_case() -> Case:
    state = {"sizes": [128, 256, 0, 128]}  # aligned segments, one empty group
    rows = sum(state["sizes"])

    def group_of_rows(sizes: list[int], used: list[int]) -> torch.Tensor:
        """Each group's segment, its first `used` rows real and the rest padding (-1)."""
        out = torch.full((rows,), -1, dtype=I32)
        for g, start, n_rows in segments(sizes):
            out[start : start + min(used[g], n_rows)] = g
        return out.cuda()

    used = [128, 200, 0, 5]
    state["m_indices"] = group_of_rows(state["sizes"], used)
    a, b = bf16(rows, K), bf16(G, N, K)
    d = torch.zeros(rows, N, device="cuda", dtype=BF16)

    def fn(a, b, d, m_indices):
        return moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)

    def real_rows() -> torch.Tensor:
        return (state["m_indices"] >= 0).nonzero().flatten()

    def check(args: tuple) -> float:
        a, b, d, m_indices = args
        rows_used = real_rows()
        ref = torch.einsum(
            "rk,rnk->rn", a[rows_used].float(), b[m_indices[rows_used].long()].float()
        )
        return calc_diff(d[rows_used], ref)

    def refill(args: tuple) -> None:
        state["sizes"] = [256, 0, 128, 128]
        state["m_indices"] = group_of_rows(state["sizes"], [250, 0, 128, 1])
        args[0].copy_(bf16(rows, K))
        args[3].copy_(state["m_indices"])

    def same(x: torch.Tensor, y: torch.Tensor) -> bool:
        return torch.equal(x[real_rows()], y[real_rows()])

    return Case(fn, (a, b, d, state["m_indices"].clone()), check, refill, same)


def masked_case() -> Case:
    max_m = 64
    state = {"masked": [64, 10, 0, 33]}
    a, b = bf16(G, max_m, K), bf16(G, N, K)
    d = torch.zeros(G, max_m, N, device="cuda", dtype=BF16)
    masked_m = torch.tensor(state["masked"], device="cuda", dtype=I32)

    def fn(a, b, d, masked_m):
        return moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 32)

    def check(args: tuple) -> float:
        a, b, d, _ = args
        worst = 0.0
        for g, used in enumerate(state["masked"]):
            if used:
                ref = a[g, :used].float() @ b[g].float().t()
                worst = max(worst, calc_diff(d[g, :used], ref))
        return worst

    def refill(args: tuple) -> None:
        state["masked"] = [5, 64, 20, 0]
        args[0].copy_(bf16(G, max_m, K))
        args[3].copy_(torch.tensor(state["masked"], dtype=I32))

    def same(x: torch.Tensor, y: torch.Tensor) -> bool:
        return all(torch.equal(x[g, :u], y[g, :u]) for g, u in enumerate(state["masked"]))

    return Case(fn, (a, b, d, masked_m), check, refill, same)


def k_grouped_case(with_c: bool) -> Case:
    tokens, m, n = 300, 256, 128
    state = {"sizes": [100, 0, 150, 50]}
    a, b = bf16(tokens, m), bf16(tokens, n)
    d = torch.zeros(G, m, n, device="cuda")
    c = torch.randn(G, m, n, device="cuda") if with_c else None
    offs = offsets(state["sizes"])

    def fn(a, b, d, offs, *c):
        return moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offs, *c)

    def check(args: tuple) -> float:
        a, b, d, _, *c = args
        worst = 0.0
        for g, start, rows in segments(state["sizes"]):
            ref = a[start : start + rows].float().t() @ b[start : start + rows].float()
            worst = max(worst, calc_diff(d[g], ref + (c[0][g] if c else 0)))
        return worst

    def refill(args: tuple) -> None:
        state["sizes"] = [0, 300, 0, 0]
        args[0].copy_(bf16(tokens, m))
        args[3].copy_(offsets(state["sizes"]))

    return Case(fn, (a, b, d, offs) + ((c,) if with_c else ()), check, refill, torch.equal)


CASES = {
    "dense": lambda: dense_case(with_c=False),
    "dense_c": lambda: dense_case(with_c=True),
    "offs": offs_case,
    "m_indices": indices_case,
    "masked": masked_case,
    "k_grouped": lambda: k_grouped_case(with_c=False),
    "k_grouped_c": lambda: k_grouped_case(with_c=True),
}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("name", list(CASES))
def test_fullgraph_compile_matches_eager_and_replays_in_a_cuda_graph(name: str) -> None:
    case = CASES[name]()
    eager_args = tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in case.args)
    assert case.fn(*eager_args) is eager_args[2]
    compiled = torch.compile(case.fn, fullgraph=True)
    out = compiled(*case.args)
    torch.cuda.synchronize()
    assert out.data_ptr() == case.args[2].data_ptr()  # written in place into the caller's d
    assert case.check(eager_args) < TOL
    assert case.check(case.args) < TOL
    assert case.same(case.args[2], eager_args[2])  # the same kernel: the same bits

    # Capture the compiled call (warm on a side stream first, as CUDA graphs require).
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            compiled(*case.args)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        compiled(*case.args)
    for _ in range(2):  # new data and new group sizes in the captured buffers, twice
        case.refill(case.args)
        case.args[2].zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert case.check(case.args) < TOL


@pytest.mark.parametrize("name", ["dense", "offs", "masked", "k_grouped_c"])
def test_opcheck(name: str) -> None:
    """torch.library's own checks on the real kernels: the op mutates exactly what its schema
    says, its fake implementation and AOT dispatch (dynamic shapes) agree with the real one."""
    case = CASES[name]()
    ops = {  # built lazily: each case has only its own arguments
        "dense": lambda: (torch.ops.moegemm.bf16_gemm_nt, case.args),
        "offs": lambda: (torch.ops.moegemm.m_grouped_bf16_gemm_nt_contiguous,
                         (*case.args[:3], None, case.args[3])),
        "masked": lambda: (torch.ops.moegemm.m_grouped_bf16_gemm_nt_masked, (*case.args, 32)),
        "k_grouped_c": lambda: (torch.ops.moegemm.k_grouped_bf16_gemm_tn_contiguous, case.args),
    }  # fmt: skip
    op, args = ops[name]()
    torch.library.opcheck(op, args)


def test_compiled_layer_around_a_grouped_gemm() -> None:
    """A compiled function doing torch work before and after the GEMM: still one graph."""
    case = offs_case()
    a, b, d, offs = case.args

    def layer(x: torch.Tensor) -> torch.Tensor:
        moegemm.m_grouped_bf16_gemm_nt_contiguous(x * 2, b, d, offs=offs)
        return torch.nn.functional.silu(d.float())

    explained = torch._dynamo.explain(layer)(a)
    assert explained.graph_break_count == 0
    out = torch.compile(layer, fullgraph=True)(a)
    d_ref = torch.zeros_like(d)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a * 2, b, d_ref, offs=offs)
    assert calc_diff(out, torch.nn.functional.silu(d_ref.float())) < TOL
