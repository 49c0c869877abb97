"""m-grouped BF16 GEMMs: each row of A multiplies the weights of its group.

contiguous: rows of all groups in one [M, K] tensor, grouped either by DeepGEMM's per-row
            `m_indices` (segments aligned to get_mk_alignment_for_contiguous_layout(), -1 for
            padding rows) or by torch._grouped_mm's packed `offs` (cumulative end rows).
masked:     [G, max_m, K] buffers, group g uses its first masked_m[g] rows (decode under
            CUDA graphs: sizes stay on the device).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..heuristics import CONTIGUOUS_ALIGNMENT, GemmConfig, GemmDesc
from ..launch import checks
from ..launch.plans import PlanCache, raw_stream, signature
from ..launch.problems import GemmProblem

_BF16 = (torch.bfloat16,)
_D_DTYPES = (torch.bfloat16, torch.float32)
_is_compiling = torch.compiler.is_compiling  # True while Dynamo traces (ops.py)

# One cache per layout, so the layout the caller chose is part of the signature.
_indices_plans = PlanCache()
_offs_plans = PlanCache()
_masked_plans = PlanCache()


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


def check_contiguous(
    a: Tensor,
    b: Tensor,
    d: Tensor,
    m_indices: Tensor | None,
    offs: Tensor | None,
    *,
    placed: bool = True,
) -> GemmProblem:
    """The full checks of the contiguous layouts; placed=False leaves out the placement."""
    checks.require_tensor("a", a, _BF16, 2)
    checks.require_tensor("b", b, _BF16, 3)
    checks.require_tensor("d", d, _D_DTYPES, 2)
    rows, k = a.shape
    num_groups, n = b.shape[0], b.shape[1]
    checks.require_shape("b", b, (num_groups, n, k))
    checks.require_shape("d", d, (rows, n))
    _check_nk(n, k)
    info = checks.contiguous_group_info(rows, num_groups, m_indices, offs)
    lda = checks.row_stride("a", a)
    ldb, ldb_group = checks.batched_row_stride("b", b, collapsible=False)
    ldd = checks.row_stride("d", d)
    device = checks.require_placement({"a": a, "b": b, "d": d}, info) if placed else -1
    return GemmProblem(rows, rows, n, k, num_groups, lda, ldb, ldb_group, ldd, device=device)


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
    `config` forces a kernel config (benchmarks; eager only); by default the heuristics choose.
    Under torch.compile the call is the custom op `moegemm::m_grouped_bf16_gemm_nt_contiguous`.
    """
    if _is_compiling():
        checks.refuse_config_when_compiling(config)
        torch.ops.moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, offs)
        return d
    if offs is None:
        info, cache = m_indices, _indices_plans
    else:  # with both given, info = None: no signature, the full checks refuse the call
        info, cache = (offs if m_indices is None else None), _offs_plans
    key = signature(a, b, d, info)  # plans.py (info None, both or neither: the checks refuse)
    plan = cache.find(key, config)
    # False: an operand base off a 16-byte boundary, or another current device (plans.py).
    if plan is not None and plan.launch(
        a.data_ptr(), b.data_ptr(), d.data_ptr(), 0, info.data_ptr(), raw_stream(plan.device)
    ):
        return d
    p = check_contiguous(a, b, d, m_indices, offs)  # a miss: the full checks
    if m_indices is not None:
        return _launch_checked(key, _indices_plans, "m_grouped_contiguous", p, 0, d, config,
                               (a, b, d, m_indices))  # fmt: skip
    expected = math.ceil(p.rows / max(p.num_groups, 1))
    return _launch_checked(key, _offs_plans, "m_grouped_offsets", p, expected, d, config,
                           (a, b, d, offs))  # fmt: skip


def check_masked(
    a: Tensor, b: Tensor, d: Tensor, masked_m: Tensor, expected_m: int, *, placed: bool = True
) -> GemmProblem:
    """The full checks of the masked layout; placed=False leaves out the placement."""
    checks.require_tensor("a", a, _BF16, 3)
    checks.require_tensor("b", b, _BF16, 3)
    checks.require_tensor("d", d, _D_DTYPES, 3)
    num_groups, max_m, k = a.shape
    n = b.shape[1]
    checks.require_shape("b", b, (num_groups, n, k))
    checks.require_shape("d", d, (num_groups, max_m, n))
    _check_nk(n, k)
    checks.require_index_vector("masked_m", masked_m, num_groups)
    checks.require_expected_m(expected_m, symbolic=not placed)
    lda, _ = checks.batched_row_stride("a", a, collapsible=True)
    ldb, ldb_group = checks.batched_row_stride("b", b, collapsible=False)
    ldd, _ = checks.batched_row_stride("d", d, collapsible=True)
    device = (
        checks.require_placement({"a": a, "b": b, "d": d}, {"masked_m": masked_m}) if placed else -1
    )
    return GemmProblem(
        num_groups * max_m, max_m, n, k, num_groups, lda, ldb, ldb_group, ldd, device=device
    )


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
    Under torch.compile the call is the custom op `moegemm::m_grouped_bf16_gemm_nt_masked`.
    """
    if _is_compiling():
        checks.refuse_config_when_compiling(config)
        torch.ops.moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
        return d
    # The signature; expected_m steers the choice (a plain int: 2.0 == 2, True == 1).
    key = signature(a, b, d, masked_m) if type(expected_m) is int else None
    if key is not None:
        key += (expected_m,)
    plan = _masked_plans.find(key, config)
    if plan is not None and plan.launch(
        a.data_ptr(), b.data_ptr(), d.data_ptr(), 0, masked_m.data_ptr(), raw_stream(plan.device)
    ):
        return d
    p = check_masked(a, b, d, masked_m, expected_m)  # a miss: the full checks
    return _launch_checked(key, _masked_plans, "m_grouped_masked", p, min(expected_m, p.m), d,
                           config, (a, b, d, masked_m))  # fmt: skip


def _launch_checked(
    key: tuple | None, cache: PlanCache, kind: str, p: GemmProblem, expected_m: int, d: Tensor,
    config: GemmConfig | None, operands: tuple[Tensor, Tensor, Tensor, Tensor],
) -> Tensor:  # fmt: skip
    """After the full checks: this signature's plan built, stored and launched (an empty
    problem launches nothing). operands: a, b, d and the group info."""
    if p.empty:
        return d
    d_dtype = "fp32" if d.dtype == torch.float32 else "bf16"
    desc = GemmDesc(kind, p.m, p.n, p.k, p.num_groups, d_dtype=d_dtype, expected_m=expected_m)
    a, b, d, info = operands
    cache.launch(key, desc, p, (a.data_ptr(), b.data_ptr(), d.data_ptr(), 0, info.data_ptr()),
                 config)  # fmt: skip
    return d
