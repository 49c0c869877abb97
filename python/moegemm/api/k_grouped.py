"""k-grouped BF16 GEMM for MoE weight gradients: d[g] = a_g^T b_g (+ c[g]) in FP32, where group
g owns rows [offs[g-1], offs[g]) of a and b."""

from __future__ import annotations

import math

import torch

from ..heuristics import GemmConfig, GemmDesc
from .bf16_gemm import _raw_stream
from .checks import (
    require_cuda_device,
    require_index_vector,
    require_shape,
    require_tensor,
    row_stride,
)
from .plans import get_plan

_BF16 = (torch.bfloat16,)
_FP32 = (torch.float32,)


def _require_contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")
    if t.numel() and t.data_ptr() % 16 != 0:
        raise ValueError(f"{name} must start on a 16-byte boundary")


def k_grouped_bf16_gemm_tn_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    offs: torch.Tensor,
    c: torch.Tensor | None = None,
    *,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """d[g, m, n] = sum over rows t of group g of a[t, m] * b[t, n] (+ c[g, m, n]).

    a: [T, M] bf16, b: [T, N] bf16 (row-major, rows of all groups packed), d: [G, M, N] fp32
    contiguous, offs: int32 [G] cumulative end row of each group (ragged, empty groups allowed;
    an empty group gets c or zeros), c: optional [G, M, N] fp32 contiguous (may be d itself).
    M and N multiples of 8. `config` forces a kernel config (benchmarks).
    """
    require_tensor("a", a, _BF16, 2)
    require_tensor("b", b, _BF16, 2)
    require_tensor("d", d, _FP32, 3)
    num_tokens, m = a.shape
    n = b.shape[1]
    num_groups = d.shape[0]
    require_shape("b", b, (num_tokens, n))
    require_shape("d", d, (num_groups, m, n))
    require_index_vector("offs", offs, num_groups)
    if c is not None:
        require_tensor("c", c, _FP32, 3)
        require_shape("c", c, (num_groups, m, n))
        _require_contiguous("c", c)
    if m % 8 != 0:
        raise ValueError(f"M (a.shape[1]) must be a multiple of 8, got {m}")
    if n % 8 != 0:
        raise ValueError(f"N (b.shape[1]) must be a multiple of 8, got {n}")
    lda = row_stride("a", a)
    ldb = row_stride("b", b)
    _require_contiguous("d", d)
    require_cuda_device(a.device, a=a, b=b, d=d, offs=offs, c=c)
    if num_groups == 0 or m == 0 or n == 0:
        return d
    if num_tokens == 0:  # every group is empty: no rows to map, the result is c or zeros
        d.copy_(c) if c is not None else d.zero_()
        return d
    device = a.device.index
    with_c = c is not None

    def describe() -> GemmDesc:
        expected = math.ceil(num_tokens / num_groups)
        return GemmDesc("k_grouped", m, n, expected, num_groups, d_dtype="fp32", with_c=with_c)

    key = ("k_grouped", device, m, n, num_tokens, num_groups, with_c)
    plan = get_plan(key, device, describe, config)
    plan.launch(
        a.data_ptr(), b.data_ptr(), d.data_ptr(), c.data_ptr() if with_c else 0, offs.data_ptr(),
        m, n, num_tokens, num_groups, lda, ldb, _raw_stream(device),
    )  # fmt: skip
    return d
