"""Host fast paths of the grouped GEMMs (no GPU needed).

Each grouped entry point first tries a few attribute reads that prove the common call legal and
launches its cached plan; anything else goes through the full checks. The fast path must accept
only what the full checks accept, and launch exactly as they would.

CPU tensors never take the fast path (their device index is -1), so the operands here are CPU
tensors wrapped in `FakeCuda`, which reports a CUDA device (or, with cuda=False, another
accelerator with the same index) to both paths; the current device, the stream getter and the
plan cache are stubbed, and plans record their launches instead of running a kernel."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import NamedTuple

import pytest
import torch

import moegemm
from moegemm.api import bf16_gemm as dense_api
from moegemm.api import k_grouped as kg
from moegemm.api import m_grouped as mg
from moegemm.api.checks import batched_row_stride, row_stride
from moegemm.api.plans import Plan

BF16, FP32, I32 = torch.bfloat16, torch.float32, torch.int32


class FakeCuda(torch.Tensor):
    """A CPU tensor that reports itself on cuda:<index> (cuda=False: on xpu:<index>)."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @property
    def is_cuda(self) -> bool:
        return self._fake_cuda

    @property
    def device(self) -> torch.device:
        return torch.device("cuda" if self._fake_cuda else "xpu", self._fake_index)

    def get_device(self) -> int:
        return self._fake_index


def gpu(t: torch.Tensor, index: int = 0, cuda: bool = True) -> torch.Tensor:
    t = t.as_subclass(FakeCuda)
    t._fake_index, t._fake_cuda = index, cuda
    return t


def strided(
    shape: tuple[int, ...], strides: tuple[int, ...], dtype: torch.dtype, offset: int = 0
) -> torch.Tensor:
    """A CPU view with exactly these strides and storage offset (in elements)."""
    span = sum((s - 1) * st for s, st in zip(shape, strides)) + 1 if all(shape) else 1
    return torch.zeros(offset + span, dtype=dtype).as_strided(shape, strides, offset)


