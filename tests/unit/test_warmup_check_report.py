"""The warmup GPU check's decisions on a CPU: which torch peer each layout is timed against and
what the table says about it, and when the check fails (its outputs only: a calc_diff over its
bound or a raise, each said in one line; times and ratios never fail it)."""

from __future__ import annotations

import io
import math

import pytest
import torch

from moegemm.warmup import check, check_common
from moegemm.warmup.check_common import Peer, Report, Result, failure, pick_peer


def _refuses(*args, **kwargs):
    raise RuntimeError("this torch refuses it")


def test_pick_peer_takes_the_first_this_torch_accepts() -> None:
    a, b = Peer("a", _refuses), Peer("b", lambda: None)
    assert pick_peer(a, b) is b
    assert pick_peer(a) is None
    assert check_common.peer_us(None) != check_common.peer_us(None)  # NaN: no peer, no time


def _k_grouped_peer(monkeypatch: pytest.MonkeyPatch, grouped_fp32: bool, mm_fp32: bool) -> Peer:
    def grouped_mm(a, b, *, offs, out_dtype=None):
        if out_dtype is not None and not grouped_fp32:
            raise TypeError("_grouped_mm() got an unexpected keyword argument 'out_dtype'")

    def mm(a, b, *, out_dtype=None):
        if not mm_fp32:
            raise NotImplementedError("aten::mm.dtype")

    monkeypatch.setattr(torch, "_grouped_mm", grouped_mm, raising=False)
    monkeypatch.setattr(torch, "mm", mm)
    dy_t, x = torch.zeros(8, 12, dtype=torch.bfloat16), torch.zeros(12, 16, dtype=torch.bfloat16)
    offs = torch.tensor([5, 12], dtype=torch.int32)
    return pick_peer(*check.k_grouped_peers(dy_t, x, offs, [(0, 5), (5, 12)]))


