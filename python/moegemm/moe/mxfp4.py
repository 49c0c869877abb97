"""The fused MoE layer with MXFP4 experts (FP8 activations x MXFP4 weights, the FP8 x FP4
kernels): five launches per fused_moe call.

1. route and gather, the gathered rows quantized to FP8 per token per 128 of H on the way
   (moe/route_gather.cuh with kFp8: per_token_cast_to_fp8's rule and bits);
2. GEMM1 (FP8 x FP4, offsets layout) with the SwiGLU epilogue: h [S, I] BF16;
3. h quantized to FP8 per token per 128 of I (moe/quantize_rows.cuh), rows below offs[E - 1];
4. GEMM2 (FP8 x FP4) with the RowScale epilogue (bias, routing weight): y [S, H] BF16;
5. combine, as for BF16 experts.
The intermediate goes through BF16 and a quantization launch instead of being written as FP8 by
GEMM1's epilogue: a per-128-column scale spans 256 of w13's rows, more than one tile of these
kernels holds (192 at most), so the tile alone cannot find its amax. fused_moe_masked
quantizes x and h the same way around its two GEMMs (three launches and two quantizations).

On SM100 (compiled and statically checked, not run on hardware) the same launches run the
tcgen05 FP8 x FP4 kernel: the experts in the SM100 preparation (prepare_moe_weights on the
GPU, w2 from prepare_mxfp4_weights(..., arch="sm_100f")) and the activations' scales powers
of two (the quantizing kernels built for sm_100f round them up, as ue8m0=True does).
"""

from __future__ import annotations

import math

import torch

from ..api.mxfp4_weights import (
    SM90_ARCH,
    SM90_K_BLOCK,
    SM100_ARCH,
    SM100_K_BLOCK,
    SM100_ROW_CHUNK,
    Mxfp4Weights,
    unpack_weights,
)
from ..heuristics import GemmDesc
from ..jit.codegen import (
    MOE_QUANTIZE_THREADS,
    moe_quantize_rows_spec,
)
from ..jit.runtime import load_kernel
from ..launch import checks, plans
from ..launch.device import arch_for_device
from ..launch.problems import Fp8Fp4Problem
from .launches import combine_launch, route_launch
from .weights import EPILOGUE_OF, PreparedW13
from .workspace import FP8_BLOCK, MoEWorkspace

QUANTIZE_CTAS_PER_SM = 8


