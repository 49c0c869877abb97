"""k-grouped BF16 GEMM for MoE weight gradients: d[g] = a_g^T b_g (+ c[g]) in FP32, where group
g owns rows [offs[g-1], offs[g]) of a and b."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..heuristics import GemmConfig, GemmDesc
from ..launch import checks
from ..launch.plans import PlanCache, raw_stream, signature
from ..launch.problems import KGroupedProblem

_BF16 = (torch.bfloat16,)
_FP32 = (torch.float32,)
_is_compiling = torch.compiler.is_compiling  # True while Dynamo traces (ops.py)

_plans = PlanCache()


def check_k_grouped(
    a: Tensor, b: Tensor, d: Tensor, offs: Tensor, c: Tensor | None, *, placed: bool = True
) -> KGroupedProblem:
    """The full checks of `k_grouped_bf16_gemm_tn_contiguous`; placed=False leaves out the
    placement (fake tensors)."""
    checks.require_tensor("a", a, _BF16, 2)
    checks.require_tensor("b", b, _BF16, 2)
    checks.require_tensor("d", d, _FP32, 3)
    num_tokens, m = a.shape
    n = b.shape[1]
    num_groups = d.shape[0]
    checks.require_shape("b", b, (num_tokens, n))
    checks.require_shape("d", d, (num_groups, m, n))
    checks.require_index_vector("offs", offs, num_groups)
    if c is not None:
        checks.require_tensor("c", c, _FP32, 3)
        checks.require_shape("c", c, (num_groups, m, n))
        checks.require_contiguous("c", c)
    if m % 8 != 0:
        raise ValueError(f"M (a.shape[1]) must be a multiple of 8, got {m}")
    if n % 8 != 0:
        raise ValueError(f"N (b.shape[1]) must be a multiple of 8, got {n}")
    lda, ldb = checks.row_stride("a", a), checks.row_stride("b", b)
    checks.require_contiguous("d", d)
    device = (
        checks.require_placement({"a": a, "b": b, "d": d, "c": c}, {"offs": offs}) if placed else -1
    )
    return KGroupedProblem(m, n, num_tokens, num_groups, lda, ldb, device=device)


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
    M and N multiples of 8. `config` forces a kernel config (benchmarks; eager only).
    Under torch.compile the call is the custom op `moegemm::k_grouped_bf16_gemm_tn_contiguous`.
    """
    if _is_compiling():
        checks.refuse_config_when_compiling(config)
        torch.ops.moegemm.k_grouped_bf16_gemm_tn_contiguous(a, b, d, offs, c)
        return d
    key = signature(a, b, d, offs, c)  # plans.py
    plan = _plans.find(key, config)
    # False: an operand base off a 16-byte boundary, or another current device (plans.py).
    if plan is not None and plan.launch(
        a.data_ptr(), b.data_ptr(), d.data_ptr(), 0 if c is None else c.data_ptr(),
        offs.data_ptr(), raw_stream(plan.device),
    ):  # fmt: skip
        return d
    return _checked_call(key, a, b, d, offs, c, config)


def _checked_call(
    key: tuple | None,
    a: Tensor,
    b: Tensor,
    d: Tensor,
    offs: Tensor,
    c: Tensor | None,
    config: GemmConfig | None,
) -> Tensor:
    """A plan miss: the full checks, then this signature's plan is built, stored and launched."""
    p = check_k_grouped(a, b, d, offs, c)
    if p.num_groups == 0 or p.m == 0 or p.n == 0:
        return d
    if p.num_tokens == 0:  # every group is empty: no rows to map, the result is c or zeros
        d.copy_(c) if c is not None else d.zero_()
        return d
    with_c = c is not None
    expected = math.ceil(p.num_tokens / p.num_groups)
    desc = GemmDesc("k_grouped", p.m, p.n, expected, p.num_groups, d_dtype="fp32", with_c=with_c)
    c_ptr = c.data_ptr() if with_c else 0
    pointers = (a.data_ptr(), b.data_ptr(), d.data_ptr(), c_ptr, offs.data_ptr())
    _plans.launch(key, desc, p, pointers, config)
    return d