def dense(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
    return gpu(torch.zeros(shape, dtype=dtype))


def index_vector(length: int, dtype: torch.dtype = I32, step: int = 1) -> torch.Tensor:
    return gpu(torch.zeros(length * step, dtype=dtype)[::step])


class Recorder:
    """Stands in for plans.get_plan: records the key, the description and the launch."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def get_plan(self, key: tuple, device: int, desc_fn: Callable, config=None) -> Plan:
        self.calls.append(("plan", key, device, desc_fn(), config))
        return Plan(config=None, launch=self.launch)

    def launch(self, *args: int) -> None:
        self.calls.append(("launch", args))


@pytest.fixture
def rec(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    recorder = Recorder()
    for mod in (mg, kg):
        monkeypatch.setattr(mod, "get_plan", recorder.get_plan)
        monkeypatch.setattr(mod, "plans", {})
        monkeypatch.setattr(mod, "_raw_stream", lambda index: 1000 + index)
    monkeypatch.setattr(dense_api, "_get_device", lambda: 0)  # the fast paths' device getter
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # what the full checks read
    return recorder


class Api(NamedTuple):
    fast: Callable  # the fast path's argument derivation: a tuple or None
    public: Callable  # the entry point (fast path, else full path)
    full: Callable  # the full path alone


CONTIGUOUS = Api(
    lambda a, b, d, mi, offs: mg._contiguous_fast_args(a, b, d, mi, offs),
    lambda a, b, d, mi, offs: moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, mi, offs=offs),
    lambda a, b, d, mi, offs: mg._checked_contiguous(a, b, d, mi, offs, None),
)
MASKED = Api(
    lambda a, b, d, mm, expected: mg._masked_fast_args(a, b, d, mm, expected),
    lambda a, b, d, mm, expected: moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, mm, expected),
    lambda a, b, d, mm, expected: mg._checked_masked(a, b, d, mm, expected, None),
)
K_GROUPED = Api(
    lambda a, b, d, offs, c: kg._fast_path_args(a, b, d, offs, c),
    lambda a, b, d, offs, c: moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offs, c),
    lambda a, b, d, offs, c: kg._checked_k_grouped(a, b, d, offs, c, None),
)
APIS = {"contiguous": CONTIGUOUS, "masked": MASKED, "k_grouped": K_GROUPED}


def outcome(rec: Recorder, fn: Callable, args: tuple):
    """What a call did: the plan lookups and launches it made, or the error it raised."""
    rec.calls.clear()
    try:
        fn(*args)
    except (TypeError, ValueError) as e:
        return type(e), str(e)
    return list(rec.calls)


# ---- valid common calls: the fast path takes them and launches as the full path does ----


def contiguous_valid() -> dict[str, tuple]:
    g, n, k = 4, 64, 128
    padded_a = gpu(torch.zeros(200, k + 8, dtype=BF16)[:, :k])
    padded_b = gpu(torch.zeros(g, n + 3, k + 16, dtype=BF16)[:, :n, :k])  # gaps between groups
    padded_d = gpu(torch.zeros(200, n + 8, dtype=FP32)[:, :n])
    one_group_b = gpu(strided((1, n, k), (1, k, 1), BF16))  # a lone group's stride is unused
    return {
        "m_indices": (dense(256, k), dense(g, n, k), dense(256, n), index_vector(256), None),
        "offs": (dense(200, k), dense(g, n, k), dense(200, n, dtype=FP32), None, index_vector(g)),
        "padded": (padded_a, padded_b, padded_d, None, index_vector(g)),
        "two_rows": (dense(2, k), dense(g, n, k), dense(2, n), None, index_vector(g)),
        "one_group": (dense(128, k), one_group_b, dense(128, n), index_vector(128), None),
    }


def masked_valid() -> dict[str, tuple]:
    g, m, n, k = 4, 64, 64, 128
    padded_a = gpu(torch.zeros(g, m, k + 8, dtype=BF16)[:, :, :k])  # collapsible, padded rows
    padded_b = gpu(torch.zeros(g, n + 1, k + 8, dtype=BF16)[:, :n, :k])
    padded_d = gpu(torch.zeros(g, m, n + 8, dtype=BF16)[:, :, :n])
    return {
        "plain": (dense(g, m, k), dense(g, n, k), dense(g, m, n), index_vector(g), 32),
        "clamped": (
            dense(g, m, k),
            dense(g, n, k),
            dense(g, m, n, dtype=FP32),
            index_vector(g),
            999,
        ),
        "padded": (padded_a, padded_b, padded_d, index_vector(g), m),
        "one_row": (
            gpu(strided((g, 1, k), (k, 7, 1), BF16)),  # a lone row's stride is unused
            dense(g, n, k),
            gpu(strided((g, 1, n), (n, 3, 1), FP32)),
            index_vector(g),
            1,
        ),
        "one_group": (
            gpu(strided((1, m, k), (5, k, 1), BF16)),  # a lone group's stride is unused
            gpu(strided((1, n, k), (0, k, 1), BF16)),
            gpu(strided((1, m, n), (9, n, 1), BF16)),
            index_vector(1),
            16,
        ),
    }


def k_grouped_valid() -> dict[str, tuple]:
    g, t, m, n = 4, 300, 64, 128
    d = dense(g, m, n, dtype=FP32)
    return {
        "plain": (dense(t, m), dense(t, n), dense(g, m, n, dtype=FP32), index_vector(g), None),
        "with_c": (dense(t, m), dense(t, n), d, index_vector(g), dense(g, m, n, dtype=FP32)),
        "c_is_d": (dense(t, m), dense(t, n), d, index_vector(g), d),
        "padded": (
            gpu(torch.zeros(t, m + 8, dtype=BF16)[:, :m]),
            gpu(torch.zeros(t, n + 24, dtype=BF16)[:, 8 : n + 8]),
            dense(g, m, n, dtype=FP32),
            index_vector(g),
            None,
        ),
        "one_group": (dense(2, m), dense(2, n), dense(1, m, n, dtype=FP32), index_vector(1), None),
    }


VALID = [
    (api, name, args)
    for api, cases in (
        ("contiguous", contiguous_valid()),
        ("masked", masked_valid()),
        ("k_grouped", k_grouped_valid()),
    )
    for name, args in cases.items()
]


@pytest.mark.parametrize("api,name,args", VALID, ids=[f"{a}-{n}" for a, n, _ in VALID])
def test_fast_path_launches_as_the_full_path(
    rec: Recorder, monkeypatch: pytest.MonkeyPatch, api: str, name: str, args: tuple
) -> None:
    fns = APIS[api]
    assert fns.fast(*args) is not None
    expected = outcome(rec, fns.full, args)
    assert [call[0] for call in expected] == ["plan", "launch"]
    monkeypatch.setattr(mg, "_checked_contiguous", None)  # the fast path must not need them
    monkeypatch.setattr(mg, "_checked_masked", None)
    monkeypatch.setattr(kg, "_checked_k_grouped", None)
    assert outcome(rec, fns.public, args) == expected


def test_fast_args_match_the_check_helpers(rec: Recorder) -> None:
    for a, b, d, mi, offs in contiguous_valid().values():
        info = mi if offs is None else offs
        kind = "m_grouped_contiguous" if offs is None else "m_grouped_offsets"
        ptrs = (a.data_ptr(), b.data_ptr(), d.data_ptr(), info.data_ptr())
        strides = (row_stride("a", a), *batched_row_stride("b", b, collapsible=False))
        shape = (a.shape[0], b.shape[1], a.shape[1], b.shape[0], d.dtype == FP32)
        want = (kind, 0, *shape, *strides, row_stride("d", d), *ptrs)
        assert mg._contiguous_fast_args(a, b, d, mi, offs) == want
    for a, b, d, mm, expected_m in masked_valid().values():
        g, max_m, k = a.shape
        lda, _ = batched_row_stride("a", a, collapsible=True)
        ldb, ldb_group = batched_row_stride("b", b, collapsible=False)
        ldd, _ = batched_row_stride("d", d, collapsible=True)
        head = (0, g, max_m, b.shape[1], k, min(expected_m, max_m), d.dtype == FP32)
        ptrs = (a.data_ptr(), b.data_ptr(), d.data_ptr(), mm.data_ptr())
        assert mg._masked_fast_args(a, b, d, mm, expected_m) == (
            *head,
            lda,
            ldb,
            ldb_group,
            ldd,
            *ptrs,
        )
    for a, b, d, offs, c in k_grouped_valid().values():
        c_ptr = 0 if c is None else c.data_ptr()
        ptrs = (a.data_ptr(), b.data_ptr(), d.data_ptr(), c_ptr, offs.data_ptr())
        head = (0, a.shape[1], b.shape[1], a.shape[0], d.shape[0])
        strides = (row_stride("a", a), row_stride("b", b))
        assert kg._fast_path_args(a, b, d, offs, c) == (*head, *strides, *ptrs)


def test_cached_plan_is_launched_without_a_lookup(rec: Recorder) -> None:
    a, b, d, mi, offs = contiguous_valid()["m_indices"]
    key = ("m_grouped_contiguous", 0, 256, 64, 128, 4, False)
    mg.plans[key] = Plan(config=None, launch=rec.launch)
    assert outcome(rec, CONTIGUOUS.public, (a, b, d, mi, offs))[0][0] == "launch"
    a, b, d, mm, expected_m = masked_valid()["clamped"]
    mg.plans[("m_grouped_masked", 0, 64, 64, 128, 4, 64, True)] = Plan(None, rec.launch)
    assert outcome(rec, MASKED.public, (a, b, d, mm, expected_m))[0][0] == "launch"
    a, b, d, offs, c = k_grouped_valid()["c_is_d"]
    kg.plans[("k_grouped", 0, 64, 128, 300, 4, True)] = Plan(None, rec.launch)
    assert outcome(rec, K_GROUPED.public, (a, b, d, offs, c))[0][0] == "launch"


def test_forced_config_takes_the_full_path(rec: Recorder) -> None:
    forced = object()
    a, b, d, mi, _ = contiguous_valid()["m_indices"]
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, mi, config=forced)
    a, b, d, mm, expected_m = masked_valid()["plain"]
    moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, mm, expected_m, config=forced)
    a, b, d, offs, c = k_grouped_valid()["plain"]
    moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offs, c, config=forced)
    assert [call[-1] for call in rec.calls if call[0] == "plan"] == [forced] * 3


# ---- anything else: the fast path declines, the full path decides ----

RAISES, ACCEPTS = "raises", "accepts"


def contiguous_declined() -> dict[str, tuple[str, tuple]]:
    g, n, k = 4, 64, 128

    def offs_call(a=None, b=None, d=None, offs=None, rows=200):
        a = dense(rows, k) if a is None else a
        b = dense(g, n, k) if b is None else b
        d = dense(rows, n) if d is None else d
        return (a, b, d, None, index_vector(g) if offs is None else offs)

    def indices_call(rows=256, mi=None):
        mi = index_vector(rows) if mi is None else mi
        return (dense(rows, k), dense(g, n, k), dense(rows, n), mi, None)

    base = offs_call()
    return {
        "a_fp32": (RAISES, offs_call(a=dense(200, k, dtype=FP32))),
        "b_fp16": (RAISES, offs_call(b=dense(g, n, k, dtype=torch.float16))),
        "d_fp16": (RAISES, offs_call(d=dense(200, n, dtype=torch.float16))),
        "a_list": (RAISES, ([[0.0] * k] * 200, *base[1:])),
        "a_3d": (RAISES, offs_call(a=dense(1, 200, k))),
        "b_2d": (RAISES, offs_call(b=dense(n, k))),
        "b_wrong_k": (RAISES, offs_call(b=dense(g, n, k - 8))),
        "d_wrong_rows": (RAISES, offs_call(d=dense(199, n))),
        "k_zero": (RAISES, (dense(200, 0), dense(g, n, 0), dense(200, n), None, index_vector(g))),
        "n_not_8": (RAISES, (dense(200, k), dense(g, 60, k), dense(200, 60), None, index_vector(g))),
        "k_not_8": (RAISES, (dense(200, 12), dense(g, n, 12), dense(200, n), None, index_vector(g))),
        "both_layouts": (RAISES, (*base[:3], index_vector(200), index_vector(g))),
        "no_layout": (RAISES, (*base[:3], None, None)),
        "offs_int64": (RAISES, offs_call(offs=index_vector(g, torch.int64))),
        "offs_short": (RAISES, offs_call(offs=index_vector(g - 1))),
        "offs_2d": (RAISES, offs_call(offs=gpu(torch.zeros(1, g, dtype=I32)))),
        "offs_strided": (RAISES, offs_call(offs=index_vector(g, step=2))),
        "m_indices_rows_not_128": (RAISES, indices_call(rows=192)),
        "m_indices_strided": (RAISES, indices_call(mi=index_vector(256, step=2))),
        "m_indices_length": (RAISES, indices_call(mi=index_vector(128))),
        "a_col_major": (RAISES, offs_call(a=gpu(torch.zeros(k, 200, dtype=BF16).t()))),
        "a_row_stride": (RAISES, offs_call(a=gpu(torch.zeros(200, k + 4, dtype=BF16)[:, :k]))),
        "a_base": (RAISES, offs_call(a=gpu(torch.zeros(200, k + 8, dtype=BF16)[:, 4 : k + 4]))),
        "d_overlap": (RAISES, offs_call(d=gpu(strided((200, n), (n - 8, 1), BF16)))),
        "b_broadcast": (RAISES, offs_call(b=gpu(torch.zeros(n, k, dtype=BF16).expand(g, n, k)))),
        "b_batch_stride": (RAISES, offs_call(b=gpu(strided((g, n, k), (n * k + 4, k, 1), BF16)))),
        "b_base": (RAISES, offs_call(b=gpu(strided((g, n, k), (n * k, k, 1), BF16, 4)))),
        # valid, but not the common call
        "no_rows": (ACCEPTS, offs_call(rows=0)),
        "one_row": (ACCEPTS, offs_call(rows=1)),
        "no_groups": (ACCEPTS, (dense(200, k), dense(0, n, k), dense(200, n), None,
                                index_vector(0))),
        "n_zero": (ACCEPTS, (dense(200, k), dense(g, 0, k), dense(200, 0), None, index_vector(g))),
        "one_group_offs_stride": (ACCEPTS, (dense(200, k), dense(1, n, k), dense(200, n), None,
                                            index_vector(1, step=3))),
        "d_fp32_row_stride_4": (ACCEPTS, offs_call(d=gpu(torch.zeros(200, n + 4,
                                                                      dtype=FP32)[:, :n]))),
    }  # fmt: skip


def masked_declined() -> dict[str, tuple[str, tuple]]:
    g, m, n, k = 4, 64, 64, 128

    def call(a=None, b=None, d=None, mm=None, expected_m=32):
        a = dense(g, m, k) if a is None else a
        b = dense(g, n, k) if b is None else b
        d = dense(g, m, n) if d is None else d
        return (a, b, d, index_vector(g) if mm is None else mm, expected_m)

    return {
        "expected_bool": (RAISES, call(expected_m=True)),
        "expected_zero": (RAISES, call(expected_m=0)),
        "expected_negative": (RAISES, call(expected_m=-3)),
        "expected_float": (RAISES, call(expected_m=32.0)),
        "expected_str": (RAISES, call(expected_m="32")),
        "a_fp32": (RAISES, call(a=dense(g, m, k, dtype=FP32))),
        "d_int32": (RAISES, call(d=dense(g, m, n, dtype=I32))),
        "a_2d": (RAISES, call(a=dense(g * m, k))),
        "b_groups": (RAISES, call(b=dense(g + 1, n, k))),
        "d_rows": (RAISES, call(d=dense(g, m + 1, n))),
        "k_zero": (RAISES, (dense(g, m, 0), dense(g, n, 0), dense(g, m, n), index_vector(g), 8)),
        "n_not_8": (RAISES, (dense(g, m, k), dense(g, 20, k), dense(g, m, 20), index_vector(g),
                             8)),
        "masked_int64": (RAISES, call(mm=index_vector(g, torch.int64))),
        "masked_length": (RAISES, call(mm=index_vector(g + 1))),
        "masked_strided": (RAISES, call(mm=index_vector(g, step=2))),
        "a_not_collapsible": (RAISES, call(a=gpu(torch.zeros(g, m + 8, k, dtype=BF16)[:, :m]))),
        "d_not_collapsible": (RAISES, call(d=gpu(torch.zeros(g, m + 8, n, dtype=BF16)[:, :m]))),
        "b_broadcast": (RAISES, call(b=gpu(torch.zeros(n, k, dtype=BF16).expand(g, n, k)))),
        "b_row_stride": (RAISES, call(b=gpu(torch.zeros(g, n, k + 4, dtype=BF16)[:, :, :k]))),
        "a_base": (RAISES, call(a=gpu(strided((g, m, k), (m * k, k, 1), BF16, 4)))),
        "d_col_major": (RAISES, call(d=gpu(torch.zeros(g, n, m, dtype=BF16).transpose(1, 2)))),
        # valid, but not the common call
        "no_groups": (ACCEPTS, (dense(0, m, k), dense(0, n, k), dense(0, m, n), index_vector(0),
                                8)),
        "no_rows": (ACCEPTS, (dense(g, 0, k), dense(g, n, k), dense(g, 0, n), index_vector(g),
                              8)),
        "expected_int_subclass": (ACCEPTS, call(expected_m=_Int(32))),
        "one_group_masked_stride": (ACCEPTS, (dense(1, m, k), dense(1, n, k), dense(1, m, n),
                                              index_vector(1, step=2), 8)),
    }  # fmt: skip


class _Int(int):
    pass


def k_grouped_declined() -> dict[str, tuple[str, tuple]]:
    g, t, m, n = 4, 300, 64, 128

    def call(a=None, b=None, d=None, offs=None, c=None):
        a = dense(t, m) if a is None else a
        b = dense(t, n) if b is None else b
        d = dense(g, m, n, dtype=FP32) if d is None else d
        return (a, b, d, index_vector(g) if offs is None else offs, c)

    return {
        "a_fp32": (RAISES, call(a=dense(t, m, dtype=FP32))),
        "d_bf16": (RAISES, call(d=dense(g, m, n))),
        "c_bf16": (RAISES, call(c=dense(g, m, n))),
        "c_shape": (RAISES, call(c=dense(g, m, n - 8, dtype=FP32))),
        "c_2d": (RAISES, call(c=dense(g * m, n, dtype=FP32))),
        "c_list": (RAISES, call(c=[0.0])),
        "c_not_contiguous": (RAISES, call(c=gpu(torch.zeros(g, m, n + 8, dtype=FP32)[..., :n]))),
        "c_base": (RAISES, call(c=gpu(strided((g, m, n), (m * n, n, 1), FP32, 1)))),
        "d_not_contiguous": (RAISES, call(d=gpu(torch.zeros(g, n, m, dtype=FP32).transpose(1,
                                                                                       2)))),
        "d_base": (RAISES, call(d=gpu(strided((g, m, n), (m * n, n, 1), FP32, 2)))),
        "b_tokens": (RAISES, call(b=dense(t + 1, n))),
        "m_not_8": (RAISES, (dense(t, 12), dense(t, n), dense(g, 12, n, dtype=FP32),
                             index_vector(g), None)),
        "n_not_8": (RAISES, (dense(t, m), dense(t, 4), dense(g, m, 4, dtype=FP32),
                             index_vector(g), None)),
        "offs_int64": (RAISES, call(offs=index_vector(g, torch.int64))),
        "offs_length": (RAISES, call(offs=index_vector(g + 1))),
        "offs_strided": (RAISES, call(offs=index_vector(g, step=2))),
        "a_row_stride": (RAISES, call(a=gpu(torch.zeros(t, m + 4, dtype=BF16)[:, :m]))),
        "b_col_major": (RAISES, call(b=gpu(torch.zeros(n, t, dtype=BF16).t()))),
        # valid, but not the common call
        "no_tokens": (ACCEPTS, call(a=dense(0, m), b=dense(0, n), c=dense(g, m, n, dtype=FP32))),
        "one_token": (ACCEPTS, call(a=dense(1, m), b=dense(1, n))),
        "no_groups": (ACCEPTS, (dense(t, m), dense(t, n), dense(0, m, n, dtype=FP32),
                                index_vector(0), None)),
        "m_zero": (ACCEPTS, (dense(t, 0), dense(t, n), dense(g, 0, n, dtype=FP32),
                             index_vector(g), None)),
    }  # fmt: skip


DECLINED = [
    (api, name, verdict, args)
    for api, cases in (
        ("contiguous", contiguous_declined()),
        ("masked", masked_declined()),
        ("k_grouped", k_grouped_declined()),
    )
    for name, (verdict, args) in cases.items()
]


@pytest.mark.parametrize(
    "api,name,verdict,args", DECLINED, ids=[f"{a}-{n}" for a, n, _, _ in DECLINED]
)
def test_fast_path_declines_the_rest(
    rec: Recorder, api: str, name: str, verdict: str, args: tuple
) -> None:
    fns = APIS[api]
    assert fns.fast(*args) is None
    full = outcome(rec, fns.full, args)
    if verdict == RAISES:
        assert isinstance(full, tuple), f"the full checks accepted {name}"
    else:
        assert isinstance(full, list), f"the full checks refused {name}: {full}"
    assert outcome(rec, fns.public, args) == full


def with_device(args: tuple, position: int, **fake) -> tuple:
    """args with the tensor at `position` re-wrapped on another (fake) device."""
    t = args[position]
    plain = t.as_subclass(torch.Tensor)
    moved = plain if fake.get("cpu") else gpu(plain, fake.get("index", 0), fake.get("cuda", True))
    return (*args[:position], moved, *args[position + 1 :])


DEVICE_CASES = [
    ("contiguous", contiguous_valid()["m_indices"], (0, 1, 2, 3)),
    ("contiguous", contiguous_valid()["offs"], (0, 1, 2, 4)),
    ("masked", masked_valid()["plain"], (0, 1, 2, 3)),
    ("k_grouped", k_grouped_valid()["with_c"], (0, 1, 2, 3, 4)),
]


@pytest.mark.parametrize("fake", [{"cpu": True}, {"index": 1}, {"cuda": False}])
@pytest.mark.parametrize("api,args,positions", DEVICE_CASES)
def test_fast_path_declines_other_devices(
    rec: Recorder, api: str, args: tuple, positions: tuple, fake: dict
) -> None:
    fns = APIS[api]
    for position in positions:
        moved = with_device(args, position, **fake)
        assert fns.fast(*moved) is None
        full = outcome(rec, fns.full, moved)
        assert full[0] is ValueError and "cuda" in full[1].lower()
        assert outcome(rec, fns.public, moved) == full


@pytest.mark.parametrize("api,args,positions", DEVICE_CASES)
def test_fast_path_declines_when_not_on_the_current_device(
    rec: Recorder, monkeypatch: pytest.MonkeyPatch, api: str, args: tuple, positions: tuple
) -> None:
    monkeypatch.setattr(dense_api, "_get_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    fns = APIS[api]
    assert fns.fast(*args) is None
    full = outcome(rec, fns.full, args)
    assert full[0] is ValueError and "current CUDA device is cuda:1" in full[1]
    assert outcome(rec, fns.public, args) == full


def test_real_cpu_tensors_never_take_the_fast_path() -> None:
    k, n, g = 128, 64, 4
    a, b = torch.zeros(256, k, dtype=BF16), torch.zeros(g, n, k, dtype=BF16)
    d = torch.zeros(256, n, dtype=BF16)
    assert mg._contiguous_fast_args(a, b, d, torch.zeros(256, dtype=I32), None) is None
    with pytest.raises(ValueError, match="a must be on a CUDA device"):
        moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=torch.zeros(g, dtype=I32))


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_operands_without_sizes_are_left_to_the_full_path(rec: Recorder) -> None:
    nested = gpu(torch.nested.nested_tensor([torch.zeros(8, 16), torch.zeros(8, 16)]).to(BF16))
    c_nested = gpu(torch.nested.nested_tensor([torch.zeros(16, 8), torch.zeros(16, 8)]))
    with pytest.raises(RuntimeError):
        nested.shape  # noqa: B018
    b, d, offs = dense(2, 8, 16), dense(4, 8), index_vector(2)
    assert mg._contiguous_fast_args(dense(4, 16), nested, d, None, offs) is None
    assert mg._masked_fast_args(nested, b, dense(2, 8, 8), index_vector(2), 4) is None
    args = (dense(4, 16), dense(4, 8), dense(2, 16, 8, dtype=FP32), index_vector(2), None)
    assert kg._fast_path_args(*args) is not None
    assert kg._fast_path_args(*args[:4], c_nested) is None


# ---- randomized: whatever the fast path accepts, the full path accepts identically ----
#
# Each knob (size, dtype, stride, base offset, device, ...) usually takes a common value and now
# and then an odd one, so most calls are valid or miss by one rule; lone rows and lone groups,
# whose strides the checks ignore, get arbitrary strides.


def pick(rng: random.Random, common: tuple, odd: tuple, p_odd: float = 0.06):
    return rng.choice(odd if rng.random() < p_odd else common)


def random_2d(rng: random.Random, rows: int, cols: int, dtypes: tuple, bad: tuple):
    dtype = pick(rng, dtypes, bad, 0.04)
    inner = pick(rng, (1,), (2, 0), 0.04)
    ld = max(0, cols * inner + pick(rng, (0, 0, 8, 16), (4, -8, -cols)))
    if rows == 1 and rng.random() < 0.5:
        ld = rng.choice((0, 1, 3, 8))
    offset = pick(rng, (0, 0, 8, 16), (2, 4), 0.04)
    return strided((rows, cols), (ld, inner), dtype, offset)


def random_3d(
    rng: random.Random, batch: int, rows: int, cols: int, dtypes: tuple, bad: tuple, gaps=(0, 8)
):
    dtype = pick(rng, dtypes, bad, 0.04)
    inner = pick(rng, (1,), (2, 0), 0.04)
    ld = max(0, cols * inner + pick(rng, (0, 0, 8, 16), (4, -8, -cols)))
    if rows == 1 and rng.random() < 0.5:
        ld = rng.choice((0, 1, 3, 8))
    ld_batch = max(0, rows * ld + pick(rng, gaps, (4, 8, -ld, -rows * ld)))
    if batch == 1 and rng.random() < 0.5:
        ld_batch = rng.choice((0, 1, 3, 8))
    offset = pick(rng, (0, 0, 8, 16), (2, 4), 0.04)
    return strided((batch, rows, cols), (ld_batch, ld, inner), dtype, offset)


def random_index(rng: random.Random, length: int) -> torch.Tensor:
    length = max(0, length + pick(rng, (0,), (-1, 1), 0.04))
    step = pick(rng, (1,), (2, 0), 0.04)
    t = strided((length,), (step,), pick(rng, (I32,), (torch.int64, torch.int16), 0.04))
    return t.unsqueeze(0) if rng.random() < 0.02 else t


def random_device(rng: random.Random, t: torch.Tensor) -> torch.Tensor:
    r = rng.random()
    if r < 0.01:
        return t  # a real CPU tensor
    if r < 0.02:
        return gpu(t, index=1)
    if r < 0.03:
        return gpu(t, cuda=False)
    return gpu(t)


def near(rng: random.Random, value: int) -> int:
    """Usually value; now and then a slightly wrong one."""
    return value if rng.random() < 0.97 else max(0, value + rng.choice((-8, -1, 1, 8)))


def sizes(rng: random.Random) -> tuple[int, int, int]:
    """(groups, n, k)-like sizes: mostly legal, sometimes empty or not multiples of 8."""
    groups = pick(rng, (1, 2, 3, 5), (0,), 0.05)
    return groups, pick(rng, (8, 16, 24, 32), (0, 4, 12)), pick(rng, (8, 16, 24, 32), (0, 4, 12))


def random_contiguous(rng: random.Random) -> tuple:
    g, n, k = sizes(rng)
    layout = pick(rng, ("m_indices", "offs"), ("both", "none"), 0.03)
    if layout == "m_indices":
        rows = pick(rng, (128, 256), (0, 64, 192))
    else:
        rows = pick(rng, (2, 3, 17, 64, 128), (0, 1))
    a = random_2d(rng, rows, k, (BF16,), (FP32, torch.float16))
    b = random_3d(rng, g, near(rng, n), near(rng, k), (BF16,), (FP32,))
    d = random_2d(rng, near(rng, rows), n, (BF16, FP32), (torch.float16, I32))
    mi = random_index(rng, rows) if layout in ("m_indices", "both") else None
    offs = random_index(rng, g) if layout in ("offs", "both") else None
    return tuple(None if t is None else random_device(rng, t) for t in (a, b, d, mi, offs))


def random_masked(rng: random.Random) -> tuple:
    g, n, k = sizes(rng)
    max_m = pick(rng, (1, 2, 5, 16), (0,), 0.05)
    a = random_3d(rng, g, max_m, k, (BF16,), (FP32,), gaps=(0,))  # collapsible, mostly
    b = random_3d(rng, near(rng, g), near(rng, n), near(rng, k), (BF16,), (FP32,))
    d = random_3d(rng, g, near(rng, max_m), n, (BF16, FP32), (I32, torch.float16), gaps=(0,))
    tensors = tuple(random_device(rng, t) for t in (a, b, d, random_index(rng, g)))
    expected_m = pick(rng, (1, 3, 8, 16, 100), (0, -1, True, 2.0, _Int(4), "4"), 0.1)
    return (*tensors, expected_m)


def random_packed(rng: random.Random, shape: tuple[int, int, int]) -> torch.Tensor:
    """Mostly a contiguous fp32 tensor (a lone group with any stride); now and then padded rows,
    a misaligned base or the wrong dtype."""
    g, m, n = shape
    ld = n + pick(rng, (0,), (4, 8))
    ld_batch = m * ld if g > 1 or rng.random() < 0.5 else rng.choice((0, 1, 8))
    offset = pick(rng, (0, 4, 8), (1, 2))
    return strided(shape, (ld_batch, ld, 1), pick(rng, (FP32,), (BF16,), 0.04), offset)


def random_k_grouped(rng: random.Random) -> tuple:
    g, m, n = sizes(rng)
    t = pick(rng, (2, 3, 40), (0, 1), 0.1)
    a = random_2d(rng, t, m, (BF16,), (FP32,))
    b = random_2d(rng, near(rng, t), n, (BF16,), (FP32,))
    d = random_packed(rng, (g, near(rng, m), near(rng, n)))
    c = None
    if rng.random() < 0.5:
        c = d if rng.random() < 0.3 else random_packed(rng, (g, near(rng, m), n))
    tensors = tuple(random_device(rng, x) for x in (a, b, d, random_index(rng, g)))
    return (*tensors, None if c is None else tensors[2] if c is d else random_device(rng, c))


@pytest.mark.parametrize(
    "api,generate",
    [("contiguous", random_contiguous), ("masked", random_masked), ("k_grouped", random_k_grouped)],
)
def test_random_calls_agree(rec: Recorder, api: str, generate: Callable) -> None:
    fns = APIS[api]
    rng = random.Random(f"fast-path-{api}")
    trials, taken, launched = 3000, 0, 0
    for _ in range(trials):
        args = generate(rng)
        fast = fns.fast(*args)
        full = outcome(rec, fns.full, args)
        if fast is not None:
            taken += 1
            assert isinstance(full, list) and full and full[-1][0] == "launch", (args, full)
        launched += isinstance(full, list) and bool(full)
        assert outcome(rec, fns.public, args) == full, args
    # Both sides must be exercised: many fast calls, many that the full path has to decide.
    assert trials // 10 < taken < trials * 9 // 10, (taken, launched)
    assert taken > launched // 2, (taken, launched)
