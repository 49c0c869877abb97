"""m-grouped BF16 GEMMs: each row of A multiplies the weights of its group.

contiguous: rows of all groups in one [M, K] tensor, grouped either by DeepGEMM's per-row
            `m_indices` (segments aligned to get_mk_alignment_for_contiguous_layout(), -1 for
            padding rows) or by torch._grouped_mm's packed `offs` (cumulative end rows).
masked:     [G, max_m, K] buffers, group g uses its first masked_m[g] rows (decode under
            CUDA graphs: sizes stay on the device).
"""

from __future__ import annotations

import math
from functools import partial

import torch

from ..heuristics import GemmConfig, GemmDesc
from ..heuristics.sm90 import CONTIGUOUS_ALIGNMENT
from .bf16_gemm import _raw_stream, current_cuda_device
from .checks import (
    batched_row_stride,
    require_cuda_device,
    require_index_vector,
    require_shape,
    require_tensor,
    row_stride,
)
from .plans import get_plan, plans

_BF16 = (torch.bfloat16,)
_D_DTYPES = (torch.bfloat16, torch.float32)
_Tensor = torch.Tensor
_BF16_DTYPE, _FP32_DTYPE, _INT32_DTYPE = torch.bfloat16, torch.float32, torch.int32


def get_mk_alignment_for_contiguous_layout() -> int:
    """Rows each group's segment of the `m_indices` layout is padded to (as in DeepGEMM)."""
    return CONTIGUOUS_ALIGNMENT


def _check_nk(n: int, k: int) -> None:
    if k == 0:
        # An empty reduction would still have to write exactly the groups' rows; no MoE layer
        # has K = 0, so it is refused rather than given a path of its own.
        raise ValueError("K (b.shape[2]) must be positive")
    if n % 8 != 0:
        raise ValueError(f"N (b.shape[1]) must be a multiple of 8, got {n}")
    if k % 8 != 0:
        raise ValueError(f"K (b.shape[2]) must be a multiple of 8, got {k}")


def _contiguous_desc(
    kind: str, rows: int, n: int, k: int, num_groups: int, d_is_fp32: bool
) -> GemmDesc:
    expected = math.ceil(rows / num_groups) if kind == "m_grouped_offsets" else 0
    d_dtype = "fp32" if d_is_fp32 else "bf16"
    return GemmDesc(kind, rows, n, k, num_groups, d_dtype=d_dtype, expected_m=expected)


def _masked_desc(
    max_m: int, n: int, k: int, num_groups: int, expected: int, d_is_fp32: bool
) -> GemmDesc:
    d_dtype = "fp32" if d_is_fp32 else "bf16"
    return GemmDesc(
        "m_grouped_masked", max_m, n, k, num_groups, d_dtype=d_dtype, expected_m=expected
    )


