"""The SM100 side of the FP8 x FP4 functions (fp8_fp4.py dispatches here on a plan miss when
the operands sit on an SM100 device): checks and plans for the tcgen05 kernel
(include/moegemm/impls/sm100_fp8_fp4_grouped_gemm.cuh). Compiled and statically checked, not
run on hardware.

What SM100 takes beyond SM90's rules:
- the weights only as prepare_mxfp4_weights(b, sfb, arch="sm_100f") (Mxfp4Weights with arch
  "sm_100f": codes [.., N, Kp / 2] padded to Kp = K rounded up to 128, scale words
  [.., Kp / 128, 4 Np]); a raw (b, sfb) tuple or Hopper-prepared weights are a ValueError that
  names the call to make;
- sfa of powers of two (per_token_cast_to_fp8(x, ue8m0=True)): the kernel feeds each per-128
  scale to the tensor core as a UE8M0 scale of each of its four 32-blocks. It is not checked on
  the host (no sync): a scale that is not a positive normal power of two makes that token row's
  outputs NaN on the device.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..heuristics import GemmConfig, GemmDesc
from ..launch import checks
from ..launch.plans import PlanCache
from ..launch.problems import Fp8Fp4Problem
from .mxfp4_weights import MXFP4_GROUP, SM100_ARCH, SM100_K_BLOCK, SM100_ROW_CHUNK, Mxfp4Weights

SFA_BLOCK_K = 128
PREPARE_HINT = (
    'SM100 takes MXFP4 weights only as moegemm.prepare_mxfp4_weights(b, sfb, arch="sm_100f") '
    "(once, at load time)"
)


def require_sm100_weights(b: object) -> Mxfp4Weights:
    """The SM100-prepared weights, or ValueError saying what to call."""
    if isinstance(b, Mxfp4Weights) and b.arch == SM100_ARCH:
        return b
    if isinstance(b, Mxfp4Weights):
        got = "weights prepared for sm_90a"
    elif isinstance(b, (tuple, list)):
        got = "a raw (b, sfb) tuple"
    else:
        got = type(b).__name__
    raise ValueError(f"{PREPARE_HINT}; got {got}")


def _check(a: Tensor, sfa: Tensor, w: Mxfp4Weights, d: Tensor, a_rank: int, b_rank: int):
    b, sfb = w.b, w.sfb
    checks.require_tensor("a", a, (torch.float8_e4m3fn,), a_rank)
    checks.require_tensor("sfa", sfa, (torch.float32,), a_rank)
    checks.require_tensor("b", b, (torch.uint8,), b_rank)
    checks.require_tensor("sfb", sfb, (torch.uint8,), b_rank)
    checks.require_tensor("d", d, (torch.bfloat16,), a_rank)
    k = a.shape[-1]
    if k <= 0 or k % MXFP4_GROUP:
        raise ValueError(f"K (a.shape[-1]) must be a positive multiple of {MXFP4_GROUP}, got {k}")
    kp = math.ceil(k / SM100_K_BLOCK) * SM100_K_BLOCK
    n = b.shape[-2]
    if n % 8:
        raise ValueError(f"N (b.shape[-2]) must be a multiple of 8, got {n}")
    np_ = math.ceil(n / SM100_ROW_CHUNK) * SM100_ROW_CHUNK
    groups = (b.shape[0],) if b_rank == 3 else ()
    if a_rank == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(f"b must have {a.shape[0]} groups (a's), got {tuple(b.shape)}")
    checks.require_shape("b", b, (*groups, n, kp // 2))
    checks.require_shape("sfb", sfb, (*groups, kp // SM100_K_BLOCK, 4 * np_))
    if not sfb.is_contiguous():
        raise ValueError("sfb (SM100 scale words) must be contiguous, as prepared")
    checks.require_shape("sfa", sfa, (*a.shape[:-1], math.ceil(k / SFA_BLOCK_K)))
    checks.require_shape("d", d, (*a.shape[:-1], n))
    if b_rank == 3:
        ldb, ldb_group = checks.batched_row_stride("b", b, collapsible=False)
    else:
        ldb, ldb_group = checks.row_stride("b", b), n * b.stride(0)
    if ldb % 32 or ldb_group % 32:
        raise ValueError(f"b's rows must be 32-byte strided (as prepared), got {b.stride()}")
    sfb_group = (kp // SM100_K_BLOCK) * np_
    return (groups[0] if groups else 1), n, k, ldb, ldb_group, sfb_group


def check_dense(a, sfa, w, d, *, placed=True) -> Fp8Fp4Problem:
    _, n, k, ldb, ldb_group, sfb_group = _check(a, sfa, w, d, 2, 2)
    m = a.shape[0]
    _, sfa_row, sfa_kb = checks.sfa_strides(sfa)
    aligned = {"a": a, "b": w.b, "d": d, "sfa": sfa, "sfb": w.sfb}
    device = checks.require_placement(aligned, {}) if placed else -1
    return Fp8Fp4Problem(
        m, m, n, k, 1, checks.row_stride("a", a), ldb, ldb_group, checks.row_stride("d", d),
        0, sfa_row, sfa_kb, 0, sfb_group, device=device,
    )  # fmt: skip


def check_contiguous(a, sfa, w, d, m_indices, offs, *, placed=True) -> Fp8Fp4Problem:
    groups, n, k, ldb, ldb_group, sfb_group = _check(a, sfa, w, d, 2, 3)
    rows = a.shape[0]
    info = checks.contiguous_group_info(rows, groups, m_indices, offs)
    _, sfa_row, sfa_kb = checks.sfa_strides(sfa)
    aligned = {"a": a, "b": w.b, "d": d, "sfa": sfa, "sfb": w.sfb}
    device = checks.require_placement(aligned, info) if placed else -1
    return Fp8Fp4Problem(
        rows, rows, n, k, groups, checks.row_stride("a", a), ldb, ldb_group, checks.row_stride("d", d),
        0, sfa_row, sfa_kb, 0, sfb_group, device=device,
    )  # fmt: skip


def check_masked(a, sfa, w, d, masked_m, expected_m, *, placed=True) -> Fp8Fp4Problem:
    groups, n, k, ldb, ldb_group, sfb_group = _check(a, sfa, w, d, 3, 3)
    max_m = a.shape[1]
    checks.require_index_vector("masked_m", masked_m, groups)
    checks.require_expected_m(expected_m)
    lda, _ = checks.batched_row_stride("a", a, collapsible=True)
    ldd, _ = checks.batched_row_stride("d", d, collapsible=True)
    sfa_group, sfa_row, sfa_kb = checks.sfa_strides(sfa)
    aligned = {"a": a, "b": w.b, "d": d, "sfa": sfa, "sfb": w.sfb}
    device = checks.require_placement(aligned, {"masked_m": masked_m}) if placed else -1
    return Fp8Fp4Problem(
        groups * max_m, max_m, n, k, groups, lda, ldb, ldb_group, ldd,
        sfa_group, sfa_row, sfa_kb, max_m, sfb_group, device=device,
    )  # fmt: skip


def call(
    kind: str,
    key: tuple | None,
    cache: PlanCache,
    config: GemmConfig | None,
    a: Tensor,
    sfa: Tensor,
    b: object,
    d: Tensor,
    *,
    m_indices: Tensor | None = None,
    offs: Tensor | None = None,
    masked_m: Tensor | None = None,
    expected_m: int = 0,
) -> Tensor:
    """A plan miss on an SM100 device: the checks above, then the plan (stored in the caller's
    cache under the caller's key: a later hit launches it as any other)."""
    w = require_sm100_weights(b)
    info: Tensor | None = None
    if kind == "bf16_gemm_nt":
        p = check_dense(a, sfa, w, d)
        desc_kind, exp = kind, 0
    elif kind == "m_grouped_masked":
        p = check_masked(a, sfa, w, d, masked_m, expected_m)
        desc_kind, exp, info = kind, min(expected_m, p.m), masked_m
    else:
        p = check_contiguous(a, sfa, w, d, m_indices, offs)
        if m_indices is not None:
            desc_kind, exp, info = "m_grouped_contiguous", 0, m_indices
        else:
            desc_kind, exp, info = "m_grouped_offsets", math.ceil(p.rows / p.num_groups), offs
    if p.empty:
        return d
    desc = GemmDesc(
        desc_kind, p.m, p.n, p.k, p.num_groups, ab_dtype="fp8_fp4", expected_m=exp,
        weights="prepared",
    )  # fmt: skip
    ptrs = (a.data_ptr(), w.b.data_ptr(), d.data_ptr(), sfa.data_ptr(), w.sfb.data_ptr())
    cache.launch(key, desc, p, (*ptrs, 0 if info is None else info.data_ptr()), config)
    return d
