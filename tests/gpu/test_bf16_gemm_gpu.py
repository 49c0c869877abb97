"""bf16_gemm_nt on the GPU against an FP32 reference on the exact operands."""

from __future__ import annotations

import pytest
import torch

import moegemm
from moegemm.testing import calc_diff, reference_gemm_nt

pytestmark = pytest.mark.gpu

TOL = 1e-5
# Ragged M; N and K that are not multiples of 128 (K tails inside a 64-wide k-block too).
SHAPES = [
    (1, 2880, 2880),
    (7, 136, 72),
    (129, 4104, 7176),
    (4095, 768, 2056),
    (64, 8, 8),
    (300, 5760, 2880),
]


def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, device="cuda") * scale).to(torch.bfloat16)


def poisoned(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full(shape, float("nan"), device="cuda", dtype=dtype)


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
def test_matches_fp32_reference(m: int, n: int, k: int, d_dtype: torch.dtype) -> None:
    a, b = randn(m, k), randn(n, k, scale=0.02)
    d = poisoned(m, n, dtype=d_dtype)
    moegemm.bf16_gemm_nt(a, b, d)
    assert not d.isnan().any(), "every output element must be written"
    assert calc_diff(d, reference_gemm_nt(a, b)) < TOL


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("d_dtype", [torch.bfloat16, torch.float32])
def test_accumulates_c(m: int, n: int, k: int, d_dtype: torch.dtype) -> None:
    a, b = randn(m, k), randn(n, k, scale=0.02)
    c = torch.randn(m, n, device="cuda")
    d = poisoned(m, n, dtype=d_dtype)
    moegemm.bf16_gemm_nt(a, b, d, c)
    assert calc_diff(d, reference_gemm_nt(a, b, c)) < TOL


def test_in_place_accumulation_into_fp32_d() -> None:
    a, b = randn(257, 1024), randn(512, 1024, scale=0.02)
    d = torch.randn(257, 512, device="cuda")
    expected = reference_gemm_nt(a, b, d.clone())
    moegemm.bf16_gemm_nt(a, b, d, d)
    assert calc_diff(d, expected) < TOL


def test_strided_operands_and_output() -> None:
    m, n, k = 200, 256, 520
    a = randn(m, k + 24)[:, :k]
    b = randn(n, k + 8, scale=0.02)[:, :k]
    d_full = poisoned(m, n + 64, dtype=torch.bfloat16)
    d = d_full[:, :n]
    moegemm.bf16_gemm_nt(a, b, d)
    assert calc_diff(d, reference_gemm_nt(a, b)) < TOL
    assert d_full[:, n:].isnan().all(), "columns outside the output view must stay untouched"


def test_rows_beyond_m_are_untouched() -> None:
    m, n, k = 70, 128, 128
    a, b = randn(m, k), randn(n, k, scale=0.02)
    storage = poisoned(m + 64, n, dtype=torch.bfloat16)
    moegemm.bf16_gemm_nt(a, b, storage[:m])
    assert calc_diff(storage[:m], reference_gemm_nt(a, b)) < TOL
    assert storage[m:].isnan().all()


def test_empty_problems() -> None:
    a, b = randn(0, 64), randn(64, 64)
    d = torch.empty(0, 64, device="cuda", dtype=torch.bfloat16)
    assert moegemm.bf16_gemm_nt(a, b, d) is d
    a, b = randn(16, 0), randn(64, 0)
    d = poisoned(16, 64, dtype=torch.float32)
    c = torch.randn(16, 64, device="cuda")
    moegemm.bf16_gemm_nt(a, b, d, c)
    assert torch.equal(d, c)
    moegemm.bf16_gemm_nt(a, b, d)
    assert torch.equal(d, torch.zeros_like(d))


def test_bitwise_deterministic() -> None:
    a, b = randn(1000, 4096), randn(3072, 4096, scale=0.02)
    d1 = poisoned(1000, 3072, dtype=torch.bfloat16)
    d2 = poisoned(1000, 3072, dtype=torch.bfloat16)
    moegemm.bf16_gemm_nt(a, b, d1)
    moegemm.bf16_gemm_nt(a, b, d2)
    assert torch.equal(d1, d2)


def test_cuda_graph_capture_and_replay() -> None:
    m, n, k = 333, 1024, 2048
    a, b = randn(m, k), randn(n, k, scale=0.02)
    d = poisoned(m, n, dtype=torch.bfloat16)
    moegemm.bf16_gemm_nt(a, b, d)  # compile and load outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        moegemm.bf16_gemm_nt(a, b, d)
    for _ in range(2):
        a.copy_(randn(m, k))
        b.copy_(randn(n, k, scale=0.02))
        d.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert calc_diff(d, reference_gemm_nt(a, b)) < TOL


def test_no_host_synchronization() -> None:
    a, b = randn(512, 1024), randn(1024, 1024, scale=0.02)
    d = poisoned(512, 1024, dtype=torch.bfloat16)
    moegemm.bf16_gemm_nt(a, b, d)  # first call may compile and load
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        moegemm.bf16_gemm_nt(a, b, d)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert calc_diff(d, reference_gemm_nt(a, b)) < TOL


def test_runs_on_a_side_stream() -> None:
    a, b = randn(512, 1024), randn(1024, 1024, scale=0.02)
    d = poisoned(512, 1024, dtype=torch.bfloat16)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        moegemm.bf16_gemm_nt(a, b, d)
    torch.cuda.current_stream().wait_stream(stream)
    assert calc_diff(d, reference_gemm_nt(a, b)) < TOL


@pytest.mark.parametrize("pdl", [True, False], ids=["pdl", "no_pdl"])
def test_pdl_and_fewer_sms(pdl: bool) -> None:
    """Back-to-back launches with programmatic dependent launch (the default) and without, on
    fewer SMs than the GPU has; the switch is restored after."""
    a, b = randn(2048, 2048), randn(2048, 2048, scale=0.02)
    expected = reference_gemm_nt(a, b)
    before = moegemm.get_pdl()
    try:
        moegemm.set_pdl(pdl)
        moegemm.set_num_sms(40)
        for _ in range(3):  # back-to-back launches overlap under PDL
            d = poisoned(2048, 2048, dtype=torch.bfloat16)
            moegemm.bf16_gemm_nt(a, b, d)
            assert calc_diff(d, expected) < TOL
    finally:
        moegemm.set_pdl(before)
        moegemm.set_num_sms(None)


def test_wrong_gpu_placement_is_refused_before_launch() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    a, b = randn(64, 64), randn(64, 64)
    d = torch.empty(64, 64, device="cuda:1", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="d is on cuda:1"):
        moegemm.bf16_gemm_nt(a, b, d)
