"""Problem records: what a checked call launches, by name.

Each record's fields are named as the `_C` launchers name their bound integers (csrc's
`kArgNames`), so a plan fills a launcher's `bind_args` from it by name (plans.bound_integers)
and no caller keeps an argument order; `device` is the CUDA device index (-1 unplaced: the
custom ops' fake implementations). One record serves every launcher of a family: a field one
launcher does not bind (a dense call's `ldc`, the fused layer's `d_cols`) is left at its default.
"""

from __future__ import annotations

from typing import NamedTuple


class GemmProblem(NamedTuple):
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
    ldc: int = 0  # C's row stride, dense calls with C
    d_cols: int = 0  # the fused layer's D columns (SwiGLU writes n / 2)
    device: int = -1

    @property
    def empty(self) -> bool:
        return self.rows == 0 or self.n == 0 or self.num_groups == 0


class Fp8Fp4Problem(NamedTuple):
    """An FP8 x FP4 GEMM, dense or m-grouped (rows and m as GemmProblem). Strides in elements of
    each tensor: bytes for FP8 a and packed FP4 b; floats for sfa; bytes of sfb (SM90) or 32-bit
    scale words (SM100, which binds no sfb_stride_row)."""

    rows: int
    m: int
    n: int
    k: int
    num_groups: int
    lda: int
    ldb: int
    ldb_group: int
    ldd: int
    sfa_stride_group: int  # 0 but for masked
    sfa_stride_row: int
    sfa_stride_kb: int
    sfa_group_rows: int  # rows of a group's sfa slab (masked: max_m), else 0
    sfb_stride_group: int
    sfb_stride_row: int = 0
    device: int = -1

    @property
    def empty(self) -> bool:
        return self.rows == 0 or self.n == 0 or self.num_groups == 0


class KGroupedProblem(NamedTuple):
    """A k-grouped BF16 GEMM: [G, m, n] FP32 out, reductions over each group's rows of
    num_tokens."""

    m: int
    n: int
    num_tokens: int
    num_groups: int
    lda: int
    ldb: int
    device: int = -1