def check_w2_mxfp4(w2: object, e: int, h: int, i: int) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(blocks [E, H, I/2], scales [E, H, I/32], prepared) of MXFP4 w2: a (blocks, scales) pair
    (gpt-oss's [E, H, I/32, 16] blocks view accepted) or an Mxfp4Weights; SM100-prepared w2 as
    (codes [E, H, Ip/2], scale words [E, Ip/128, 4 Hp], True)."""
    if isinstance(w2, Mxfp4Weights) and w2.arch == SM100_ARCH:
        return _check_w2_sm100(w2, e, h, i)
    if isinstance(w2, Mxfp4Weights) and w2.prepared:
        return _check_w2_prepared(w2, e, h, i)
    b, sfb, prepared = unpack_weights(w2)
    for name, t in (("w2 blocks", b), ("w2 scales", sfb)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.uint8:
            raise TypeError(f"{name} must be a uint8 tensor, got {type(t).__name__}")
    if b.dim() == 4:
        b = b.reshape(b.shape[0], b.shape[1], -1)
    if i % 32:
        raise ValueError(f"MXFP4 w2 needs I a multiple of 32, got {i}")
    checks.require_shape("w2 blocks", b, (e, h, i // 2))
    checks.require_shape("w2 scales", sfb, (e, h, i // 32))
    checks.require_contiguous("w2 blocks", b)
    checks.require_contiguous("w2 scales", sfb)
    return b, sfb, prepared


def _check_w2_prepared(w2: Mxfp4Weights, e: int, h: int, i: int) -> tuple:
    """SM90-prepared w2 (prepare_mxfp4_weights): codes [E, H, Ip/2], offsets words int32
    [E, 2 Ip/128, H], both contiguous."""
    if i % 32:
        raise ValueError(f"MXFP4 w2 needs I a multiple of 32, got {i}")
    check_prepared_mxfp4("w2", w2.b, w2.sfb, e, h, i)
    return w2.b, w2.sfb, True


def check_prepared_mxfp4(name: str, codes: object, words: object, e: int, n: int, k: int) -> None:
    """SM90-prepared experts of [e, n, k] weights as prepare_mxfp4_weights returns them: codes
    uint8 [e, n, Kp/2] and offsets words int32 [e, 2 Kp/128, n], contiguous (the layer's launch
    integers assume it)."""
    kb = -(-k // SM90_K_BLOCK)
    checks.require_tensor(f"{name} codes (prepared)", codes, (torch.uint8,), 3)
    checks.require_tensor(f"{name} offsets (prepared)", words, (torch.int32,), 3)
    checks.require_shape(f"{name} codes (prepared)", codes, (e, n, 64 * kb))
    checks.require_shape(f"{name} offsets (prepared)", words, (e, 2 * kb, n))
    checks.require_contiguous(f"{name} codes (prepared)", codes)
    checks.require_contiguous(f"{name} offsets (prepared)", words)


def _padded(x: int, to: int) -> int:
    return -(-x // to) * to


def _check_w2_sm100(w2: Mxfp4Weights, e: int, h: int, i: int) -> tuple:
    if i % 32:
        raise ValueError(f"MXFP4 w2 needs I a multiple of 32, got {i}")
    ip = _padded(i, SM100_K_BLOCK)
    checks.require_shape("w2 codes (SM100)", w2.b, (e, h, ip // 2))
    checks.require_shape("w2 scale words (SM100)", w2.sfb, (e, ip // SM100_K_BLOCK,
                                                            4 * _padded(h, SM100_ROW_CHUNK)))  # fmt: skip
    checks.require_contiguous("w2 codes (SM100)", w2.b)
    checks.require_contiguous("w2 scale words (SM100)", w2.sfb)
    return w2.b, w2.sfb, True


def w2_arch(w2: object) -> str:
    """The GPU an MXFP4 w2 was prepared for (a raw pair: Hopper's kernels, the only ones that
    take it)."""
    return w2.arch if isinstance(w2, Mxfp4Weights) else SM90_ARCH


def require_weights_for(arch: str, w13: PreparedW13) -> None:
    """ValueError where the experts were prepared for another GPU than the call runs on."""
    if arch != w13.mxfp4_arch:
        raise ValueError(
            f"the MXFP4 experts were prepared for {w13.mxfp4_arch} and the call runs on {arch}: "
            f"prepare them with prepare_moe_weights(..., arch={arch!r}) and, for w2, "
            f"prepare_mxfp4_weights(blocks, scales, arch={arch!r})"
        )


def _form(prepared: bool) -> str:
    return "prepared" if prepared else "raw"


def fp8_gemm_problem(rows: int, m: int, n: int, k: int, e: int, lda: int, ldd: int,
                     arch: str = SM90_ARCH, prepared: bool = False) -> Fp8Fp4Problem:  # fmt: skip
    """The FP8 x FP4 MoE launch of row-major FP8 A (lda bytes) with contiguous per-128 scales
    [rows, ceil(k / 128)], contiguous MXFP4 B and its scales, D with ldd columns. B on SM90:
    [E, n, k/2] and scales [E, n, k/32], or prepared: codes [E, n, Kp/2] and offsets words int32
    [E, 2 Kp/128, n]; on SM100 (its preparation): codes [E, n, Kp/2] and scale words
    [E, Kp/128, Np] (Kp, Np: k, n rounded up to 128)."""
    blocks = -(-k // FP8_BLOCK)
    if arch == SM90_ARCH and prepared:
        kp = _padded(k, SM90_K_BLOCK)
        sfb_group, sfb_row, ldb = 2 * (kp // SM90_K_BLOCK) * n * 4, 4 * n, kp // 2
    elif arch == SM100_ARCH:
        kp, np_ = _padded(k, SM100_K_BLOCK), _padded(n, SM100_ROW_CHUNK)
        sfb_group, sfb_row, ldb = kp // SM100_K_BLOCK * np_, 0, kp // 2  # 32-bit words
    else:
        sfb_group, sfb_row, ldb = n * k // 32, k // 32, k // 2
    return Fp8Fp4Problem(rows, m, n, k, e, lda, ldb, n * ldb, ldd, sfa_stride_group=0,
                         sfa_stride_row=blocks, sfa_stride_kb=1, sfa_group_rows=0,
                         sfb_stride_group=sfb_group, sfb_stride_row=sfb_row)  # fmt: skip


def mxfp4_layer_gemms(sizes: dict[str, int], w13: PreparedW13, w2_prepared: bool,
                      w2_windowed: bool = False) -> tuple:  # fmt: skip
    """(desc, problem) of the two GEMMs of an MXFP4 fused_moe signature (w2_windowed: w2 is
    windowed prepared weights, Mxfp4Weights.windowed)."""
    t, k, e, h, i = (sizes[key] for key in ("tokens", "top_k", "experts", "hidden",
                                            "intermediate"))  # fmt: skip
    slots = t * k
    expected = max(1, math.ceil(slots / e))
    return _gemm_pair("m_grouped_offsets", slots, slots, e, h, i, expected, w13, w2_prepared,
                      w2_windowed)  # fmt: skip


def mxfp4_masked_gemms(e: int, max_m: int, h: int, i: int, expected: int, w13: PreparedW13,
                       w2_prepared: bool, w2_windowed: bool = False) -> tuple:  # fmt: skip
    """(desc, problem) of the two GEMMs of an MXFP4 fused_moe_masked signature."""
    return _gemm_pair("m_grouped_masked", e * max_m, max_m, e, h, i, expected, w13, w2_prepared,
                      w2_windowed)  # fmt: skip


def _gemm_pair(kind: str, rows: int, m: int, e: int, h: int, i: int, expected: int,
               w13: PreparedW13, w2_prepared: bool, w2_windowed: bool) -> tuple:  # fmt: skip
    """GEMM1 (x @ w13^T with the activation's epilogue, i of 2i columns out) and GEMM2 (h @ w2^T
    scaled by the routing weights) on FP8 rows, each weight in its own layout."""
    sm90 = w13.mxfp4_arch == SM90_ARCH
    d1 = GemmDesc(kind, m, 2 * i, h, e, ab_dtype="fp8_fp4", expected_m=expected,
                  weights=_form(w13.mxfp4_prepared), windowed=sm90 and w13.mxfp4_windowed,
                  epilogue=EPILOGUE_OF[w13.activation])  # fmt: skip
    d2 = GemmDesc(kind, m, h, i, e, ab_dtype="fp8_fp4", expected_m=expected,
                  weights=_form(w2_prepared), windowed=sm90 and w2_prepared and w2_windowed,
                  epilogue="row_scale")  # fmt: skip
    arch = w13.mxfp4_arch
    return (
        (d1, fp8_gemm_problem(rows, m, 2 * i, h, e, h, i, arch, w13.mxfp4_prepared)),
        (d2, fp8_gemm_problem(rows, m, h, i, e, i, h, arch, w2_prepared)),
    )


def quantize_launch(device: int, rows: int, cols: int, ld_src: int, group_rows: int = 0):
    """The bound quantization of `rows` BF16 rows; group_rows > 0: the masked layout, whose
    launch passes the per-group counts as row_bound (rows past a group's count are skipped)."""
    from .. import _C

    arch = arch_for_device(device)
    items = rows * -(-cols // FP8_BLOCK)
    ctas = max(
        1, min(-(-items // (MOE_QUANTIZE_THREADS // 16)), arch.num_sms * QUANTIZE_CTAS_PER_SM)
    )
    launcher = _C.MoeQuantizeRowsLauncher(
        load_kernel(moe_quantize_rows_spec(arch.name)), 1, 1, 1, ctas, MOE_QUANTIZE_THREADS, 0,
        1, 1,
    )  # fmt: skip
    return plans.bind(launcher, device, {"rows": rows, "cols": cols, "ld_src": ld_src,
                                         "group_rows": group_rows})  # fmt: skip


class Mxfp4LayerPlan:
    """The five bound launches of one MXFP4 fused_moe signature."""

    def __init__(self, device: int, p: dict[str, int], w13: PreparedW13, w2_prepared: bool,
                 w2_windowed: bool = False):  # fmt: skip
        slots, i = p["tokens"] * p["top_k"], p["intermediate"]
        self.route = route_launch(device, p, fp8=True)
        (d1, p1), (d2, p2) = mxfp4_layer_gemms(p, w13, w2_prepared, w2_windowed)
        self.gemm1 = plans.make_plan(device, d1, p1)
        self.quantize = quantize_launch(device, slots, i, i)
        self.gemm2 = plans.make_plan(device, d2, p2)
        self.combine = combine_launch(device, p)
        self.configs = (self.gemm1.config, self.gemm2.config)

    def run(self, x, w13: PreparedW13, w2b, w2s, w2_bias, ids, weights, out, ws: MoEWorkspace):
        stream = plans.raw_stream(x.device.index)
        bias13 = 0 if w13.bias is None else w13.bias.data_ptr()
        bias2 = 0 if w2_bias is None else w2_bias.data_ptr()
        offs = ws.offs.data_ptr()
        last_end = offs + 4 * (ws.num_experts - 1)
        xs, sfa_x = ws.x_sorted.data_ptr(), ws.sfa_x.data_ptr()
        launched = self.route(
            x.data_ptr(), xs, ids.data_ptr(), weights.data_ptr(), offs, ws.row_slot.data_ptr(),
            ws.row_weight.data_ptr(), ws.slot_row.data_ptr(), sfa_x, stream,
        )  # fmt: skip
        launched &= self.gemm1.launch(
            xs, w13.weight.data_ptr(), ws.h.data_ptr(), sfa_x, w13.scales.data_ptr(), bias13, 0,
            offs, stream,
        )  # fmt: skip
        launched &= self.quantize(
            ws.h.data_ptr(), ws.h8.data_ptr(), ws.sfa_h.data_ptr(), last_end, stream
        )
        launched &= self.gemm2.launch(
            ws.h8.data_ptr(), w2b.data_ptr(), ws.y.data_ptr(), ws.sfa_h.data_ptr(),
            w2s.data_ptr(), bias2, ws.row_weight.data_ptr(), offs, stream,
        )  # fmt: skip
        launched &= self.combine(ws.y.data_ptr(), out.data_ptr(), ws.slot_row.data_ptr(), stream)
        plans.require_launched(launched, x.device.index)


class Mxfp4MaskedPlan:
    """quantize x, GEMM1, quantize h, GEMM2 for one MXFP4 fused_moe_masked signature."""

    def __init__(self, device: int, e: int, max_m: int, h: int, i: int, expected: int,
                 w13: PreparedW13, w2_prepared: bool, w2_windowed: bool = False) -> None:  # fmt: skip
        rows = e * max_m
        (d1, p1), (d2, p2) = mxfp4_masked_gemms(e, max_m, h, i, expected, w13, w2_prepared,
                                                w2_windowed)  # fmt: skip
        # Only the rows masked_m holds are quantized: a decode step's few, not E x max_m.
        self.quantize_x = quantize_launch(device, rows, h, h, group_rows=max_m)
        self.gemm1 = plans.make_plan(device, d1, p1)
        self.quantize_h = quantize_launch(device, rows, i, i, group_rows=max_m)
        self.gemm2 = plans.make_plan(device, d2, p2)

    def run(self, x, masked_m, w13: PreparedW13, w2b, w2s, w2_bias, out, bufs: dict,
            row_weight_ptr: int = 0) -> None:  # fmt: skip
        device = x.device.index
        stream = plans.raw_stream(device)
        bias13 = 0 if w13.bias is None else w13.bias.data_ptr()
        bias2 = 0 if w2_bias is None else w2_bias.data_ptr()
        info = masked_m.data_ptr()
        x8, sfa_x = bufs["x8"].data_ptr(), bufs["sfa_x"].data_ptr()
        h, h8, sfa_h = bufs["h"].data_ptr(), bufs["h8"].data_ptr(), bufs["sfa_h"].data_ptr()
        launched = self.quantize_x(x.data_ptr(), x8, sfa_x, info, stream)
        launched &= self.gemm1.launch(
            x8, w13.weight.data_ptr(), h, sfa_x, w13.scales.data_ptr(), bias13, 0, info, stream
        )
        launched &= self.quantize_h(h, h8, sfa_h, info, stream)
        launched &= self.gemm2.launch(
            h8, w2b.data_ptr(), out.data_ptr(), sfa_h, w2s.data_ptr(), bias2, row_weight_ptr,
            info, stream,
        )  # fmt: skip
        plans.require_launched(launched, device)


def masked_buffers(ws: MoEWorkspace | None, rows: int, h: int, i: int, device) -> dict:
    """The MXFP4 masked path's FP8 copies of x and h and their scales, from the workspace (its
    x_sorted / sfa_x / h / h8 / sfa_h, which need rows of room) or allocated."""
    if ws is not None:
        if not isinstance(ws, MoEWorkspace):
            raise TypeError(f"workspace must be a moegemm.MoEWorkspace, got {type(ws).__name__}")
        if (
            ws.weight_dtype != "mxfp4"
            or ws.x_sorted.shape[0] < rows
            or (ws.hidden, ws.intermediate) != (h, i)
        ):
            raise ValueError(
                f"an MXFP4 fused_moe_masked call needs a weight_dtype 'mxfp4' workspace of "
                f"hidden {h}, intermediate {i} and {rows} rows; got {ws!r}"
            )
        if ws.device != device:
            raise ValueError(f"workspace is on {ws.device}, x on {device}")
        return {"x8": ws.x_sorted, "sfa_x": ws.sfa_x, "h": ws.h, "h8": ws.h8, "sfa_h": ws.sfa_h}
    fp8 = torch.float8_e4m3fn
    return {
        "x8": torch.empty(rows, h, dtype=fp8, device=device),
        "sfa_x": torch.empty(rows, -(-h // FP8_BLOCK), dtype=torch.float32, device=device),
        "h": torch.empty(rows, i, dtype=torch.bfloat16, device=device),
        "h8": torch.empty(rows, i, dtype=fp8, device=device),
        "sfa_h": torch.empty(rows, -(-i // FP8_BLOCK), dtype=torch.float32, device=device),
    }
