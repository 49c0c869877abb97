"""FP8 x FP4 GEMMs: FP8 (E4M3) activations with per-token, per-128-K scales times MXFP4 weights
(E2M1 codes with a UE8M0 scale per 32 of K), BF16 out, on SM90; on SM100 (compiled and
statically checked, not run on hardware) a plan miss goes to fp8_fp4_sm100.py, which takes the
weights only as prepare_mxfp4_weights(b, sfb, arch="sm_100f") and needs power-of-two sfa
(per_token_cast_to_fp8(x, ue8m0=True); any other scale makes its row's outputs NaN).

    fp8_fp4_gemm_nt((a, sfa), (b, sfb), d)                        dense, one weight matrix
    m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices=None, *, offs=None)
    m_grouped_fp8_fp4_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)

d[r, n] = sum_k a[r, k] * sfa[r, k // 128] * e2m1(b[g, n, k]) * 2^(sfb[g, n, k // 32] - 127).

Operands (../shared/DESIGN.md): a float8_e4m3fn [.., M, K] row-major with 16-byte aligned rows;
sfa float32 [.., M, ceil(K / 128)] with any strides (row-major, or DeepGEMM's MN-major
TMA-aligned layout); b uint8 [.., N, K / 2] row-major with 16-byte aligned rows (element 2i in
the low nibble of byte i); sfb uint8 [.., N, K / 32] with unit stride along K / 32; d bfloat16
[.., M, N] row-major with 16-byte aligned rows. K a positive multiple of 32, N of 8. The second
operand is the (b, sfb) tuple of the checkpoint layout or the Mxfp4Weights of
prepare_mxfp4_weights (mxfp4_weights.py: N a multiple of 64, codes [.., N, Kp / 2]); the two take
different kernels, the prepared one the table kernel (every layout, tokens on the wgmma's N).

As the BF16 functions: signature-keyed plans (plans.py), one checker producing every error, a
plan hit re-checks only the 16-byte bases of a, b, d and the current device (the bound launch).
Nothing reads tensor data, so no call syncs: a NaN scale byte (0xFF) in sfb gives NaN output
rows, found only by prepare_mxfp4_weights, which may look.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..families import for_operands
from ..families import sm100_fp8_fp4 as sm100_family
from ..heuristics import ArchSpec, GemmConfig, GemmDesc
from ..launch import checks
from ..launch.device import device_info
from ..launch.plans import PlanCache, raw_stream, signature
from ..launch.problems import Fp8Fp4Problem
from . import fp8_fp4_sm100
from .mxfp4_weights import (
    MXFP4_GROUP,
    SM90_K_BLOCK,
    SM90_ROW_BLOCK,
    Mxfp4Weights,
    describe_operand,
    is_windowed,
    unpack_weights,
)

_FP8 = (torch.float8_e4m3fn,)
_FP32 = (torch.float32,)
_U8 = (torch.uint8,)
_I32 = (torch.int32,)
_BF16 = (torch.bfloat16,)
SFA_BLOCK_K = 128  # K per activation scale
_is_compiling = torch.compiler.is_compiling  # True while Dynamo traces (ops.py)

# One cache per layout, so the layout the caller chose is part of the signature.
_dense_plans = PlanCache()
_indices_plans = PlanCache()
_offs_plans = PlanCache()
_masked_plans = PlanCache()


# ---- the operand pairs ----


def unpack_activations(a: object) -> tuple[Tensor, Tensor]:
    """(a, sfa) of the first operand; TypeError where it is no such pair."""
    if not isinstance(a, (tuple, list)) or len(a) != 2:
        raise TypeError(
            f"a must be a tuple (a, sfa) of the FP8 activations and their scales, got {describe_operand(a)}"
        )
    return a[0], a[1]


# ---- the checks ----


def _check_k(k: int) -> None:
    if k <= 0 or k % MXFP4_GROUP != 0:
        raise ValueError(f"K (a.shape[-1]) must be a positive multiple of {MXFP4_GROUP}, got {k}")


def _check_n(n: int) -> None:
    if n % 8 != 0:
        raise ValueError(f"N (b.shape[-2]) must be a multiple of 8, got {n}")


def _sfb_strides(sfb: Tensor) -> tuple[int, int]:
    """(group, row) strides in bytes of sfb [.., N, K/32], unit stride along K/32 required."""
    shape, strides = sfb.shape, sfb.stride()
    if shape[-1] > 1 and strides[-1] != 1:
        raise ValueError(f"sfb must have unit stride along K/32 (its last dim), got {strides}")
    row = strides[-2] if shape[-2] > 1 else shape[-1]
    if sfb.dim() == 3 and shape[0] > 1:
        return strides[0], row
    return shape[-2] * row, row  # one group


def _check_operands(
    a: Tensor,
    sfa: Tensor,
    b: Tensor,
    sfb: Tensor,
    d: Tensor,
    a_rank: int,
    b_rank: int,
    prepared: bool = False,
) -> tuple[int, int, int]:
    """Types, dtypes, ranks, K, N and every shape; returns (num_groups, n, k). prepared: b and
    sfb in prepare_mxfp4_weights' layout (mxfp4_weights.py)."""
    checks.require_tensor("a", a, _FP8, a_rank)
    checks.require_tensor("sfa", sfa, _FP32, a_rank)
    checks.require_tensor("b", b, _U8, b_rank)
    checks.require_tensor("sfb", sfb, _I32 if prepared else _U8, b_rank)
    checks.require_tensor("d", d, _BF16, a_rank)
    k = a.shape[-1]
    _check_k(k)
    n = b.shape[-2]
    groups = (b.shape[0],) if b_rank == 3 else ()
    if a_rank == 3 and a.shape[0] != b.shape[0]:
        raise ValueError(
            f"b must have shape {(a.shape[0], n, k // 2)} (a's {a.shape[0]} groups), got "
            f"{tuple(b.shape)}"
        )
    _check_n(n)
    if prepared:
        _check_prepared(b, sfb, groups, n, k)
    else:
        checks.require_shape("b", b, (*groups, n, k // 2))
        checks.require_shape("sfb", sfb, (*groups, n, k // MXFP4_GROUP))
    checks.require_shape("sfa", sfa, (*a.shape[:-1], math.ceil(k / SFA_BLOCK_K)))
    checks.require_shape("d", d, (*a.shape[:-1], n))
    return (groups[0] if groups else 1), n, k


def _check_prepared(b: Tensor, sfb: Tensor, groups: tuple[int, ...], n: int, k: int) -> None:
    """The prepared layout's own shape rules: N a multiple of 64, codes [.., N, Kp / 2] (K padded
    to a multiple of 128), the offsets words [.., 2 KB, N] with rows of N words."""
    num_kb = math.ceil(k / SM90_K_BLOCK)
    if n % SM90_ROW_BLOCK != 0:
        raise ValueError(f"N (b.shape[-2]) of prepared weights must be a multiple of 64, got {n}")
    checks.require_shape("b", b, (*groups, n, 64 * num_kb))
    checks.require_shape("sfb", sfb, (*groups, 2 * num_kb, n))
    if b.numel() and (b.stride(-1) != 1 or b.stride(-2) != 64 * num_kb):
        raise ValueError(
            f"prepared b must have its rows back to back (each 64-row block's k-blocks are "
            f"4096 contiguous bytes), got strides {b.stride()}"
        )
    if sfb.numel() and (sfb.stride(-1) != 1 or sfb.stride(-2) != n):
        raise ValueError(f"prepared sfb must have rows of N words, got strides {sfb.stride()}")


def _sfb_prepared_strides(sfb: Tensor) -> tuple[int, int]:
    """(group, plane row) strides in bytes of prepared sfb int32 [.., 2 KB, N]."""
    row = 4 * sfb.shape[-1]
    if sfb.dim() == 3 and sfb.shape[0] > 1:
        return 4 * sfb.stride(0), row
    return sfb.shape[-2] * row, row


def _weight_strides(sfb: Tensor, prepared: bool) -> tuple[int, int]:
    return _sfb_prepared_strides(sfb) if prepared else _sfb_strides(sfb)


def check_dense(a: Tensor, sfa: Tensor, b: Tensor, sfb: Tensor, d: Tensor, *,
                placed: bool = True, prepared: bool = False) -> Fp8Fp4Problem:  # fmt: skip
    """The full checks of `fp8_fp4_gemm_nt`; placed=False leaves out the placement (fake
    tensors)."""
    _, n, k = _check_operands(a, sfa, b, sfb, d, 2, 2, prepared)
    m, ldb = a.shape[0], checks.row_stride("b", b)
    strides = (checks.row_stride("a", a), ldb, n * ldb, checks.row_stride("d", d))
    return _problem(a, sfa, b, sfb, d, (m, m, n, k, 1), strides, {}, 0, placed, prepared)


def check_contiguous(a: Tensor, sfa: Tensor, b: Tensor, sfb: Tensor, d: Tensor,
                     m_indices: Tensor | None, offs: Tensor | None, *, placed: bool = True,
                     prepared: bool = False) -> Fp8Fp4Problem:  # fmt: skip
    """The full checks of the contiguous layouts; placed=False leaves out the placement."""
    num_groups, n, k = _check_operands(a, sfa, b, sfb, d, 2, 3, prepared)
    rows = a.shape[0]
    info = checks.contiguous_group_info(rows, num_groups, m_indices, offs)
    ldb, ldb_group = checks.batched_row_stride("b", b, collapsible=False)
    strides = (checks.row_stride("a", a), ldb, ldb_group, checks.row_stride("d", d))
    sizes = (rows, rows, n, k, num_groups)
    return _problem(a, sfa, b, sfb, d, sizes, strides, info, 0, placed, prepared)


def check_masked(a: Tensor, sfa: Tensor, b: Tensor, sfb: Tensor, d: Tensor, masked_m: Tensor,
                 expected_m: int, *, placed: bool = True,
                 prepared: bool = False) -> Fp8Fp4Problem:  # fmt: skip
    """The full checks of the masked layout; placed=False leaves out the placement."""
    num_groups, n, k = _check_operands(a, sfa, b, sfb, d, 3, 3, prepared)
    max_m = a.shape[1]
    checks.require_index_vector("masked_m", masked_m, num_groups)
    checks.require_expected_m(expected_m, symbolic=not placed)
    lda, _ = checks.batched_row_stride("a", a, collapsible=True)
    ldb, ldb_group = checks.batched_row_stride("b", b, collapsible=False)
    ldd, _ = checks.batched_row_stride("d", d, collapsible=True)
    sizes = (num_groups * max_m, max_m, n, k, num_groups)
    info = {"masked_m": masked_m}
    return _problem(a, sfa, b, sfb, d, sizes, (lda, ldb, ldb_group, ldd), info, max_m, placed,
                    prepared)  # fmt: skip


def _problem(a: Tensor, sfa: Tensor, b: Tensor, sfb: Tensor, d: Tensor, sizes: tuple,
             strides: tuple, group_info: dict, group_rows: int, placed: bool,
             prepared: bool) -> Fp8Fp4Problem:  # fmt: skip
    """A checked call's record: sizes (rows, m, n, k, groups), strides (lda, ldb, ldb_group,
    ldd), the scales' strides (group_rows: a masked group's rows of sfa, else 0) and, placed,
    the device. The kernel's producer copies the scales in aligned 4-byte words: their bases
    are on 16-byte boundaries too, as TMA's."""
    sfa_group, sfa_row, sfa_kb = checks.sfa_strides(sfa)
    sfb_group, sfb_row = _weight_strides(sfb, prepared)
    aligned = {"a": a, "b": b, "d": d, "sfa": sfa, "sfb": sfb}
    device = checks.require_placement(aligned, group_info) if placed else -1
    return Fp8Fp4Problem(*sizes, *strides, sfa_group, sfa_row, sfa_kb, group_rows, sfb_group,
                         sfb_row, device=device)  # fmt: skip


# ---- the public functions ----


def fp8_fp4_gemm_nt(
    a: tuple[Tensor, Tensor],
    b: tuple[Tensor, Tensor] | Mxfp4Weights,
    d: Tensor,
    *,
    config: GemmConfig | None = None,
) -> Tensor:
    """d[m, n] = sum_k (a[m, k] sfa[m, k // 128]) (b[n, k] 2^(sfb[n, k // 32] - 127)), written
    into `d` and returned.

    a: (a float8_e4m3fn [M, K], sfa float32 [M, ceil(K / 128)]); b: (b uint8 [N, K / 2], sfb
    uint8 [N, K / 32]) or the Mxfp4Weights of prepare_mxfp4_weights; d: bfloat16 [M, N]. Any M;
    K a positive multiple of 32, N of 8. Never synchronizes with the host. `config` forces a
    kernel config (tests, benchmarks; eager only). Under torch.compile the call is the custom op
    `moegemm::fp8_fp4_gemm_nt`.
    """
    if _is_compiling():
        checks.refuse_config_when_compiling(config)
        return _as_op("fp8_fp4_gemm_nt", a, b, d)
    key, launched = _entry(_dense_plans, config, a, b, d, None)
    if launched:
        return d
    a_, sfa = unpack_activations(a)
    if _on_sm100(a_):
        return fp8_fp4_sm100.call("bf16_gemm_nt", key, _dense_plans, config, a_, sfa, b, d)
    b_, sfb, prepared = unpack_weights(b)
    p = check_dense(a_, sfa, b_, sfb, d, prepared=prepared)
    if p.empty:
        return d
    desc = _desc("bf16_gemm_nt", p, b)
    return _launch(key, _dense_plans, p, desc, config, a_, sfa, b_, sfb, d, None)


def m_grouped_fp8_fp4_gemm_nt_contiguous(
    a: tuple[Tensor, Tensor],
    b: tuple[Tensor, Tensor] | Mxfp4Weights,
    d: Tensor,
    m_indices: Tensor | None = None,
    *,
    offs: Tensor | None = None,
    config: GemmConfig | None = None,
) -> Tensor:
    """d[r] = a[r] @ b[group(r)]^T (scaled as fp8_fp4_gemm_nt) for the rows of every group,
    written into `d` and returned.

    a: (a float8_e4m3fn [M, K], sfa float32 [M, ceil(K / 128)]); b: (b uint8 [G, N, K / 2], sfb
    uint8 [G, N, K / 32]) or an Mxfp4Weights; d: bfloat16 [M, N]. Exactly one of m_indices
    (int32 [M], the group of each row, -1 for padding rows, segments aligned to
    get_mk_alignment_for_contiguous_layout()) or offs (int32 [G], cumulative end rows; rows past
    offs[-1] are never written), as m_grouped_bf16_gemm_nt_contiguous. Under torch.compile the
    call is the custom op `moegemm::m_grouped_fp8_fp4_gemm_nt_contiguous`.
    """
    if _is_compiling():
        checks.refuse_config_when_compiling(config)
        return _as_op("m_grouped_fp8_fp4_gemm_nt_contiguous", a, b, d, m_indices, offs)
    if offs is None:
        info, cache = m_indices, _indices_plans
    else:  # with both given, info = None: no signature, the full checks refuse the call
        info, cache = (offs if m_indices is None else None), _offs_plans
    key, launched = _entry(cache, config, a, b, d, info)
    if launched:
        return d
    a_, sfa = unpack_activations(a)
    if _on_sm100(a_):
        cache = _offs_plans if offs is not None else _indices_plans
        return fp8_fp4_sm100.call(
            "contiguous", key, cache, config, a_, sfa, b, d, m_indices=m_indices, offs=offs
        )
    b_, sfb, prepared = unpack_weights(b)
    p = check_contiguous(a_, sfa, b_, sfb, d, m_indices, offs, prepared=prepared)
    if p.empty:
        return d
    if m_indices is not None:
        desc = _desc("m_grouped_contiguous", p, b)
        return _launch(key, _indices_plans, p, desc, config, a_, sfa, b_, sfb, d, m_indices)
    desc = _desc("m_grouped_offsets", p, b, math.ceil(p.rows / p.num_groups))
    return _launch(key, _offs_plans, p, desc, config, a_, sfa, b_, sfb, d, offs)


def m_grouped_fp8_fp4_gemm_nt_masked(
    a: tuple[Tensor, Tensor],
    b: tuple[Tensor, Tensor] | Mxfp4Weights,
    d: Tensor,
    masked_m: Tensor,
    expected_m: int,
    *,
    config: GemmConfig | None = None,
) -> Tensor:
    """d[g, :masked_m[g]] = a[g, :masked_m[g]] @ b[g]^T (scaled as fp8_fp4_gemm_nt) for every
    group; rows past masked_m[g] are never written.

    a: (a float8_e4m3fn [G, max_m, K], sfa float32 [G, max_m, ceil(K / 128)]); b: (b uint8
    [G, N, K / 2], sfb uint8 [G, N, K / 32]) or an Mxfp4Weights; d: bfloat16 [G, max_m, N];
    masked_m: int32 [G] on the device (clamped to [0, max_m]); expected_m: the rows a group
    typically holds (a positive int that only steers the kernel choice). Under torch.compile the
    call is the custom op `moegemm::m_grouped_fp8_fp4_gemm_nt_masked`.
    """
    if _is_compiling():
        checks.refuse_config_when_compiling(config)
        return _as_op("m_grouped_fp8_fp4_gemm_nt_masked", a, b, d, masked_m, expected_m)
    # expected_m steers the choice: part of the signature (a plain int: 2.0 == 2, True == 1).
    key, launched = None, False
    if type(expected_m) is int:
        key, launched = _entry(_masked_plans, config, a, b, d, masked_m, expected_m)
    if launched:
        return d
    a_, sfa = unpack_activations(a)
    if _on_sm100(a_):
        return fp8_fp4_sm100.call(
            "m_grouped_masked", key, _masked_plans, config, a_, sfa, b, d,
            masked_m=masked_m, expected_m=expected_m,
        )  # fmt: skip
    b_, sfb, prepared = unpack_weights(b)
    p = check_masked(a_, sfa, b_, sfb, d, masked_m, expected_m, prepared=prepared)
    if p.empty:
        return d
    desc = _desc("m_grouped_masked", p, b, min(expected_m, p.m))
    return _launch(key, _masked_plans, p, desc, config, a_, sfa, b_, sfb, d, masked_m)


def _device_arch(t: object) -> ArchSpec | None:
    """The arch of the CUDA device holding `t`; None off CUDA."""
    if not isinstance(t, Tensor) or t.device.type != "cuda":
        return None
    try:
        index = t.device.index if t.device.index is not None else torch.cuda.current_device()
        return device_info(index).arch
    except RuntimeError:  # no driver (fake tensors in tests): the SM90 path reports it
        return None


def _on_sm100(a: object) -> bool:
    """Whether this call's activations sit on a device whose FP8 x FP4 family is SM100's, which
    fp8_fp4_sm100 checks and plans (asked on plan misses only)."""
    arch = _device_arch(a)
    return arch is not None and for_operands(arch, "fp8_fp4") is sm100_family.FAMILY


def _as_op(name: str, a: object, b: object, d: Tensor, *args: object) -> Tensor:
    """While Dynamo traces: the call as its custom op (ops.py), the operand pairs flattened and
    the weight layout last."""
    a_, sfa = unpack_activations(a)
    b_, sfb, prepared = unpack_weights(b)
    getattr(torch.ops.moegemm, name)(a_, sfa, b_, sfb, d, *args, prepared, is_windowed(b))
    return d


def _entry(
    cache: PlanCache, config: GemmConfig | None, a: object, b: object, d: Tensor,
    info: Tensor | None, *extra: object,
) -> tuple[tuple | None, bool]:  # fmt: skip
    """The entry protocol's first half (plans.py): (the call's plan key, whether a plan hit
    launched it). The key is None where the operands are not pairs of strided tensors; a hit
    launches nothing (False) where an operand base is off a 16-byte boundary or another device
    is current: the call then takes the full checks."""
    try:
        a_, sfa = unpack_activations(a)
        b_, sfb, prepared = unpack_weights(b)
    except TypeError:
        return None, False
    key = signature(a_, sfa, b_, sfb, d, info)
    if key is None:
        return None, False
    key += (prepared, is_windowed(b), *extra)
    plan = cache.find(key, config)
    if plan is None:
        return key, False
    return key, plan.launch(*pointers(a_, sfa, b_, sfb, d, info), raw_stream(plan.device))


def _desc(kind: str, p: Fp8Fp4Problem, b: object, expected_m: int = 0) -> GemmDesc:
    """The desc of a checked call whose second operand is `b`."""
    weights = "prepared" if unpack_weights(b)[2] else "raw"
    return GemmDesc(
        kind, p.m, p.n, p.k, p.num_groups, ab_dtype="fp8_fp4", expected_m=expected_m,
        weights=weights, windowed=is_windowed(b),
    )  # fmt: skip


def _launch(
    key: tuple | None,
    cache: PlanCache,
    p: Fp8Fp4Problem,
    desc: GemmDesc,
    config: GemmConfig | None,
    a: Tensor,
    sfa: Tensor,
    b: Tensor,
    sfb: Tensor,
    d: Tensor,
    info: Tensor | None,
) -> Tensor:
    """A plan miss after the full checks: this signature's plan built, stored and launched."""
    cache.launch(key, desc, p, pointers(a, sfa, b, sfb, d, info), config)
    return d


def pointers(
    a: Tensor, sfa: Tensor, b: Tensor, sfb: Tensor, d: Tensor, info: Tensor | None
) -> tuple[int, ...]:
    """An FP8 x FP4 launch's pointers, in the launchers' order."""
    info_ptr = 0 if info is None else info.data_ptr()
    return a.data_ptr(), b.data_ptr(), d.data_ptr(), sfa.data_ptr(), sfb.data_ptr(), info_ptr