def _contiguous_fast_args(a, b, d, m_indices, offs) -> tuple | None:
    """The common contiguous call (M > 1, at least one group, N and K positive multiples of 8,
    row-major operands with 16-byte aligned bases and strides, a unit-stride int32 index
    vector, everything on the current CUDA device) proven legal with a few attribute reads.
    Returns (kind, device, rows, n, k, num_groups, d_is_fp32, lda, ldb, ldb_group, ldd, a_ptr,
    b_ptr, d_ptr, group_info_ptr), exactly what the full checks derive; None sends the call
    through them (they cover everything else and produce the error messages)."""
    if offs is None:
        if m_indices is None:
            return None
        kind, group_info = "m_grouped_contiguous", m_indices
    elif m_indices is None:
        kind, group_info = "m_grouped_offsets", offs
    else:
        return None
    if not (
        isinstance(a, _Tensor)
        and isinstance(b, _Tensor)
        and isinstance(d, _Tensor)
        and isinstance(group_info, _Tensor)
    ):
        return None
    try:
        rows, k = a.shape
        num_groups, n, kb = b.shape
        rows_d, n_d = d.shape
        (length,) = group_info.shape
        lda, one_a = a.stride()
        ldb_group, ldb, one_b = b.stride()
        ldd, one_d = d.stride()
        (step,) = group_info.stride()
    except (ValueError, RuntimeError):  # a wrong rank; no sizes or strides (nested)
        return None
    if not (kb == k and rows_d == rows and n_d == n and rows > 1 and num_groups > 0):
        return None
    if not (k > 0 and n > 0 and (n | k) & 7 == 0):
        return None
    if kind == "m_grouped_contiguous":
        if length != rows or rows % CONTIGUOUS_ALIGNMENT != 0:
            return None
    elif length != num_groups:
        return None
    d_dtype = d.dtype
    if not (
        a.dtype is _BF16_DTYPE
        and b.dtype is _BF16_DTYPE
        and (d_dtype is _BF16_DTYPE or d_dtype is _FP32_DTYPE)
        and group_info.dtype is _INT32_DTYPE
    ):
        return None
    if one_a != 1 or one_b != 1 or one_d != 1 or step != 1:
        return None
    if num_groups == 1:  # a single batch: its stride is never used (batched_row_stride)
        ldb_group = n * ldb
    if lda < k or ldb < k or ldd < n or ldb_group < n * ldb or (lda | ldb | ldb_group | ldd) & 7:
        return None
    device = current_cuda_device(a, b, d, group_info)
    if device < 0:
        return None
    a_ptr, b_ptr, d_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr()
    if (a_ptr | b_ptr | d_ptr) & 15:
        return None
    return (
        kind, device, rows, n, k, num_groups, d_dtype is _FP32_DTYPE, lda, ldb, ldb_group, ldd,
        a_ptr, b_ptr, d_ptr, group_info.data_ptr(),
    )  # fmt: skip


