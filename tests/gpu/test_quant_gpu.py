"""moegemm.quant on CUDA tensors: bitwise the same results as on the CPU (tests/unit/test_quant.py
checks the CPU results against the OCP rules)."""

from __future__ import annotations

import pytest
import torch

from moegemm.quant import dequantize_mxfp4, per_token_cast_to_fp8, quantize_mxfp4

pytestmark = pytest.mark.gpu


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of t on the CPU, so -0.0 and subnormals compare exactly."""
    return t.detach().cpu().contiguous().view(torch.uint8)


def assert_same(got: torch.Tensor, ref: torch.Tensor) -> None:
    """Bitwise equal, except that NaNs (from scale byte 0xFF) need only be NaN in both: the
    CPU keeps the operand's NaN payload, the GPU returns its canonical NaN."""
    got = got.cpu()
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(got), nan)
    assert torch.equal(bits(got[~nan]), bits(ref[~nan]))


def spread_weights(seed: int) -> torch.Tensor:
    """[4, 16, 2880] with block scales from 2^-130 (clamped) to 2^120, ties and zero blocks."""
    gen = torch.Generator().manual_seed(seed)
    exps = torch.randint(-130, 120, (4, 16, 90, 1), generator=gen).expand(4, 16, 90, 32)
    w = torch.randn(4, 16, 90, 32, generator=gen) * 2.0 ** exps.double()
    w = w.float()
    w[0, 0, 0] = torch.tensor([4.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0] * 4)  # ties
    w[0, 0, 1] = 0.0
    w[0, 0, 2] = -0.0
    w[0, 0, 3, :2] = torch.tensor([2.0**-128, 1.5 * 2.0**-128])  # subnormal inputs
    return w.flatten(-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_quantize_mxfp4_cuda_matches_cpu(dtype: torch.dtype) -> None:
    w = spread_weights(0)
    if dtype == torch.float16:
        w = w.clamp(-6e4, 6e4)  # stay finite in fp16 (quantize_mxfp4 refuses Inf)
    w = w.to(dtype)
    b_cpu, sfb_cpu = quantize_mxfp4(w)
    b_gpu, sfb_gpu = quantize_mxfp4(w.cuda())
    assert b_gpu.is_cuda and sfb_gpu.is_cuda
    assert torch.equal(bits(b_gpu), bits(b_cpu))
    assert torch.equal(bits(sfb_gpu), bits(sfb_cpu))


def test_dequantize_mxfp4_cuda_matches_cpu() -> None:
    gen = torch.Generator().manual_seed(1)
    # Every code at every scale byte, 0xFF (NaN) and the subnormal end included.
    b = torch.randint(0, 256, (2, 256, 1440), generator=gen, dtype=torch.uint8)
    sfb = (torch.arange(2 * 256 * 90) % 256).reshape(2, 256, 90).to(torch.uint8)
    ref = dequantize_mxfp4(b, sfb)
    got = dequantize_mxfp4(b.cuda(), sfb.cuda())
    assert got.is_cuda and got.dtype == torch.float32
    assert_same(got, ref)
    assert torch.isnan(ref.unflatten(-1, (90, 32))[sfb == 0xFF]).all()
    # The checkpoint layout as a strided view on the device.
    blocks = b.cuda().view(2, 256, 90, 16)[:, ::3]
    got = dequantize_mxfp4(blocks, sfb.cuda()[:, ::3])
    assert_same(got, ref[:, ::3])
    # The subnormal end survives on the device (no flush to zero): 0.5 * 2^-127.
    one = torch.tensor([[0x01] * 16], dtype=torch.uint8, device="cuda")
    zero = torch.zeros(1, 1, dtype=torch.uint8, device="cuda")
    assert dequantize_mxfp4(one, zero)[0, 0].item() == 2.0**-128


@pytest.mark.parametrize("k", [1, 200, 2880, 7168])
def test_per_token_cast_cuda_matches_cpu(k: int) -> None:
    gen = torch.Generator().manual_seed(k)
    x = (torch.randn(3, 33, k, generator=gen) * torch.logspace(-4, 4, k)).to(torch.bfloat16)
    x[1, 5] = 0
    a_cpu, sfa_cpu = per_token_cast_to_fp8(x)
    a_gpu, sfa_gpu = per_token_cast_to_fp8(x.cuda())
    assert a_gpu.is_cuda and sfa_gpu.is_cuda
    assert torch.equal(bits(a_gpu), bits(a_cpu))
    assert torch.equal(bits(sfa_gpu), bits(sfa_cpu))


def test_round_trip_on_cuda() -> None:
    w = spread_weights(2).cuda()
    b, sfb = quantize_mxfp4(w)
    deq = dequantize_mxfp4(b, sfb)
    b2, sfb2 = quantize_mxfp4(deq)
    # A block quantized once is canonical except where every code is below 4 at a byte > 0
    # (requantizes lower); values are kept in every case.
    assert torch.equal(bits(dequantize_mxfp4(b2, sfb2)), bits(deq))
