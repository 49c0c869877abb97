"""m-grouped BF16 GEMMs: each row of A multiplies the weights of its group.

contiguous: rows of all groups in one [M, K] tensor, grouped either by DeepGEMM's per-row
            `m_indices` (segments aligned to get_mk_alignment_for_contiguous_layout(), -1 for
            padding rows) or by torch._grouped_mm's packed `offs` (cumulative end rows).
masked:     [G, max_m, K] buffers, group g uses its first masked_m[g] rows (decode under
            CUDA graphs: sizes stay on the device).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from ..heuristics import CONTIGUOUS_ALIGNMENT, GemmConfig, GemmDesc
from .checks import (
    batched_row_stride,
    contiguous_group_info,
    refuse_config_when_compiling,
    require_index_vector,
    require_placement,
    require_shape,
    require_tensor,
    row_stride,
)
from .plans import make_plan, new_plan_cache, raw_stream, require_launched

_BF16 = (torch.bfloat16,)
_D_DTYPES = (torch.bfloat16, torch.float32)
_is_compiling = torch.compiler.is_compiling  # True while Dynamo traces (ops.py)

# One cache per layout, so the layout the caller chose is part of the signature.
_indices_plans = new_plan_cache()
_offs_plans = new_plan_cache()
_masked_plans = new_plan_cache()


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


class GroupedProblem(NamedTuple):
    """What a checked m-grouped call launches (rows: all rows of A; m: rows per group)."""

    rows: int
    m: int
    n: int
    k: int
    num_groups: int
    lda: int
    ldb: int
    ldb_group: int
    ldd: int
    device: int  # the CUDA device index (-1 unplaced)

    @property
    def empty(self) -> bool:
        return self.rows == 0 or self.n == 0 or self.num_groups == 0

    def launch_args(self) -> tuple[int, ...]:
        """The launcher's arguments between the pointers and the stream."""
        return (*self[:5], self.lda, self.ldb, self.ldb_group, self.ldd, 0)


def check_contiguous(
    a: Tensor,
    b: Tensor,
    d: Tensor,
    m_indices: Tensor | None,
    offs: Tensor | None,
    *,
    placed: bool = True,
) -> GroupedProblem:
    """The full checks of the contiguous layouts; placed=False leaves out the placement."""
    require_tensor("a", a, _BF16, 2)
    require_tensor("b", b, _BF16, 3)
    require_tensor("d", d, _D_DTYPES, 2)
    rows, k = a.shape
    num_groups, n = b.shape[0], b.shape[1]
    require_shape("b", b, (num_groups, n, k))
    require_shape("d", d, (rows, n))
    _check_nk(n, k)
    info = contiguous_group_info(rows, num_groups, m_indices, offs)
    lda = row_stride("a", a)
    ldb, ldb_group = batched_row_stride("b", b, collapsible=False)
    ldd = row_stride("d", d)
    device = require_placement({"a": a, "b": b, "d": d}, info) if placed else -1
    return GroupedProblem(rows, rows, n, k, num_groups, lda, ldb, ldb_group, ldd, device)


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
        refuse_config_when_compiling(config)
        torch.ops.moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, offs)
        return d
    if offs is None:
        info, cache = m_indices, _indices_plans
    else:  # with both given, info = None: no signature, the full checks refuse the call
        info, cache = (offs if m_indices is None else None), _offs_plans
    try:  # the signature (plans.py); anything without these attributes takes the full checks
        key = (
            type(a), a.shape, a.stride(), a.dtype, a.device,
            type(b), b.shape, b.stride(), b.dtype, b.device,
            type(d), d.shape, d.stride(), d.dtype, d.device,
            type(info), info.shape, info.stride(), info.dtype, info.device,
        )  # fmt: skip
        plan = cache.get(key) if config is None else None
    except (AttributeError, TypeError, RuntimeError):  # not a tensor, nested, sparse, ...
        key = plan = None
    if plan is not None:
        a_ptr, b_ptr, d_ptr, info_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr(), info.data_ptr()
        # False: an operand base off a 16-byte boundary, or another current device (plans.py).
        if plan.launch(a_ptr, b_ptr, d_ptr, 0, info_ptr, raw_stream(plan.device)):
            return d
    return _checked_contiguous(key, a, b, d, m_indices, offs, config)


