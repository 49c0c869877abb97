"""k-grouped BF16 GEMM for MoE weight gradients: d[g] = a_g^T b_g (+ c[g]) in FP32, where group
g owns rows [offs[g-1], offs[g]) of a and b."""

from __future__ import annotations

import math
from functools import partial

import torch

from ..heuristics import GemmConfig, GemmDesc
from .bf16_gemm import _raw_stream, current_cuda_device
from .checks import (
    require_cuda_device,
    require_index_vector,
    require_shape,
    require_tensor,
    row_stride,
)
from .plans import get_plan, plans

_BF16 = (torch.bfloat16,)
_FP32 = (torch.float32,)
_Tensor = torch.Tensor
_BF16_DTYPE, _FP32_DTYPE, _INT32_DTYPE = torch.bfloat16, torch.float32, torch.int32


def _require_contiguous(name: str, t: torch.Tensor) -> None:
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")
    if t.numel() and t.data_ptr() % 16 != 0:
        raise ValueError(f"{name} must start on a 16-byte boundary")


def _k_grouped_desc(m: int, n: int, num_tokens: int, num_groups: int, with_c: bool) -> GemmDesc:
    expected = math.ceil(num_tokens / num_groups)
    return GemmDesc("k_grouped", m, n, expected, num_groups, d_dtype="fp32", with_c=with_c)


def _fast_path_args(a, b, d, offs, c) -> tuple | None:
    """The common call (more than one token, at least one group, M and N positive multiples of
    8, row-major a and b with 16-byte aligned bases and row strides, contiguous aligned d and
    c, a unit-stride int32 offs, everything on the current CUDA device) proven legal with a few
    attribute reads. Returns (device, m, n, num_tokens, num_groups, lda, ldb, a_ptr, b_ptr,
    d_ptr, c_ptr, offs_ptr), exactly what the full checks derive (c_ptr 0 without c); None
    sends the call through them (they cover everything else and produce the error messages)."""
    if not (
        isinstance(a, _Tensor)
        and isinstance(b, _Tensor)
        and isinstance(d, _Tensor)
        and isinstance(offs, _Tensor)
        and (c is None or isinstance(c, _Tensor))
    ):
        return None
    try:
        num_tokens, m = a.shape
        tokens_b, n = b.shape
        num_groups, m_d, n_d = d.shape
        (length,) = offs.shape
        lda, one_a = a.stride()
        ldb, one_b = b.stride()
        (step,) = offs.stride()
        c_shape = None if c is None else c.shape
    except (ValueError, RuntimeError):  # a wrong rank; no sizes or strides (nested)
        return None
    if not (tokens_b == num_tokens and m_d == m and n_d == n and length == num_groups):
        return None
    if not (num_tokens > 1 and num_groups > 0 and m > 0 and n > 0 and (m | n) & 7 == 0):
        return None
    if not (
        a.dtype is _BF16_DTYPE
        and b.dtype is _BF16_DTYPE
        and d.dtype is _FP32_DTYPE
        and offs.dtype is _INT32_DTYPE
    ):
        return None
    if one_a != 1 or one_b != 1 or step != 1 or lda < m or ldb < n or (lda | ldb) & 7:
        return None
    if not d.is_contiguous():
        return None
    if c is None:
        device = current_cuda_device(a, b, d, offs)
    elif c_shape != (num_groups, m, n) or c.dtype is not _FP32_DTYPE or not c.is_contiguous():
        return None
    else:
        device = current_cuda_device(a, b, d, offs, c)
    if device < 0:
        return None
    c_ptr = 0 if c is None else c.data_ptr()
    a_ptr, b_ptr, d_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr()
    if (a_ptr | b_ptr | d_ptr | c_ptr) & 15:
        return None
    return (
        device, m, n, num_tokens, num_groups, lda, ldb, a_ptr, b_ptr, d_ptr, c_ptr, offs.data_ptr(),
    )  # fmt: skip


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
    fast = _fast_path_args(a, b, d, offs, c) if config is None else None
    if fast is None:
        return _checked_k_grouped(a, b, d, offs, c, config)
    device, m, n, num_tokens, num_groups, lda, ldb, a_ptr, b_ptr, d_ptr, c_ptr, offs_ptr = fast
    with_c = c is not None
    key = ("k_grouped", device, m, n, num_tokens, num_groups, with_c)
    plan = plans.get(key)
    if plan is None:
        plan = get_plan(key, device, partial(_k_grouped_desc, m, n, num_tokens, num_groups, with_c))
    plan.launch(
        a_ptr, b_ptr, d_ptr, c_ptr, offs_ptr, m, n, num_tokens, num_groups, lda, ldb,
        _raw_stream(device),
    )  # fmt: skip
    return d


def _checked_k_grouped(a, b, d, offs, c, config) -> torch.Tensor:
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
    key = ("k_grouped", device, m, n, num_tokens, num_groups, with_c)
    describe = partial(_k_grouped_desc, m, n, num_tokens, num_groups, with_c)
    plan = get_plan(key, device, describe, config)
    plan.launch(
        a.data_ptr(), b.data_ptr(), d.data_ptr(), c.data_ptr() if with_c else 0, offs.data_ptr(),
        m, n, num_tokens, num_groups, lda, ldb, _raw_stream(device),
    )  # fmt: skip
    return d
