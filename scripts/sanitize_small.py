"""One small case of each BF16 layout, checked against FP32: the workload that
`compute-sanitizer` (memcheck, racecheck) runs in tests/test_sanitizer_gpu.py. Exits non-zero
when a result is wrong."""

from __future__ import annotations

import sys

import torch

import moegemm
from moegemm.testing import calc_diff


def main() -> int:
    torch.manual_seed(0)
    bf16 = torch.bfloat16
    ok = True

    def check(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
        nonlocal ok
        diff = calc_diff(got, ref)
        print(f"{name}: calc_diff {diff:.2e}")
        ok &= diff < 1e-5

    a, b = torch.randn(70, 136, device="cuda").to(bf16), torch.randn(3, 200, 136, device="cuda")
    b = (b * 0.05).to(bf16)
    d = torch.empty(70, 200, device="cuda", dtype=bf16)
    moegemm.bf16_gemm_nt(a, b[0], d)
    check("dense", d, a.float() @ b[0].float().t())

    offs = torch.tensor([30, 30, 70], device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)
    ref = torch.cat([a[:30].float() @ b[0].float().t(), a[30:].float() @ b[2].float().t()])
    check("offs", d, ref)

    ia = torch.randn(256, 136, device="cuda").to(bf16)
    m_indices = torch.full((256,), -1, device="cuda", dtype=torch.int32)
    m_indices[:100] = 1
    m_indices[128:140] = 2
    id_ = torch.empty(256, 200, device="cuda", dtype=bf16)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(ia, b, id_, m_indices)
    check(
        "m_indices",
        torch.cat([id_[:100], id_[128:140]]),
        torch.cat([ia[:100].float() @ b[1].float().t(), ia[128:140].float() @ b[2].float().t()]),
    )

    ma = torch.randn(3, 48, 136, device="cuda").to(bf16)
    md = torch.zeros(3, 48, 200, device="cuda", dtype=bf16)
    masked_m = torch.tensor([48, 0, 5], device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_masked(ma, b, md, masked_m, expected_m=16)
    check(
        "masked",
        torch.cat([md[0], md[2, :5]]),
        torch.cat([ma[0].float() @ b[0].float().t(), ma[2, :5].float() @ b[2].float().t()]),
    )

    ka, kb = torch.randn(70, 128, device="cuda").to(bf16), torch.randn(70, 64, device="cuda")
    kb = kb.to(bf16)
    kd = torch.empty(3, 128, 64, device="cuda")
    moegemm.k_grouped_bf16_gemm_tn_contiguous(ka, kb, kd, offs)
    kref = torch.stack(
        [
            ka[:30].float().t() @ kb[:30].float(),
            torch.zeros(128, 64, device="cuda"),
            ka[30:].float().t() @ kb[30:].float(),
        ]
    )
    check("k_grouped", kd, kref)
    torch.cuda.synchronize()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