def _checked_contiguous(
    key: tuple | None,
    a: Tensor,
    b: Tensor,
    d: Tensor,
    m_indices: Tensor | None,
    offs: Tensor | None,
    config: GemmConfig | None,
) -> Tensor:
    """A plan miss: the full checks, then this signature's plan is built, stored and launched."""
    p = check_contiguous(a, b, d, m_indices, offs)
    if p.empty:
        return d
    if m_indices is not None:
        kind, info, cache, expected = "m_grouped_contiguous", m_indices, _indices_plans, 0
    else:
        kind, info, cache = "m_grouped_offsets", offs, _offs_plans
        expected = math.ceil(p.rows / p.num_groups)
    d_dtype = "fp32" if d.dtype == torch.float32 else "bf16"
    desc = GemmDesc(kind, p.rows, p.n, p.k, p.num_groups, d_dtype=d_dtype, expected_m=expected)
    return _launch(key, cache, p.device, desc, p.launch_args(), config, a, b, d, info)


def check_masked(
    a: Tensor, b: Tensor, d: Tensor, masked_m: Tensor, expected_m: int, *, placed: bool = True
) -> GroupedProblem:
    """The full checks of the masked layout; placed=False leaves out the placement."""
    require_tensor("a", a, _BF16, 3)
    require_tensor("b", b, _BF16, 3)
    require_tensor("d", d, _D_DTYPES, 3)
    num_groups, max_m, k = a.shape
    n = b.shape[1]
    require_shape("b", b, (num_groups, n, k))
    require_shape("d", d, (num_groups, max_m, n))
    _check_nk(n, k)
    require_index_vector("masked_m", masked_m, num_groups)
    # Traced by torch.compile, an expected_m that varies between calls becomes a SymInt.
    ints = int if placed else (int, torch.SymInt)
    if isinstance(expected_m, bool) or not isinstance(expected_m, ints) or expected_m <= 0:
        raise TypeError(f"expected_m must be a positive int, got {expected_m!r}")
    lda, _ = batched_row_stride("a", a, collapsible=True)
    ldb, ldb_group = batched_row_stride("b", b, collapsible=False)
    ldd, _ = batched_row_stride("d", d, collapsible=True)
    device = require_placement({"a": a, "b": b, "d": d}, {"masked_m": masked_m}) if placed else -1
    return GroupedProblem(
        num_groups * max_m, max_m, n, k, num_groups, lda, ldb, ldb_group, ldd, device
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
        refuse_config_when_compiling(config)
        torch.ops.moegemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
        return d
    try:  # the signature; expected_m steers the choice (a plain int: 2.0 == 2, True == 1)
        key = (
            type(a), a.shape, a.stride(), a.dtype, a.device,
            type(b), b.shape, b.stride(), b.dtype, b.device,
            type(d), d.shape, d.stride(), d.dtype, d.device,
            type(masked_m), masked_m.shape, masked_m.stride(), masked_m.dtype, masked_m.device,
            expected_m,
        ) if type(expected_m) is int else None  # fmt: skip
        plan = _masked_plans.get(key) if config is None else None
    except (AttributeError, TypeError, RuntimeError):  # not a tensor, nested, sparse, ...
        key = plan = None
    if plan is not None:
        a_ptr, b_ptr, d_ptr, m_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr(), masked_m.data_ptr()
        # False: an operand base off a 16-byte boundary, or another current device (plans.py).
        if plan.launch(a_ptr, b_ptr, d_ptr, 0, m_ptr, raw_stream(plan.device)):
            return d
    return _checked_masked(key, a, b, d, masked_m, expected_m, config)


def _checked_masked(
    key: tuple | None,
    a: Tensor,
    b: Tensor,
    d: Tensor,
    masked_m: Tensor,
    expected_m: int,
    config: GemmConfig | None,
) -> Tensor:
    """A plan miss: the full checks, then this signature's plan is built, stored and launched."""
    p = check_masked(a, b, d, masked_m, expected_m)
    if p.empty:
        return d
    d_dtype = "fp32" if d.dtype == torch.float32 else "bf16"
    expected = min(expected_m, p.m)
    desc = GemmDesc(
        "m_grouped_masked", p.m, p.n, p.k, p.num_groups, d_dtype=d_dtype, expected_m=expected
    )
    return _launch(key, _masked_plans, p.device, desc, p.launch_args(), config, a, b, d, masked_m)


def _launch(
    key: tuple | None,
    cache: dict,
    device: int,
    desc: GemmDesc,
    args: tuple[int, ...],
    config: GemmConfig | None,
    a: Tensor,
    b: Tensor,
    d: Tensor,
    info: Tensor,
) -> Tensor:
    """Builds the plan (stored unless the config was forced) and launches it."""
    plan = make_plan(device, desc, args, config)
    if config is None and key is not None:
        cache[key] = plan
    a_ptr, b_ptr, d_ptr, info_ptr = a.data_ptr(), b.data_ptr(), d.data_ptr(), info.data_ptr()
    require_launched(plan.launch(a_ptr, b_ptr, d_ptr, 0, info_ptr, raw_stream(device)), device)
    return d
