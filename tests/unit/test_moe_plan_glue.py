"""The fused layer's host glue without a GPU: the launchers are replaced by recorders that take
the integer and pointer counts the real `_C` classes declare (python/moegemm/_C.pyi, which
tests/unit/test_c_stub.py holds to the extension), so every plan is built and every launch issued
as on the device; the recorded launches are checked for order, counts and which buffer each
reads and writes (the workspace aliasing included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import moegemm
from moegemm import _C
from moegemm.heuristics import SM90
from moegemm.launch import checks, plans
from moegemm.quant import quantize_mxfp4

STUB = Path(moegemm.__file__).with_name("_C.pyi")
LAUNCHERS = ("Bf16MoeGemmLauncher", "Sm90Fp8Fp4MoeGemmLauncher",
             "Sm90Fp8Fp4TableMoeGemmLauncher", "MoeRouteGatherLauncher", "MoeQuantizeRowsLauncher",
             "MoeCombineLauncher")  # fmt: skip


def declared() -> dict[str, tuple[list[str], list[str]]]:
    """Per launcher: the pointer names of a launch and the names of its bound integers."""
    tree = ast.parse(STUB.read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in LAUNCHERS:
            methods = {m.name: m for m in node.body if isinstance(m, ast.FunctionDef)}
            call = [
                a.arg for a in methods["__call__"].args.posonlyargs + methods["__call__"].args.args
            ][1:]
            bind = [a.arg for a in methods["bind"].args.posonlyargs + methods["bind"].args.args][2:]
            out[node.name] = ([a for a in call if a.endswith("_ptr")], bind)
    return out


class Recorder:
    def __init__(self) -> None:
        self.launches: list[tuple[str, dict[str, int], tuple[int, ...]]] = []


def fake_launcher(name: str, spec: tuple[list[str], list[str]], log: Recorder):
    pointers, names = spec
    num_ints = len(names)

    class Fake:
        bind_args = tuple(names)

        def __init__(self, kernel, *shape, **kwargs) -> None:
            assert len(shape) in (8, 9)

        @property
        def num_blocks(self) -> int:
            return 1

        def bind(self, device: int, *ints: int):
            assert len(ints) == num_ints, (name, ints)

            def launch(*args: int) -> bool:
                assert len(args) == len(pointers) + 1, (name, args)  # + stream
                log.launches.append((name, dict(zip(pointers, args)), ints))
                return True

            return launch

    return Fake


@pytest.fixture
def recorder(monkeypatch):
    log = Recorder()
    for name, spec in declared().items():
        monkeypatch.setattr(_C, name, fake_launcher(name, spec, log))
    for module in ("moegemm.launch.plans", "moegemm.moe.launches", "moegemm.moe.mxfp4"):
        monkeypatch.setattr(f"{module}.load_kernel", lambda spec: spec)
    for module in ("moegemm.launch.plans", "moegemm.moe.launches", "moegemm.moe.layer",
                   "moegemm.moe.mxfp4"):  # fmt: skip
        monkeypatch.setattr(f"{module}.arch_for_device", lambda device: SM90)
    monkeypatch.setattr(checks, "require_placement", lambda tma, others: 0)
    monkeypatch.setattr(plans, "raw_stream", lambda device: 0)
    moegemm.moe.layer._plans.clear()
    moegemm.moe.layer._masked_plans.clear()
    return log


E, H, I, T, K = 8, 256, 128, 5, 2


def ptr(t: torch.Tensor) -> int:
    return t.data_ptr()


def test_bf16_layer_launches(recorder) -> None:
    w13 = moegemm.prepare_moe_weights(torch.zeros(E, 2 * I, H, dtype=torch.bfloat16))
    w2 = torch.zeros(E, H, I, dtype=torch.bfloat16)
    x = torch.zeros(T, H, dtype=torch.bfloat16)
    ids, w = torch.zeros(T, K, dtype=torch.int32), torch.zeros(T, K)
    ws = moegemm.MoEWorkspace(T, K, E, H, I, device="cpu")
    out = moegemm.fused_moe(x, w13, w2, w, ids, workspace=ws)
    names = [n for n, _, _ in recorder.launches]
    assert names == ["MoeRouteGatherLauncher", "Bf16MoeGemmLauncher",
                     "Bf16MoeGemmLauncher", "MoeCombineLauncher"]  # fmt: skip
    (_, route, rints), (_, g1, i1), (_, g2, i2), (_, comb, _) = recorder.launches
    assert route["x_ptr"] == ptr(x) and route["x_sorted_ptr"] == ptr(ws.x_sorted)
    assert route["sfa_sorted_ptr"] == 0 and rints[:4] == (T, K, E, H)
    assert (g1["a_ptr"], g1["b_ptr"], g1["d_ptr"]) == (ptr(ws.x_sorted), ptr(w13.weight), ptr(ws.h))
    assert g1["group_info_ptr"] == ptr(ws.offs) and g1["row_scale_ptr"] == 0
    assert i1 == (T * K, T * K, 2 * I, H, E, H, H, 2 * I * H, I, I)  # ldd, d_cols: SwiGLU halves
    assert (g2["a_ptr"], g2["b_ptr"], g2["d_ptr"]) == (ptr(ws.h), ptr(w2), ptr(ws.x_sorted))
    assert g2["row_scale_ptr"] == ptr(ws.row_weight)
    assert i2 == (T * K, T * K, H, I, E, I, I, H * I, H, H)
    assert comb == {"y_ptr": ptr(ws.x_sorted), "out_ptr": ptr(out),
                    "slot_row_ptr": ptr(ws.slot_row)}  # fmt: skip


def test_mxfp4_layer_launches(recorder) -> None:
    w13 = moegemm.prepare_moe_weights(quantize_mxfp4(torch.randn(E, 2 * I, H)),
                                      activation="swiglu_oai")  # fmt: skip
    w2 = quantize_mxfp4(torch.randn(E, H, I))
    bias2 = torch.zeros(E, H)
    x = torch.zeros(T, H, dtype=torch.bfloat16)
    ids, w = torch.zeros(T, K, dtype=torch.int32), torch.zeros(T, K)
    ws = moegemm.MoEWorkspace(T, K, E, H, I, weight_dtype="mxfp4", device="cpu")
    moegemm.fused_moe(x, w13, w2, w, ids, w2_bias=bias2, workspace=ws)
    names = [n for n, _, _ in recorder.launches]
    # w13 in the prepared layout (the default) takes the table kernel; w2, a checkpoint pair,
    # the checkpoint-layout kernel.
    assert names == ["MoeRouteGatherLauncher", "Sm90Fp8Fp4TableMoeGemmLauncher",
                     "MoeQuantizeRowsLauncher", "Sm90Fp8Fp4MoeGemmLauncher",
                     "MoeCombineLauncher"]  # fmt: skip
    (_, route, _), (_, g1, i1), (_, q, qi), (_, g2, i2), (_, comb, _) = recorder.launches
    assert route["sfa_sorted_ptr"] == ptr(ws.sfa_x)
    assert (g1["a_ptr"], g1["sfa_ptr"], g1["d_ptr"]) == (ptr(ws.x_sorted), ptr(ws.sfa_x), ptr(ws.h))
    assert (g1["b_ptr"], g1["sfb_ptr"]) == (ptr(w13.weight), ptr(w13.scales))
    # Prepared: code rows of Hp / 2 bytes (H = 256 = Hp), offsets words [E, 2 Hp/128, 2I].
    assert i1 == (T * K, T * K, 2 * I, H, E, H, H // 2, 2 * I * H // 2, I, 0, H // 128, 1, 0,
                  2 * (H // 128) * 2 * I * 4, 4 * 2 * I)  # fmt: skip
    assert (q["src_ptr"], q["dst_ptr"], q["scales_ptr"]) == (ptr(ws.h), ptr(ws.h8), ptr(ws.sfa_h))
    assert q["row_bound_ptr"] == ptr(ws.offs) + 4 * (E - 1) and qi == (T * K, I, I, 0)
    assert (g2["a_ptr"], g2["sfa_ptr"], g2["d_ptr"]) == (ptr(ws.h8), ptr(ws.sfa_h), ptr(ws.y))
    assert (g2["b_ptr"], g2["sfb_ptr"], g2["bias_ptr"]) == (ptr(w2[0]), ptr(w2[1]), ptr(bias2))
    assert g2["row_scale_ptr"] == ptr(ws.row_weight)
    assert i2[:9] == (T * K, T * K, H, I, E, I, I // 2, H * I // 2, H)
    assert comb["y_ptr"] == ptr(ws.y)


@pytest.mark.parametrize("mxfp4", [False, True])
def test_masked_launches(recorder, mxfp4: bool) -> None:
    max_m = 90
    if mxfp4:
        w13 = moegemm.prepare_moe_weights(quantize_mxfp4(torch.randn(E, 2 * I, H)))
        w2 = quantize_mxfp4(torch.randn(E, H, I))
    else:
        w13 = moegemm.prepare_moe_weights(torch.zeros(E, 2 * I, H, dtype=torch.bfloat16))
        w2 = torch.zeros(E, H, I, dtype=torch.bfloat16)
    x = torch.zeros(E, max_m, H, dtype=torch.bfloat16)
    masked = torch.zeros(E, dtype=torch.int32)
    out = moegemm.fused_moe_masked(x, masked, w13, w2, 16)
    names = [n for n, _, _ in recorder.launches]
    gemm = "Sm90Fp8Fp4MoeGemmLauncher" if mxfp4 else "Bf16MoeGemmLauncher"
    gemm13 = "Sm90Fp8Fp4TableMoeGemmLauncher" if mxfp4 else gemm  # prepared w13
    if mxfp4:
        assert names == ["MoeQuantizeRowsLauncher", gemm13, "MoeQuantizeRowsLauncher", gemm]
        # Both quantizations take masked_m as per-group counts: only the rows it holds.
        quants = [(p, i) for n, p, i in recorder.launches if n == "MoeQuantizeRowsLauncher"]
        assert [(p["row_bound_ptr"], i) for p, i in quants] == [
            (ptr(masked), (E * max_m, H, H, max_m)),
            (ptr(masked), (E * max_m, I, I, max_m)),
        ]
    else:
        assert names == [gemm, gemm]
    gemms = [(p, i) for n, p, i in recorder.launches if n in (gemm, gemm13)]
    for p, ints in gemms:
        assert p["group_info_ptr"] == ptr(masked) and ints[:2] == (E * max_m, max_m)
    assert gemms[1][0]["d_ptr"] == ptr(out)