def test_k_grouped_is_timed_against_an_fp32_output_peer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel writes FP32 (the weight gradient): an FP32-output grouped GEMM first, then
    FP32-output mm per group; only where neither exists the BF16-output call, labeled."""
    peer = _k_grouped_peer(monkeypatch, grouped_fp32=True, mm_fp32=True)
    assert peer.same_output and check_common.peer_label(peer) == "torch._grouped_mm FP32 out"
    peer = _k_grouped_peer(monkeypatch, grouped_fp32=False, mm_fp32=True)
    assert peer.same_output and check_common.peer_label(peer) == "torch.mm per group FP32 out"
    peer = _k_grouped_peer(monkeypatch, grouped_fp32=False, mm_fp32=False)
    assert not peer.same_output
    assert check_common.peer_label(peer) == (
        "torch._grouped_mm [differs: BF16 out, the kernel FP32]"
    )


def test_m_grouped_peers_say_when_the_kernel_holds_padding_rows() -> None:
    a, bt, offs = torch.zeros(4, 8), torch.zeros(2, 8, 8), torch.zeros(2, dtype=torch.int32)
    assert check.packed_peer(a, bt, offs, False).name == "torch._grouped_mm"
    padded = check.packed_peer(a, bt, offs, True)
    assert padded.same_output and padded.name == "torch._grouped_mm on the packed rows"
    assert check_common.peer_label(None).startswith("none")


@pytest.mark.parametrize(
    ("result", "why"),
    [
        (Result("offs", "linear1 n=4096 k=7168 G=256", 64, 3e-6), None),
        (Result("masked", "l", 64, 2e-3), "masked l tokens=64: calc_diff 2.000e-03 not below the bound 1e-05"),
        (Result("masked", "l", 1, math.nan), "masked l tokens=1: calc_diff nan not below the bound 1e-05"),
        (Result("k-grouped", "l", 4096, math.inf), "k-grouped l tokens=4096: calc_diff inf not below the bound 1e-05"),
        (Result("dense", "l", 8, error="OutOfMemoryError: CUDA out of memory"), "dense l tokens=8: raised OutOfMemoryError: CUDA out of memory"),
    ],
)  # fmt: skip
def test_failure_names_the_call_and_the_reason(result: Result, why: str | None) -> None:
    assert failure(result, 1e-5) == why


def test_timing_never_fails_the_check() -> None:
    """Any time, ratio or missing peer passes when the output does; a different-output peer's
    ratio stays out of the geomean."""
    out = io.StringIO()
    rep = Report(out)
    bf16_out = Peer("torch._grouped_mm", lambda: None, False, "BF16 out, the kernel FP32")
    rep.row("offs", "l", 1, 8, 1e-6, 10.0, 5.0, Peer("torch._grouped_mm", lambda: None))
    rep.row("m_indices", "l", 1, 8, 1e-6, 10.0, math.nan, None)  # no peer
    rep.row("masked", "l", 1, 8, 1e-6, 0.0, 5.0, None)  # a zero time: no ratio
    rep.row("masked", "l", 1, 8, 1e-6, math.nan, 5.0, None)  # timing raised
    rep.row("k-grouped", "l", 1, 8, 1e-6, 100.0, 1.0, bf16_out)  # 0.01 x: slow, still passes
    assert rep.ok and rep.failures == [] and rep.ratios == [0.5]
    assert "[differs: BF16 out, the kernel FP32]" in out.getvalue()
    assert check._summary(rep)
    assert out.getvalue().splitlines()[-1] == (
        "check: all passed; 0.500 x torch (geomean, like-for-like peers)"
    )


def test_a_second_peer_has_its_own_columns_and_summary_line() -> None:
    """The FP8 x FP4 check's torch BF16 peer: its time and ratio on every row, like-for-like
    ratios only in its summary (geomean, least ratio, rows slower), none where it was refused."""
    out = io.StringIO()
    rep = Report(out, second="torch BF16")
    rep.row("offs/prep", "l", 8, 32, 1e-6, 10.0, 12.0, second=(20.0, Peer("bf16", lambda: None)))
    rep.row("offs/raw", "l", 8, 32, 1e-6, 10.0, 12.0, second=(5.0, Peer("bf16", lambda: None)))
    rep.row("dense/raw", "l", 8, 8, 1e-6, 10.0, 12.0, second=(math.nan, None))
    differs = Peer("bf16", lambda: None, same_output=False, differs="FP32 out")
    rep.row("masked/raw", "l", 8, 32, 1e-6, 10.0, 12.0, second=(1.0, differs))
    assert check._summary(rep)
    lines = out.getvalue().splitlines()
    assert "torch BF16 us" in lines[0] and "x torch BF16" in lines[0]
    assert lines[1].split()[8:10] == ["20.0", "2.000"]
    assert lines[2].split()[8:10] == ["5.0", "0.500"]
    assert lines[3].split()[8:10] == ["nan", "nan"]
    assert lines[-1] == (
        "check: 1.000 x torch BF16 (geomean), 0.500 at least; 1 of 2 rows slower than torch BF16"
    )


def test_every_failure_is_one_line_and_fails_the_check() -> None:
    out = io.StringIO()
    rep = Report(out)
    rep.row("offs", "linear1 n=4096 k=7168 G=256", 64, 512, 1e-6, 10.0, 12.0)
    rep.row("masked", "linear1 n=4096 k=7168 G=256", 64, 512, math.inf, 10.0, 12.0)
    with rep.guard("k-grouped", "linear1 n=4096 k=7168 G=256", 64):
        raise RuntimeError("CUDA error: an illegal memory access was encountered\nmore text")
    with rep.guard("dense", "l", 1):
        pass  # a call that passes adds nothing
    assert not check._summary(rep)
    lines = out.getvalue().splitlines()
    assert lines[-3] == "check: FAILED (2 calls); 1.200 x torch (geomean, like-for-like peers)"
    assert lines[-2] == (
        "check failed: masked linear1 n=4096 k=7168 G=256 tokens=64: calc_diff inf not below "
        "the bound 1e-05"
    )
    assert lines[-1] == (
        "check failed: k-grouped linear1 n=4096 k=7168 G=256 tokens=64: raised RuntimeError: "
        "CUDA error: an illegal memory access was encountered"
    )
    with pytest.raises(KeyboardInterrupt), rep.guard("offs", "l", 1):
        raise KeyboardInterrupt


def test_the_bf16_check_on_cpu_labels_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """_check_routed with torch references standing in for the kernels and torch's peers:
    every layout passes, a raise in one layout fails it alone, and each row names its peer."""
    import moegemm

    monkeypatch.setattr(check_common, "DEVICE", "cpu")
    for module in (check, check_common):
        monkeypatch.setattr(module, "bench_us", lambda fn: 1.0)

    def contiguous(a, b, d, m_indices=None, *, offs=None):
        if offs is not None:
            ends = offs.tolist()
            starts = [0, *ends[:-1]]
            for g, (s, e) in enumerate(zip(starts, ends)):
                d[s:e] = (a[s:e].float() @ b[g].float().t()).bfloat16()
        else:
            for r, g in enumerate(m_indices.tolist()):
                if g >= 0:
                    d[r] = (a[r].float() @ b[g].float().t()).bfloat16()

    def masked(a, b, d, masked_m, expected):
        raise RuntimeError("launch failed")

    def k_grouped(dy, x, d, offs):
        ends = offs.tolist()
        for g, (s, e) in enumerate(zip([0, *ends[:-1]], ends)):
            d[g] = dy[s:e].float().t() @ x[s:e].float()

    monkeypatch.setattr(moegemm, "m_grouped_bf16_gemm_nt_contiguous", contiguous)
    monkeypatch.setattr(moegemm, "m_grouped_bf16_gemm_nt_masked", masked)
    monkeypatch.setattr(moegemm, "k_grouped_bf16_gemm_tn_contiguous", k_grouped)
    monkeypatch.setattr(torch, "_grouped_mm", lambda a, b, *, offs=None, out_dtype=None: None)
    out = io.StringIO()
    rep = Report(out)
    b = (torch.randn(4, 16, 32) * 0.02).bfloat16()
    check._check_routed(rep, "l", b, 6, 2, torch.Generator().manual_seed(0))
    text = out.getvalue()
    rows = {line.split()[0]: line for line in text.splitlines()[1:]}
    assert rows["offs"].endswith("torch._grouped_mm")
    assert rows["m_indices"].endswith("torch._grouped_mm on the packed rows")
    assert rows["k-grouped"].endswith("torch._grouped_mm FP32 out")
    assert rows["masked"].endswith("masked l tokens=6: raised RuntimeError: launch failed")
    assert rep.failures == ["masked l tokens=6: raised RuntimeError: launch failed"]
