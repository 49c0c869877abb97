"""`bf16_gemm_nt`: dense D = A @ B^T (+ C) on SM90."""

from __future__ import annotations

import torch
from torch import Tensor

from ..heuristics import GemmConfig, GemmDesc
from ..launch import checks
from ..launch.plans import PlanCache, raw_stream, signature
from ..launch.problems import GemmProblem

_BF16 = (torch.bfloat16,)
_D_DTYPES = (torch.bfloat16, torch.float32)
_FP32 = (torch.float32,)
# Dynamo evaluates this to True while it traces (the call becomes the custom op, ops.py).
_is_compiling = torch.compiler.is_compiling

_plans = PlanCache()


def check_dense(
    a: Tensor, b: Tensor, d: Tensor, c: Tensor | None, *, placed: bool = True
) -> GemmProblem:
    """The full checks of `bf16_gemm_nt`; placed=False leaves out the placement (fake
    tensors)."""
    checks.require_tensor("a", a, _BF16, 2)
    checks.require_tensor("b", b, _BF16, 2)
    checks.require_tensor("d", d, _D_DTYPES, 2)
    m, k = a.shape
    n = b.shape[0]
    checks.require_shape("b", b, (n, k))
    checks.require_shape("d", d, (m, n))
    if c is not None:
        checks.require_tensor("c", c, _FP32, 2)
        checks.require_shape("c", c, (m, n))
    if n % 8 != 0:
        raise ValueError(f"N (b.shape[0]) must be a multiple of 8, got {n}")
    if k % 8 != 0:
        raise ValueError(f"K (a.shape[1]) must be a multiple of 8, got {k}")
    lda, ldb, ldd = checks.row_stride("a", a), checks.row_stride("b", b), checks.row_stride("d", d)
    ldc = checks.row_stride("c", c) if c is not None else 0
    device = checks.require_placement({"a": a, "b": b, "d": d, "c": c}, {}) if placed else -1
    return GemmProblem(m, m, n, k, 1, lda, ldb, n * ldb, ldd, ldc=ldc, device=device)


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
    `config` forces a kernel config (tests, benchmarks; eager only); by default the heuristics
    choose. Under torch.compile the call is the custom op `moegemm::bf16_gemm_nt`.
    """
    if _is_compiling():
        checks.refuse_config_when_compiling(config)
        torch.ops.moegemm.bf16_gemm_nt(a, b, d, c)
        return d
    key = signature(a, b, d, c)  # plans.py
    plan = _plans.find(key, config)
    # False: an operand base off a 16-byte boundary, or another current device (plans.py).
    if plan is not None and plan.launch(
        a.data_ptr(), b.data_ptr(), d.data_ptr(), 0 if c is None else c.data_ptr(), 0,
        raw_stream(plan.device),
    ):  # fmt: skip
        return d
    return _checked_call(key, a, b, d, c, config)


def _checked_call(
    key: tuple | None, a: Tensor, b: Tensor, d: Tensor, c: Tensor | None, config: GemmConfig | None
) -> Tensor:
    """A plan miss: the full checks, then the plan of this signature is built (and stored when
    the heuristics chose it) and launched."""
    p = check_dense(a, b, d, c)
    if p.m == 0 or p.n == 0:
        return d
    if p.k == 0:  # an empty sum: D = C or 0, no kernel needed (and TMA cannot map a 0-wide tensor)
        d.copy_(c) if c is not None else d.zero_()
        return d
    d_dtype = "fp32" if d.dtype == torch.float32 else "bf16"
    desc = GemmDesc("bf16_gemm_nt", m=p.m, n=p.n, k=p.k, d_dtype=d_dtype, with_c=c is not None)
    c_ptr = 0 if c is None else c.data_ptr()
    _plans.launch(key, desc, p, (a.data_ptr(), b.data_ptr(), d.data_ptr(), c_ptr, 0), config)
    return d
