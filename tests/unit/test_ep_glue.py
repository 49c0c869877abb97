"""EPMoE's host side without a GPU: argument checks (before any device work), then on a CPU
"device" with every _C launcher replaced by a recorder that takes the pointer and integer
counts python/moegemm/_C.pyi declares (held to the extension by tests/unit/test_c_stub.py): the
forward's launch sequence (dispatch -> the masked expert GEMMs -> combine), which buffer each
launch reads and writes, the bound integers (the plan's region offsets, the grid fixed by the
plan, not by T), and that a forward allocates nothing and never reads back to the host."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import moegemm
from moegemm import _C
from moegemm.ep import EPMoE
from moegemm.heuristics import SM90
from moegemm.launch import checks, plans
from moegemm.quant import quantize_mxfp4

STUB = Path(moegemm.__file__).with_name("_C.pyi")
LAUNCHERS = ("EpDispatchLauncher", "EpCombineLauncher", "Bf16MoeGemmLauncher",
             "Sm90Fp8Fp4MoeGemmLauncher", "Sm90Fp8Fp4TableMoeGemmLauncher",
             "MoeQuantizeRowsLauncher")  # fmt: skip
E, K, H, I, TMAX = 8, 2, 256, 128, 6


def declared() -> dict[str, tuple[list[str], int]]:
    out = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name in LAUNCHERS:
            methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
            call = [a.arg for a in methods["__call__"].args.posonlyargs][1:]
            call = call or [a.arg for a in methods["__call__"].args.args][1:]
            bind = [a.arg for a in methods["bind"].args.posonlyargs + methods["bind"].args.args]
            out[node.name] = ([a for a in call if a.endswith("_ptr")], bind[2:])
    return out


@pytest.fixture
def launches(monkeypatch) -> list[tuple[str, dict[str, int], dict[str, int], int]]:
    log: list = []
    for name, (pointers, ints) in declared().items():

        def make(name=name, pointers=pointers, ints=ints):
            class Fake:
                bind_args = tuple(ints)

                def __init__(self, kernel, *shape, **kwargs) -> None:
                    self.ctas = shape[3]

                num_blocks = property(lambda self: self.ctas)

                def bind(self, device: int, *values: int):
                    assert len(values) == len(ints), (name, values)
                    bound = dict(zip(ints, values))

                    def launch(*args: int) -> bool:
                        assert len(args) == len(pointers) + 1, (name, args)
                        log.append((name, dict(zip(pointers, args)), bound, self.ctas))
                        return True

                    return launch

            return Fake

        monkeypatch.setattr(_C, name, make())
    for module in ("moegemm.launch.plans", "moegemm.moe.mxfp4", "moegemm.ep.layer"):
        monkeypatch.setattr(f"{module}.load_kernel", lambda spec: spec)
    for module in ("moegemm.launch.plans", "moegemm.moe.layer", "moegemm.moe.mxfp4",
                   "moegemm.ep.layer"):  # fmt: skip
        monkeypatch.setattr(f"{module}.arch_for_device", lambda device: SM90)
    monkeypatch.setattr(checks, "require_placement", lambda tma, others: 0)
    monkeypatch.setattr(plans, "raw_stream", lambda device: 0)
    moegemm.moe.layer._masked_plans.clear()
    return log


def weights(mxfp4: bool):
    if mxfp4:
        w13 = moegemm.prepare_moe_weights(quantize_mxfp4(torch.randn(E, 2 * I, H)))
        return w13, quantize_mxfp4(torch.randn(E, H, I))
    w13 = moegemm.prepare_moe_weights(torch.zeros(E, 2 * I, H, dtype=torch.bfloat16))
    return w13, torch.zeros(E, H, I, dtype=torch.bfloat16)


def inputs(t: int):
    x = torch.zeros(t, H, dtype=torch.bfloat16)
    return x, torch.zeros(t, K, dtype=torch.int32), torch.zeros(t, K)


def p(t: torch.Tensor) -> int:
    return t.data_ptr()


@pytest.mark.parametrize("mxfp4", [False, True])
def test_forward_launch_sequence(launches, mxfp4: bool) -> None:
    ep = EPMoE(None, E, K, H, I, "mxfp4" if mxfp4 else "bf16", TMAX, device="cpu")
    w13, w2 = weights(mxfp4)
    x, ids, w = inputs(5)
    out = ep.forward(x, ids, w, w13, w2)
    assert out.shape == (5, H) and out.data_ptr() == p(ep.out)
    names = [n for n, *_ in launches]
    gemm = "Sm90Fp8Fp4MoeGemmLauncher" if mxfp4 else "Bf16MoeGemmLauncher"
    gemm13 = "Sm90Fp8Fp4TableMoeGemmLauncher" if mxfp4 else gemm  # prepared w13: the table kernel
    middle = [gemm13, "MoeQuantizeRowsLauncher", gemm] if mxfp4 else [gemm, gemm]
    assert names == ["EpDispatchLauncher", *middle, "EpCombineLauncher"]
    (_, dp, di, dctas), *gemms, (_, cp, ci, cctas) = launches
    assert (dp["x_ptr"], dp["topk_ids_ptr"], dp["topk_weights_ptr"]) == (p(x), p(ids), p(w))
    assert (dp["peer_base_ptr"], dp["state_ptr"]) == (p(ep.peer_base), p(ep.state))
    assert (dp["masked_m_ptr"], dp["slot_dest_ptr"]) == (p(ep.masked_m), p(ep.slot_dest))
    offsets = {n: v for n, v in di.items() if n.startswith("off_")}
    assert offsets == ep.plan.offsets() == {n: v for n, v in ci.items() if n.startswith("off_")}
    assert (di["rank"], di["world_size"], di["num_tokens"], di["top_k"]) == (0, 1, 5, K)
    assert (di["max_m"], di["slots_per_rank"]) == (TMAX, TMAX * K)
    assert di["timeout_ns"] == 10 * 10**9 and dctas * di["slots_per_cta"] >= TMAX * K
    g1, g2 = gemms[0][1], gemms[-1][1]
    assert g1["a_ptr"] == p(ep.x_recv) and g1["group_info_ptr"] == p(ep.masked_m)
    assert g2["d_ptr"] == p(ep.y) and g2["row_scale_ptr"] == p(ep.recv_weight)
    assert g2["group_info_ptr"] == p(ep.masked_m)
    if mxfp4:
        assert g1["sfa_ptr"] == p(ep.sfa_recv) and g2["a_ptr"] == p(ep.h8)
        q, qi = gemms[1][1], gemms[1][2]  # the intermediate's rows inside masked_m only
        assert q["row_bound_ptr"] == p(ep.masked_m) and qi["group_rows"] == TMAX
    else:
        assert g1["d_ptr"] == g2["a_ptr"] == p(ep.h)
    assert (cp["y_ptr"], cp["out_ptr"], cp["slot_dest_ptr"]) == (p(ep.y), p(out), p(ep.slot_dest))
    assert (ci["num_tokens"], ci["hidden"], ci["ldo"], ci["max_m"]) == (5, H, H, TMAX)
    # Another T: new bound integers, the same grids (the arrive counts need equal grids).
    launches.clear()
    ep.forward(*inputs(1), w13, w2)
    assert launches[0][2]["num_tokens"] == 1 and launches[0][3] == dctas
    assert launches[-1][3] == cctas


def test_forward_allocates_nothing_and_never_syncs(launches, monkeypatch) -> None:
    ep = EPMoE(None, E, K, H, I, "bf16", TMAX, device="cpu")
    w13, w2 = weights(False)
    args = (*inputs(4), w13, w2)
    ep.forward(*args)  # builds the plans
    launches.clear()

    def refuse(*a, **k):
        raise AssertionError("allocation or host sync inside forward")

    for name in ("empty", "zeros", "full", "tensor", "empty_like", "zeros_like"):
        monkeypatch.setattr(torch, name, refuse)
    for name in ("item", "tolist", "cpu", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, refuse)
    monkeypatch.setattr(torch.cuda, "synchronize", refuse)
    ep.forward(*args)
    ep.forward(*args[:3], w13, w2, out=torch.Tensor.new_empty(args[0], (4, H)))
    assert [n for n, *_ in launches].count("EpDispatchLauncher") == 2


def test_t_zero_still_launches_dispatch_and_combine(launches) -> None:
    ep = EPMoE(None, E, K, H, I, "bf16", TMAX, device="cpu")
    w13, w2 = weights(False)
    out = ep.forward(*inputs(0), w13, w2)
    assert out.shape == (0, H)
    names = [n for n, *_ in launches]
    assert names[0] == "EpDispatchLauncher" and names[-1] == "EpCombineLauncher"
    assert launches[0][1]["x_ptr"] == 0, "an empty x's pointer is never passed"


@pytest.mark.parametrize("mxfp4", [False, True])
def test_warmup_builds_every_kernel_and_launches_nothing(launches, monkeypatch, mxfp4) -> None:
    """warmup() compiles what forward launches without launching; forwards at any T then build
    no GEMM plan (no rank compiles while its peers wait), and the GEMMs' expected_m comes from
    max_tokens_per_rank, which every rank shares, not from the local T."""
    from moegemm.launch import plans as plans_mod

    ep = EPMoE(None, E, K, H, I, "mxfp4" if mxfp4 else "bf16", TMAX, device="cpu")
    w13, w2 = weights(mxfp4)
    ep.warmup(w13, w2)
    assert launches == []
    built = []
    original = plans_mod.make_plan
    monkeypatch.setattr(
        plans_mod, "make_plan", lambda *a, **k: built.append(a) or original(*a, **k)
    )
    for t in (1, 3, TMAX):
        ep.forward(*inputs(t), w13, w2)
    assert built == [] or mxfp4, "BF16: the masked GEMM plan was built by warmup"
    assert len({plan.expected_m for plan in ep._plans.values()}) == 1


def test_dispatch_that_did_not_launch_stops_the_forward(launches, monkeypatch) -> None:
    ep = EPMoE(None, E, K, H, I, "bf16", TMAX, device="cpu")
    w13, w2 = weights(False)
    ep.forward(*inputs(2), w13, w2)
    plan = next(iter(ep._plans.values()))
    monkeypatch.setattr(plan, "dispatch", lambda *a: False)
    launches.clear()
    with pytest.raises(RuntimeError, match="CUDA context"):
        ep.forward(*inputs(2), w13, w2)
    assert launches == [], "no GEMM or combine after a dispatch that did not launch"


@pytest.mark.parametrize(
    "args, kwargs, error, words",
    [
        ((E, K, H, I, "bf16", 0), {}, ValueError, "max_tokens_per_rank must be >= 1"),
        ((E, K, H, I, "bf16", 2.0), {}, TypeError, "max_tokens_per_rank must be an int"),
        ((E, K, H, I, "fp16", 4), {}, ValueError, "weight_dtype must be one of"),
        ((E, K, H, I, 16, 4), {}, TypeError, "weight_dtype must be a str"),
        ((E, E + 1, H, I, "bf16", 4), {}, ValueError, "top_k 9 exceeds num_experts 8"),
        ((E, K, 100, I, "bf16", 4), {}, ValueError, "multiples of 8"),
        ((E, K, H, 80, "mxfp4", 4), {}, ValueError, "multiples of 32"),
        ((E, K, H, I, "bf16", 4), {"activation": "gelu"}, ValueError, "activation"),
        ((E, K, H, I, "bf16", 4), {"timeout_s": 0}, ValueError, "timeout_s"),
        ((E, K, H, I, "bf16", 4), {"timeout_s": "1"}, TypeError, "timeout_s"),
        ((E, K, H, I, "bf16", 4), {"max_m": -1}, ValueError, "max_m"),
        ((True, K, H, I, "bf16", 4), {}, TypeError, "num_experts must be an int"),
    ],
)
def test_constructor_refuses(args, kwargs, error, words) -> None:
    with pytest.raises(error, match=words):
        EPMoE(None, *args, device="cpu", **kwargs)


def test_group_must_be_a_process_group() -> None:
    with pytest.raises(TypeError, match="ProcessGroup"):
        EPMoE("world", E, K, H, I, "bf16", 4)


@pytest.mark.parametrize(
    "edit, error, words",
    [
        (lambda a: {**a, "x": torch.zeros(TMAX + 1, H, dtype=torch.bfloat16)}, ValueError,
         "exceed max_tokens_per_rank"),
        (lambda a: {**a, "x": torch.zeros(2, H)}, TypeError, "x"),
        (lambda a: {**a, "topk_ids": torch.zeros(2, K + 1, dtype=torch.int32)}, ValueError,
         "topk_ids"),
        (lambda a: {**a, "topk_weights": torch.zeros(2, K, dtype=torch.float64)}, TypeError,
         "topk_weights"),
        (lambda a: {**a, "w13_local": a["w2_local"]}, TypeError, "prepare_moe_weights"),
        (lambda a: {**a, "w13_local": moegemm.prepare_moe_weights(
            torch.zeros(E // 2, 2 * I, H, dtype=torch.bfloat16))}, ValueError, "owns 8"),
        (lambda a: {**a, "out": torch.zeros(3, H, dtype=torch.bfloat16)}, ValueError, "out"),
    ],
)  # fmt: skip
def test_forward_refuses(launches, edit, error, words) -> None:
    ep = EPMoE(None, E, K, H, I, "bf16", TMAX, device="cpu")
    w13, w2 = weights(False)
    x, ids, w = inputs(2)
    args = edit({"x": x, "topk_ids": ids, "topk_weights": w, "w13_local": w13, "w2_local": w2})
    with pytest.raises(error, match=words):
        ep.forward(**args)
    assert launches == []


@pytest.mark.parametrize("weight_dtype", ["bf16", "mxfp4"])
def test_nbytes_counts_every_buffer(launches, weight_dtype: str) -> None:
    ep = EPMoE(None, E, K, H, I, weight_dtype, TMAX, device="cpu")
    local = [ep.y, ep.h, ep.out, ep.masked_m, ep.slot_dest, ep.state, ep.peer_base]
    if weight_dtype == "mxfp4":
        local += [ep.h8, ep.sfa_h]
    held = ep.buffer.nbytes + sum(t.nbytes for t in local)
    assert ep.nbytes == held == ep.plan.nbytes + ep.plan.local_nbytes(I)


def test_check_reports_the_status_word(launches) -> None:
    ep = EPMoE(None, E, K, H, I, "bf16", TMAX, device="cpu", timeout_s=2.5)
    ep.check()
    ep.state[1] = (1 << 24) | (2 << 16) | 1
    with pytest.raises(RuntimeError, match="rank 1 never arrived in the dispatch within 2.5 s"):
        ep.check()
    assert "EPMoE(rank 0 of 1" in repr(ep)


def test_mxfp4_experts_prepared_for_another_gpu_are_refused(launches) -> None:
    """SM100-prepared experts on this (stub, SM90) device: a ValueError naming the call to make,
    before any launch, not a launcher bound with the other layout's integers."""
    from moegemm.api.mxfp4_weights import prepare_mxfp4_weights

    ep = EPMoE(None, E, K, H, I, "mxfp4", TMAX, device="cpu")
    w13 = moegemm.prepare_moe_weights(quantize_mxfp4(torch.randn(E, 2 * I, H)), arch="sm_100f")
    w2 = prepare_mxfp4_weights(*quantize_mxfp4(torch.randn(E, H, I)), arch="sm_100f")
    with pytest.raises(ValueError, match="prepared for sm_100f and the call runs on sm_90a"):
        ep.forward(*inputs(5), w13, w2)
    assert launches == []
