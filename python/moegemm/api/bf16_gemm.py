"""`bf16_gemm_nt`: dense D = A @ B^T (+ C) on SM90."""

from __future__ import annotations

import torch

from ..heuristics import GemmConfig, GemmDesc
from .checks import require_cuda_device, require_shape, require_tensor, row_stride
from .plans import get_plan, plans

_BF16 = (torch.bfloat16,)
_D_DTYPES = (torch.bfloat16, torch.float32)
_FP32 = (torch.float32,)


def _dense_desc(m: int, n: int, k: int, d_is_fp32: bool, with_c: bool) -> GemmDesc:
    d_dtype = "fp32" if d_is_fp32 else "bf16"
    return GemmDesc("bf16_gemm_nt", m=m, n=n, k=k, d_dtype=d_dtype, with_c=with_c)


def _check(a, b, d, c) -> tuple[int, int, int, int, int, int, int]:
    """Returns (m, n, k, lda, ldb, ldd, ldc). Device placement is checked last so that every
    other rule can be exercised with CPU tensors."""
    require_tensor("a", a, _BF16, 2)
    require_tensor("b", b, _BF16, 2)
    require_tensor("d", d, _D_DTYPES, 2)
    m, k = a.shape
    n = b.shape[0]
    require_shape("b", b, (n, k))
    require_shape("d", d, (m, n))
    if c is not None:
        require_tensor("c", c, _FP32, 2)
        require_shape("c", c, (m, n))
    if n % 8 != 0:
        raise ValueError(f"N (b.shape[0]) must be a multiple of 8, got {n}")
    if k % 8 != 0:
        raise ValueError(f"K (a.shape[1]) must be a multiple of 8, got {k}")
    lda = row_stride("a", a)
    ldb = row_stride("b", b)
    ldd = row_stride("d", d)
    ldc = row_stride("c", c) if c is not None else 0
    require_cuda_device(a.device, a=a, b=b, d=d, c=c)
    return m, n, k, lda, ldb, ldd, ldc


# The C-level getters cost a fraction of their torch.cuda wrappers; CPU builds of torch lack them.
_get_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
_raw_stream = getattr(
    torch._C, "_cuda_getCurrentRawStream", lambda i: torch.cuda.current_stream(i).cuda_stream
)


def current_cuda_device(*tensors) -> int:
    """The fast paths' device rule: the current CUDA device's index when every tensor is a
    CUDA tensor on it, else -1. The first tensor's index is read before the current device, so
    CPU tensors never reach the CUDA getter (CPU builds of torch have none)."""
    device = tensors[0].get_device()
    if device < 0:
        return -1
    for t in tensors:
        if t.get_device() != device or not t.is_cuda:  # other accelerators number devices too
            return -1
    return device if device == _get_device() else -1


def _fast_path_args(a, b, d, c) -> tuple | None:
    """The common call (no C, M > 1, K > 0, padded-or-packed rows, aligned, current device)
    proven legal with a few attribute reads. None sends the call through the full checks,
    which cover everything else and produce the error messages."""
    if c is not None:
        return None
    try:
        m, k = a.shape
        n, kb = b.shape
        md, nd = d.shape
    except (AttributeError, ValueError, TypeError):
        return None
    if not (kb == k and md == m and nd == n and m > 1 and k > 0 and n % 8 == 0 and k % 8 == 0):
        return None
    d_dtype = d.dtype
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or d_dtype not in _D_DTYPES:
        return None
    try:
        lda, one_a = a.stride()
        ldb, one_b = b.stride()
        ldd, one_d = d.stride()
    except (AttributeError, ValueError, TypeError, RuntimeError):  # e.g. nested tensors
        return None
    if one_a != 1 or one_b != 1 or one_d != 1:
        return None
    if lda < k or ldb < k or ldd < n or (lda | ldb | ldd) & 7:
        return None
    device = current_cuda_device(a, b, d)
    if device < 0:
        return None
    a_ptr, b_ptr, d_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr()
    if (a_ptr | b_ptr | d_ptr) & 15:
        return None
    return device, m, n, k, lda, ldb, ldd, d_dtype is torch.float32, a_ptr, b_ptr, d_ptr


def bf16_gemm_nt(
    a: torch.Tensor,
    b: torch.Tensor,
    d: torch.Tensor,
    c: torch.Tensor | None = None,
    *,
    config: GemmConfig | None = None,
) -> torch.Tensor:
    """D[m, n] = sum_k A[m, k] * B[n, k] (+ C[m, n]), written into `d` and returned.

    a: [M, K] bf16, b: [N, K] bf16, d: [M, N] bf16 or fp32, c: optional [M, N] fp32 (may be `d`
    itself when d is fp32). Any M; N and K multiples of 8. Never synchronizes with the host.
    `config` forces a kernel config (tests, benchmarks); by default the heuristics choose.
    """
    fast = _fast_path_args(a, b, d, c) if config is None else None
    if fast is None:
        return _checked_bf16_gemm_nt(a, b, d, c, config)
    device, m, n, k, lda, ldb, ldd, d_is_fp32, a_ptr, b_ptr, d_ptr = fast
    key = ("dense", device, m, n, k, d_is_fp32, False)
    plan = plans.get(key)
    if plan is None:
        plan = get_plan(key, device, lambda: _dense_desc(m, n, k, d_is_fp32, False))
    plan.launch(
        a_ptr, b_ptr, d_ptr, 0, 0, m, m, n, k, 1, lda, ldb, n * ldb, ldd, 0, _raw_stream(device)
    )
    return d


def _checked_bf16_gemm_nt(a, b, d, c, config: GemmConfig | None = None) -> torch.Tensor:
    m, n, k, lda, ldb, ldd, ldc = _check(a, b, d, c)
    if m == 0 or n == 0:
        return d
    if k == 0:  # an empty sum: D = C or 0, no kernel needed (and TMA cannot map a 0-wide tensor)
        d.copy_(c) if c is not None else d.zero_()
        return d
    d_is_fp32 = d.dtype == torch.float32
    device = a.device.index
    with_c = c is not None
    key = ("dense", device, m, n, k, d_is_fp32, with_c)
    plan = get_plan(key, device, lambda: _dense_desc(m, n, k, d_is_fp32, with_c), config)
    a_ptr, b_ptr, d_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr()
    c_ptr = c.data_ptr() if with_c else 0
    plan.launch(
        a_ptr,
        b_ptr,
        d_ptr,
        c_ptr,
        0,
        m,
        m,
        n,
        k,
        1,
        lda,
        ldb,
        n * ldb,
        ldd,
        ldc,
        _raw_stream(device),
    )
    return d
