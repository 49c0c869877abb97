"""Problem records: what a checked call launches, by name.

Each record's fields are named as the `_C` launchers name their bound integers (csrc's
`kArgNames`), so a plan fills a launcher's `bind_args` from it by name (plans.bound_integers)
and no caller keeps an argument order. `device` is the CUDA device index (-1 unplaced: the
custom ops' fake implementations). One record serves every launcher of a family: a field one
launcher does not bind (a dense call's `ldc`, the fused layer's `d_cols`) keeps its default.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class GemmProblem:
    """A BF16 GEMM, dense or m-grouped (rows: A/D rows in all, masked: groups * max_m; m: what
    the scheduler reads as M, masked: max_m). Strides in elements."""

    rows: int
    m: int
    n: int
    k: int
    num_groups: int
    lda: int
    ldb: int
    ldb_group: int
    ldd: int
    ldc: int = field(default=0, kw_only=True)  # C's row stride, dense calls with C
    d_cols: int = field(default=0, kw_only=True)  # the fused layer's D columns (SwiGLU: n / 2)
    device: int = field(default=-1, kw_only=True)

    @property
    def empty(self) -> bool:
        return self.rows == 0 or self.n == 0 or self.num_groups == 0


@dataclass(frozen=True, slots=True)
class Fp8Fp4Problem(GemmProblem):
    """An FP8 x FP4 GEMM: GemmProblem's sizes (strides in elements of each tensor: bytes for
    FP8 a and packed FP4 b), then the scales': floats for sfa, bytes of sfb (SM90) or 32-bit
    scale words (SM100, which binds no sfb_stride_row)."""

    sfa_stride_group: int  # 0 but for masked
    sfa_stride_row: int
    sfa_stride_kb: int
    sfa_group_rows: int  # rows of a group's sfa slab (masked: max_m), else 0
    sfb_stride_group: int
    sfb_stride_row: int = 0


@dataclass(frozen=True, slots=True)
class KGroupedProblem:
    """A k-grouped BF16 GEMM: [G, m, n] FP32 out, reductions over each group's rows of
    num_tokens."""

    m: int
    n: int
    num_tokens: int
    num_groups: int
    lda: int
    ldb: int
    device: int = field(default=-1, kw_only=True)