def m_grouped_bf16_gemm_nt_contiguous(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    m_indices: torch.Tensor | None = None,
    *,
    offs: torch.Tensor | None = None,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """d[r] = a[r] @ b[group(r)]^T for the rows of every group, written into `d` and returned.

    a: [M, K] bf16, b: [G, N, K] bf16, d: [M, N] bf16 or fp32. Exactly one of
    m_indices: int32 [M], the group of each row (-1: a padding row whose output is unspecified;
        each group's rows start on a multiple of get_mk_alignment_for_contiguous_layout()), or
    offs: int32 [G], cumulative end row of each group (packed, no alignment, empty groups
        allowed; rows past offs[-1] and all rows of other groups are never written).
    `config` forces a kernel config (benchmarks); by default the heuristics choose.
    """
    fast = _contiguous_fast_args(a, b, d, m_indices, offs) if config is None else None
    if fast is None:
        return _checked_contiguous(a, b, d, m_indices, offs, config)
    (kind, device, rows, n, k, num_groups, d_is_fp32, lda, ldb, ldb_group, ldd, a_ptr, b_ptr,
     d_ptr, group_info_ptr) = fast  # fmt: skip
    key = (kind, device, rows, n, k, num_groups, d_is_fp32)
    plan = plans.get(key)
    if plan is None:
        describe = partial(_contiguous_desc, kind, rows, n, k, num_groups, d_is_fp32)
        plan = get_plan(key, device, describe)
    plan.launch(
        a_ptr, b_ptr, d_ptr, 0, group_info_ptr, rows, rows, n, k, num_groups, lda, ldb, ldb_group,
        ldd, 0, _raw_stream(device),
    )  # fmt: skip
    return d


def _checked_contiguous(a, b, d, m_indices, offs, config) -> torch.Tensor:
    require_tensor("a", a, _BF16, 2)
    require_tensor("b", b, _BF16, 3)
    require_tensor("d", d, _D_DTYPES, 2)
    rows, k = a.shape
    num_groups, n = b.shape[0], b.shape[1]
    require_shape("b", b, (num_groups, n, k))
    require_shape("d", d, (rows, n))
    _check_nk(n, k)
    if (m_indices is None) == (offs is None):
        raise ValueError("pass exactly one of m_indices (per-row groups) or offs (group ends)")
    if m_indices is not None:
        require_index_vector("m_indices", m_indices, rows)
        if rows % CONTIGUOUS_ALIGNMENT != 0:
            raise ValueError(
                f"with m_indices, M must be a multiple of {CONTIGUOUS_ALIGNMENT} (each group's "
                f"segment is padded to it), got {rows}"
            )
        kind, group_info = "m_grouped_contiguous", m_indices
    else:
        require_index_vector("offs", offs, num_groups)
        kind, group_info = "m_grouped_offsets", offs
    lda = row_stride("a", a)
    ldb, ldb_group = batched_row_stride("b", b, collapsible=False)
    ldd = row_stride("d", d)
    require_cuda_device(a.device, a=a, b=b, d=d, group_info=group_info)
    if rows == 0 or n == 0 or num_groups == 0:
        return d
    d_is_fp32 = d.dtype == torch.float32
    device = a.device.index
    key = (kind, device, rows, n, k, num_groups, d_is_fp32)
    describe = partial(_contiguous_desc, kind, rows, n, k, num_groups, d_is_fp32)
    plan = get_plan(key, device, describe, config)
    plan.launch(
        a.data_ptr(), b.data_ptr(), d.data_ptr(), 0, group_info.data_ptr(), rows, rows, n, k,
        num_groups, lda, ldb, ldb_group, ldd, 0, _raw_stream(device),
    )  # fmt: skip
    return d


def _masked_fast_args(a, b, d, masked_m, expected_m) -> tuple | None:
    """The common masked call (at least one group, max_m > 0, N and K positive multiples of 8,
    row-major operands whose groups tile a and d without gaps, 16-byte aligned bases and
    strides, a unit-stride int32 masked_m, a plain positive int expected_m, everything on the
    current CUDA device) proven legal with a few attribute reads. Returns (device, num_groups,
    max_m, n, k, expected, d_is_fp32, lda, ldb, ldb_group, ldd, a_ptr, b_ptr, d_ptr,
    masked_m_ptr), exactly what the full checks derive; None sends the call through them."""
    if type(expected_m) is not int or expected_m <= 0:  # bool and other int subclasses: full
        return None
    if not (
        isinstance(a, _Tensor)
        and isinstance(b, _Tensor)
        and isinstance(d, _Tensor)
        and isinstance(masked_m, _Tensor)
    ):
        return None
    try:
        num_groups, max_m, k = a.shape
        groups_b, n, kb = b.shape
        groups_d, max_m_d, n_d = d.shape
        (length,) = masked_m.shape
        lda_group, lda, one_a = a.stride()
        ldb_group, ldb, one_b = b.stride()
        ldd_group, ldd, one_d = d.stride()
        (step,) = masked_m.stride()
    except (ValueError, RuntimeError):  # a wrong rank; no sizes or strides (nested)
        return None
    if not (groups_b == num_groups and groups_d == num_groups and length == num_groups):
        return None
    if not (kb == k and max_m_d == max_m and n_d == n and num_groups > 0 and max_m > 0):
        return None
    if not (k > 0 and n > 0 and (n | k) & 7 == 0):
        return None
    d_dtype = d.dtype
    if not (
        a.dtype is _BF16_DTYPE
        and b.dtype is _BF16_DTYPE
        and (d_dtype is _BF16_DTYPE or d_dtype is _FP32_DTYPE)
        and masked_m.dtype is _INT32_DTYPE
    ):
        return None
    if one_a != 1 or one_b != 1 or one_d != 1 or step != 1:
        return None
    # batched_row_stride: a single row's stride and a single batch's stride are never used.
    if max_m == 1:
        lda, ldd = k, n
    if num_groups == 1:
        lda_group, ldb_group, ldd_group = max_m * lda, n * ldb, max_m * ldd
    if lda < k or ldb < k or ldd < n or ldb_group < n * ldb:
        return None
    if lda_group != max_m * lda or ldd_group != max_m * ldd:  # a and d collapse to 2-D
        return None
    if (lda | ldb | ldd | lda_group | ldb_group | ldd_group) & 7:
        return None
    device = current_cuda_device(a, b, d, masked_m)
    if device < 0:
        return None
    a_ptr, b_ptr, d_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr()
    if (a_ptr | b_ptr | d_ptr) & 15:
        return None
    expected = min(expected_m, max_m)
    return (
        device, num_groups, max_m, n, k, expected, d_dtype is _FP32_DTYPE, lda, ldb, ldb_group,
        ldd, a_ptr, b_ptr, d_ptr, masked_m.data_ptr(),
    )  # fmt: skip


def m_grouped_bf16_gemm_nt_masked(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    masked_m: torch.Tensor,
    expected_m: int,
    *,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g]^T for every group; rows past masked_m[g]
    are never written. a: [G, max_m, K] bf16, b: [G, N, K] bf16, d: [G, max_m, N] bf16 or
    fp32, masked_m: int32 [G] on the device (values clamped to [0, max_m]), expected_m: the
    rows a group typically holds (a positive int; it only steers the kernel choice).
    """
    fast = _masked_fast_args(a, b, d, masked_m, expected_m) if config is None else None
    if fast is None:
        return _checked_masked(a, b, d, masked_m, expected_m, config)
    (device, num_groups, max_m, n, k, expected, d_is_fp32, lda, ldb, ldb_group, ldd, a_ptr,
     b_ptr, d_ptr, masked_m_ptr) = fast  # fmt: skip
    key = ("m_grouped_masked", device, max_m, n, k, num_groups, expected, d_is_fp32)
    plan = plans.get(key)
    if plan is None:
        describe = partial(_masked_desc, max_m, n, k, num_groups, expected, d_is_fp32)
        plan = get_plan(key, device, describe)
    plan.launch(
        a_ptr, b_ptr, d_ptr, 0, masked_m_ptr, num_groups * max_m, max_m, n, k, num_groups, lda,
        ldb, ldb_group, ldd, 0, _raw_stream(device),
    )  # fmt: skip
    return d


def _checked_masked(a, b, d, masked_m, expected_m, config) -> torch.Tensor:
    require_tensor("a", a, _BF16, 3)
    require_tensor("b", b, _BF16, 3)
    require_tensor("d", d, _D_DTYPES, 3)
    num_groups, max_m, k = a.shape
    n = b.shape[1]
    require_shape("b", b, (num_groups, n, k))
    require_shape("d", d, (num_groups, max_m, n))
    _check_nk(n, k)
    require_index_vector("masked_m", masked_m, num_groups)
    if isinstance(expected_m, bool) or not isinstance(expected_m, int) or expected_m <= 0:
        raise TypeError(f"expected_m must be a positive int, got {expected_m!r}")
    lda, _ = batched_row_stride("a", a, collapsible=True)
    ldb, ldb_group = batched_row_stride("b", b, collapsible=False)
    ldd, _ = batched_row_stride("d", d, collapsible=True)
    require_cuda_device(a.device, a=a, b=b, d=d, masked_m=masked_m)
    if num_groups == 0 or max_m == 0 or n == 0:
        return d
    d_is_fp32 = d.dtype == torch.float32
    device = a.device.index
    expected = min(expected_m, max_m)
    key = ("m_grouped_masked", device, max_m, n, k, num_groups, expected, d_is_fp32)
    describe = partial(_masked_desc, max_m, n, k, num_groups, expected, d_is_fp32)
    plan = get_plan(key, device, describe, config)
    plan.launch(
        a.data_ptr(), b.data_ptr(), d.data_ptr(), 0, masked_m.data_ptr(), num_groups * max_m,
        max_m, n, k, num_groups, lda, ldb, ldb_group, ldd, 0, _raw_stream(device),
    )  # fmt: skip
    return d
