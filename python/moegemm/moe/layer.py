"""The fused MoE layer: routed tokens in, combined hidden states out, in four launches.

    out = fused_moe(x, w13, w2, topk_weights, topk_ids, workspace=ws)

1. route and gather (moe/route_gather.cuh): per-expert counts, each expert's rows, a stable
   placement of every kept (token, choice) slot, the routing weights in row order, `offs`, and
   x gathered into expert order (workspace.x_sorted);
2. GEMM1 over w13 (the BF16 grouped kernel, offsets layout) with the SwiGLU epilogue: h [S, I];
3. GEMM2 over w2 with the RowScale epilogue: (h @ w2^T + bias) * routing weight, BF16 rows
   (written over x_sorted, which GEMM1 has consumed);
4. combine (moe/combine.cuh): each token's top_k rows summed in FP32 in choice order.
No launch reads back to the host and a call with a workspace allocates nothing, so a CUDA
graph captured at max_tokens replays for any routing (pad x and mark the padding slots -1).

fused_moe_masked runs steps 2 and 3 on inputs already dispatched per expert ([E, max_m, H],
valid rows per expert on the device), the layout expert-parallel low-latency dispatch delivers;
its output rows are unweighted (the dispatcher's combine applies the routing weights).

MXFP4 experts (w13 from prepare_moe_weights of (blocks, scales), w2 MXFP4) run the FP8 x FP4
kernels in five launches: moe/mxfp4.py.
"""

from __future__ import annotations

import math

import torch

from ..api.mxfp4_weights import SM90_ARCH, is_windowed
from ..heuristics import GemmDesc
from ..launch import checks, plans
from ..launch.device import arch_for_device
from ..launch.problems import GemmProblem
from .launches import MAX_EXPERTS, combine_launch, route_launch
from .mxfp4 import (
    Mxfp4LayerPlan,
    Mxfp4MaskedPlan,
    check_prepared_mxfp4,
    check_w2_mxfp4,
    masked_buffers,
    require_weights_for,
    w2_arch,
)
from .weights import EPILOGUE_OF, PreparedW13
from .workspace import MoEWorkspace

_plans = plans.PlanCache()  # signature -> _LayerPlan / Mxfp4LayerPlan
_masked_plans = plans.PlanCache()  # signature -> _MaskedPlan / Mxfp4MaskedPlan


def layer_gemms(sizes: dict[str, int], activation: str) -> tuple:
    """(desc, problem) of fused_moe's two GEMMs for one signature's sizes (tokens,
    top_k, experts, hidden, intermediate, ldw2, ldw2_group): what the plan compiles and binds,
    and what the warmup's --layer must cover."""
    t, k, e, h, i = (sizes[key] for key in ("tokens", "top_k", "experts", "hidden",
                                            "intermediate"))  # fmt: skip
    slots = t * k
    expected = max(1, math.ceil(slots / e))
    d1 = GemmDesc("m_grouped_offsets", slots, 2 * i, h, e, expected_m=expected,
                  epilogue=EPILOGUE_OF[activation])  # fmt: skip
    d2 = GemmDesc("m_grouped_offsets", slots, h, i, e, expected_m=expected, epilogue="row_scale")
    # SwiGLU writes i of GEMM1's 2i columns.
    p1 = GemmProblem(slots, slots, 2 * i, h, e, h, h, 2 * i * h, i, d_cols=i)
    p2 = GemmProblem(slots, slots, h, i, e, i, sizes["ldw2"], sizes["ldw2_group"], h, d_cols=h)
    return (d1, p1), (d2, p2)


def masked_gemms(e: int, max_m: int, h: int, i: int, expected: int, activation: str,
                 ldw2: int, ldw2_group: int) -> tuple:  # fmt: skip
    """(desc, problem) of fused_moe_masked's two GEMMs (expected already capped)."""
    rows = e * max_m
    d1 = GemmDesc("m_grouped_masked", max_m, 2 * i, h, e, expected_m=expected,
                  epilogue=EPILOGUE_OF[activation])  # fmt: skip
    d2 = GemmDesc("m_grouped_masked", max_m, h, i, e, expected_m=expected, epilogue="row_scale")
    p1 = GemmProblem(rows, max_m, 2 * i, h, e, h, h, 2 * i * h, i, d_cols=i)
    p2 = GemmProblem(rows, max_m, h, i, e, i, ldw2, ldw2_group, h, d_cols=h)
    return (d1, p1), (d2, p2)


class _LayerPlan:
    """The four bound launches of one fused_moe signature."""

    def __init__(self, device: int, p: dict[str, int], activation: str) -> None:
        self.route = route_launch(device, p)
        (d1, p1), (d2, p2) = layer_gemms(p, activation)
        self.gemm1 = plans.make_plan(device, d1, p1)
        self.gemm2 = plans.make_plan(device, d2, p2)
        self.combine = combine_launch(device, p)
        self.configs = (self.gemm1.config, self.gemm2.config)

    def run(self, x, w13: PreparedW13, w2, w2_bias, ids, weights, out, ws: MoEWorkspace) -> None:
        stream = plans.raw_stream(x.device.index)
        bias13 = 0 if w13.bias is None else w13.bias.data_ptr()
        bias2 = 0 if w2_bias is None else w2_bias.data_ptr()
        xs, hb, offs = ws.x_sorted.data_ptr(), ws.h.data_ptr(), ws.offs.data_ptr()
        launched = self.route(
            x.data_ptr(), xs, ids.data_ptr(), weights.data_ptr(), offs, ws.row_slot.data_ptr(),
            ws.row_weight.data_ptr(), ws.slot_row.data_ptr(), 0, stream,
        )  # fmt: skip
        launched &= self.gemm1.launch(xs, w13.weight.data_ptr(), hb, bias13, 0, offs, stream)
        launched &= self.gemm2.launch(
            hb, w2.data_ptr(), xs, bias2, ws.row_weight.data_ptr(), offs, stream
        )
        launched &= self.combine(xs, out.data_ptr(), ws.slot_row.data_ptr(), stream)
        plans.require_launched(launched, x.device.index)


def _check_w13(w13: object, activation: str | None, w13_bias: object) -> PreparedW13:
    if not isinstance(w13, PreparedW13):
        raise TypeError(
            "w13 must come from moegemm.prepare_moe_weights(w13, activation=..., w13_bias=...): "
            "its gate and up rows are reordered once, at load time"
            + (f"; got {type(w13).__name__}" if not isinstance(w13, torch.Tensor) else "")
        )
    if activation is not None and activation != w13.activation:
        raise ValueError(
            f"activation {activation!r} differs from the one w13 was prepared for "
            f"({w13.activation!r})"
        )
    if w13_bias is not None:
        raise ValueError("pass w13_bias to prepare_moe_weights; the prepared w13 carries it")
    if w13.is_mxfp4 and w13.mxfp4_prepared and w13.mxfp4_arch == SM90_ARCH:
        # A copy that lost a tensor's shape or contiguity would be read at the wrong pitch.
        e, i, h = w13.num_experts, w13.intermediate, w13.hidden
        check_prepared_mxfp4("w13", w13.weight, w13.scales, e, 2 * i, h)
    return w13


def _check_w2(w2: object, e: int, h: int, i: int) -> None:
    checks.require_tensor("w2", w2, (torch.bfloat16,), 3)
    checks.require_shape("w2", w2, (e, h, i))
    if w2.stride(2) != 1 or (w2.stride(1) * 2) % 16 or (w2.stride(0) * 2) % 16:
        raise ValueError(
            f"w2 must be row-major with 16-byte aligned rows and experts, got strides {w2.stride()}"
        )


def _check_routing(topk_ids: object, topk_weights: object, t: int) -> int:
    checks.require_tensor("topk_ids", topk_ids, (torch.int32,), 2)
    checks.require_tensor("topk_weights", topk_weights, (torch.float32,), 2)
    if topk_ids.shape[0] != t:
        raise ValueError(f"topk_ids has {topk_ids.shape[0]} rows, x has {t} tokens")
    k = topk_ids.shape[1]
    if k < 1:
        raise ValueError("topk_ids must have at least one column (top_k >= 1)")
    checks.require_shape("topk_weights", topk_weights, (t, k))
    checks.require_contiguous("topk_ids", topk_ids)
    checks.require_contiguous("topk_weights", topk_weights)
    return k


def _check_out(out: object, shape: tuple[int, ...]) -> None:
    checks.require_tensor("out", out, (torch.bfloat16,), len(shape))
    checks.require_shape("out", out, shape)
    checks.require_contiguous("out", out)


def _workspace_for(
    ws: object, t: int, k: int, e: int, h: int, i: int, x, weight_dtype: str = "bf16"
) -> MoEWorkspace:
    if ws is None:
        return MoEWorkspace(max(t, 1), k, e, h, i, weight_dtype, device=x.device)
    if not isinstance(ws, MoEWorkspace):
        raise TypeError(f"workspace must be a moegemm.MoEWorkspace, got {type(ws).__name__}")
    if ws.weight_dtype != weight_dtype:
        raise ValueError(
            f"the experts are {weight_dtype} but the workspace was made with weight_dtype "
            f"{ws.weight_dtype!r}"
        )
    if ws.device != x.device:
        raise ValueError(f"workspace is on {ws.device}, x on {x.device}")
    if (ws.top_k, ws.num_experts, ws.hidden, ws.intermediate) != (k, e, h, i):
        raise ValueError(
            f"workspace was made for top_k {ws.top_k}, {ws.num_experts} experts, hidden "
            f"{ws.hidden}, intermediate {ws.intermediate}; this call has {k}, {e}, {h}, {i}"
        )
    if t > ws.max_tokens:
        raise ValueError(f"{t} tokens exceed the workspace's max_tokens {ws.max_tokens}")
    return ws


def check_fused_moe(
    x: object,
    w13: object,
    w2: object,
    topk_weights: object,
    topk_ids: object,
    w2_bias: object,
    out: object,
) -> tuple[tuple[int, ...], tuple | None]:
    """The structure of a fused_moe call (types, dtypes, shapes, strides): ((T, k, E, H, I,
    ldx), MXFP4 w2 as (blocks, scales, prepared) or None for BF16 experts).
    The custom op's fake implementation runs this alone; placement is the caller's."""
    prepared = w13
    e, i, h = prepared.num_experts, prepared.intermediate, prepared.hidden
    checks.require_tensor("x", x, (torch.bfloat16,), 2)
    t = x.shape[0]
    if x.shape[1] != h:
        raise ValueError(f"x has {x.shape[1]} columns, w13 was prepared for hidden {h}")
    ldx = checks.row_stride("x", x)
    k = _check_routing(topk_ids, topk_weights, t)
    packed_w2 = check_any_w2(prepared, w2, w2_bias, e, h, i)
    if e > MAX_EXPERTS:
        raise ValueError(f"at most {MAX_EXPERTS} experts, got {e}")
    if out is not None:
        _check_out(out, (t, h))
    return (t, k, e, h, i, ldx), packed_w2


def check_any_w2(prepared: PreparedW13, w2: object, w2_bias: object, e: int, h: int, i: int):
    """w2 of the experts' kind: BF16 [E, H, I], or MXFP4 (blocks, scales) / Mxfp4Weights with
    MXFP4 w13. Returns (blocks, scales, prepared) for MXFP4, None for BF16."""
    if w2_bias is not None:
        checks.require_tensor("w2_bias", w2_bias, (torch.float32,), 2)
        checks.require_shape("w2_bias", w2_bias, (e, h))
        checks.require_contiguous("w2_bias", w2_bias)
    if not prepared.is_mxfp4:
        _check_w2(w2, e, h, i)
        return None

    if isinstance(w2, torch.Tensor):
        raise TypeError("w13 holds MXFP4 experts: w2 must be MXFP4 too, (blocks, scales)")
    if w2_arch(w2) != prepared.mxfp4_arch:
        raise ValueError(
            f"w13 was prepared for {prepared.mxfp4_arch} and w2 for {w2_arch(w2)}: prepare both "
            f'for the GPU they run on (SM100: prepare_mxfp4_weights(blocks, scales, arch="sm_100f"))'
        )
    return check_w2_mxfp4(w2, e, h, i)


def fused_moe(
    x: torch.Tensor,
    w13: PreparedW13,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    activation: str | None = None,
    w13_bias: None = None,
    w2_bias: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    workspace: MoEWorkspace | None = None,
) -> torch.Tensor:
    """The routed experts of one MoE layer: [T, H] BF16 = sum over each token's kept choices j
    of topk_weights[t, j] * (SwiGLU(x[t] @ w13[e]^T + b13[e]) @ w2[e]^T + b2[e]), e =
    topk_ids[t, j]; a choice with an id outside [0, E) (-1: an expert on another rank) is
    dropped, a token with none gets zeros.

    x [T, H] BF16 (rows 16-byte aligned); w13 from prepare_moe_weights (its activation, its
    bias); w2 [E, H, I] BF16; topk_ids int32 [T, k], topk_weights float32 [T, k]; w2_bias
    float32 [E, H]. out [T, H] BF16 (allocated if None); workspace a MoEWorkspace (allocated per
    call if None; pass one to allocate nothing, e.g. under CUDA graphs, but for the convert-ahead
    kernel's transient workspace where windowed MXFP4 experts take it at prefill sizes:
    moegemm.set_workspace_limit(0) turns it off). Never synchronizes.
    Under torch.compile the call is the custom op moegemm::fused_moe (moe/ops.py)."""
    prepared = _check_w13(w13, activation, w13_bias)
    sizes, packed_w2 = check_fused_moe(x, prepared, w2, topk_weights, topk_ids, w2_bias, out)
    t, k, e, h, i, ldx = sizes
    if out is None:
        out = torch.empty(t, h, dtype=torch.bfloat16, device=x.device)
    if prepared.is_mxfp4:
        return _fused_moe_mxfp4(x, prepared, packed_w2, topk_weights, topk_ids, w2_bias, out,
                                workspace, sizes, is_windowed(w2))  # fmt: skip
    if torch.compiler.is_compiling():
        ws = _workspace_for(workspace, t, k, e, h, i, x)
        torch.ops.moegemm.fused_moe(
            x, prepared.weight, prepared.bias, w2, w2_bias, topk_weights, topk_ids, out,
            ws.x_sorted, ws.h, ws.offs, ws.row_slot, ws.row_weight, ws.slot_row,
            prepared.activation,
        )  # fmt: skip
        return out
    device = checks.require_placement(
        {"x": x, "w13": prepared.weight, "w2": w2, "out": out},
        {"topk_ids": topk_ids, "topk_weights": topk_weights, "w2_bias": w2_bias,
         "w13 bias": prepared.bias},
    )  # fmt: skip
    if t == 0:
        return out
    ws = _workspace_for(workspace, t, k, e, h, i, x)
    key = (device, t, k, e, h, i, ldx, w2.stride(1), w2.stride(0), prepared.activation)
    plan = _plans.get(key)
    if plan is None:
        sizes = {"tokens": t, "top_k": k, "experts": e, "hidden": h, "intermediate": i,
                 "ldx": ldx, "ldo": h, "ldw2": w2.stride(1), "ldw2_group": w2.stride(0)}  # fmt: skip
        plan = _plans[key] = _LayerPlan(device, sizes, prepared.activation)
    plan.run(x, prepared, w2, w2_bias, topk_ids, topk_weights, out, ws)
    return out


def _fused_moe_mxfp4(x, w13: PreparedW13, w2, topk_weights, topk_ids, w2_bias, out, workspace,
                     sizes: tuple, w2_windowed: bool = False) -> torch.Tensor:  # fmt: skip
    """fused_moe with MXFP4 experts (moe/mxfp4.py), after the structural checks. Under
    torch.compile (the custom op) neither weight counts as windowed: the table kernels run."""

    t, k, e, h, i, ldx = sizes
    w2b, w2s, w2_prepared = w2  # checked: (blocks, scales, prepared)
    if torch.compiler.is_compiling():
        ws = _workspace_for(workspace, t, k, e, h, i, x, "mxfp4")
        torch.ops.moegemm.fused_moe_mxfp4(
            x, w13.weight, w13.scales, w13.bias, w2b, w2s, w2_bias, topk_weights, topk_ids, out,
            ws.x_sorted, ws.sfa_x, ws.h, ws.h8, ws.sfa_h, ws.y, ws.offs, ws.row_slot,
            ws.row_weight, ws.slot_row, w13.activation, w13.mxfp4_prepared, w2_prepared,
            w13.mxfp4_arch,
        )  # fmt: skip
        return out
    # The FP8 x FP4 launcher takes the scale bytes on 16-byte boundaries too.
    device = checks.require_placement(
        {"x": x, "w13 blocks": w13.weight, "w2 blocks": w2b, "out": out,
         "w13 scales": w13.scales, "w2 scales": w2s},
        {"topk_ids": topk_ids, "topk_weights": topk_weights, "w2_bias": w2_bias,
         "w13 bias": w13.bias},
    )  # fmt: skip
    require_weights_for(arch_for_device(device).name, w13)
    if t == 0:
        return out
    ws = _workspace_for(workspace, t, k, e, h, i, x, "mxfp4")
    key = (device, t, k, e, h, i, ldx, w13.activation, w13.mxfp4_prepared, w2_prepared,
           w13.mxfp4_arch, w13.mxfp4_windowed, w2_windowed)  # fmt: skip
    plan = _plans.get(key)
    if plan is None:
        sizes_d = {"tokens": t, "top_k": k, "experts": e, "hidden": h, "intermediate": i,
                   "ldx": ldx, "ldo": h}  # fmt: skip
        plan = _plans[key] = Mxfp4LayerPlan(device, sizes_d, w13, w2_prepared, w2_windowed)
    plan.run(x, w13, w2b, w2s, w2_bias, topk_ids, topk_weights, out, ws)
    return out


class _MaskedPlan:
    """The two bound GEMM launches of one fused_moe_masked signature."""

    def __init__(self, device: int, *sizes) -> None:
        (d1, p1), (d2, p2) = masked_gemms(*sizes)
        self.gemm1 = plans.make_plan(device, d1, p1)
        self.gemm2 = plans.make_plan(device, d2, p2)


def masked_plan(device: int, e: int, max_m: int, h: int, i: int, expected: int,
                activation: str, ldw2: int, ldw2_group: int) -> _MaskedPlan:  # fmt: skip
    """fused_moe_masked's plan (BF16 experts) of one signature, built if new: its kernels
    compiled and loaded. moegemm.ep builds it before its dispatch launch, so that no rank
    compiles while its peers wait on its signals."""
    key = (device, e, max_m, h, i, expected, ldw2, ldw2_group, activation)
    plan = _masked_plans.get(key)
    if plan is None:
        plan = _masked_plans[key] = _MaskedPlan(
            device, e, max_m, h, i, expected, activation, ldw2, ldw2_group
        )
    return plan


def check_fused_moe_masked(x, masked_m, prepared: PreparedW13, w2, expected_m, w2_bias,
                           row_weight, *, symbolic: bool = False) -> tuple:  # fmt: skip
    """fused_moe_masked's structural checks up to its output (no data read, no placement), for
    the eager call and its custom op's fake (symbolic: expected_m may be a SymInt there).
    Returns (max_m, the MXFP4 w2 parts or None)."""
    e, i, h = prepared.num_experts, prepared.intermediate, prepared.hidden
    checks.require_tensor("x", x, (torch.bfloat16,), 3)
    if x.shape[0] != e or x.shape[2] != h:
        raise ValueError(f"x must have shape ({e}, max_m, {h}), got {tuple(x.shape)}")
    checks.require_contiguous("x", x)
    max_m = x.shape[1]
    checks.require_index_vector("masked_m", masked_m, e)
    checks.require_expected_m(expected_m, symbolic=symbolic)
    mxfp4 = check_any_w2(prepared, w2, w2_bias, e, h, i)
    if row_weight is not None:
        checks.require_tensor("row_weight", row_weight, (torch.float32,), 2)
        checks.require_shape("row_weight", row_weight, (e, max_m))
        checks.require_contiguous("row_weight", row_weight)
    return max_m, mxfp4


def fused_moe_masked(
    x: torch.Tensor,
    masked_m: torch.Tensor,
    w13: PreparedW13,
    w2: torch.Tensor,
    expected_m: int,
    *,
    activation: str | None = None,
    w13_bias: None = None,
    w2_bias: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    workspace: MoEWorkspace | None = None,
    row_weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """The experts on inputs already dispatched per expert: out[g, r] = SwiGLU(x[g, r] @
    w13[g]^T + b13[g]) @ w2[g]^T + b2[g] for r < masked_m[g] (clamped to [0, max_m] on the
    device); rows past it are not written. x [E, max_m, H] BF16 contiguous, masked_m int32 [E]
    on the device, expected_m the rows an expert is expected to hold (steers the tiles).
    workspace.h (or a per-call buffer) holds the [E * max_m, I] intermediate: a workspace needs
    max_tokens * top_k >= E * max_m. row_weight (float32 [E, max_m] on the device, optional)
    multiplies each output row in GEMM2's epilogue after the bias, as fused_moe applies the
    routing weights (expert parallelism, moegemm.ep). Never synchronizes."""
    prepared = _check_w13(w13, activation, w13_bias)
    e, i, h = prepared.num_experts, prepared.intermediate, prepared.hidden
    compiling = torch.compiler.is_compiling()
    max_m, mxfp4 = check_fused_moe_masked(x, masked_m, prepared, w2, expected_m, w2_bias,
                                          row_weight, symbolic=compiling)  # fmt: skip
    if compiling:  # the op's fake implementation checks out and the workspace buffers
        return _fused_moe_masked_op(x, masked_m, prepared, w2, expected_m, w2_bias, out,
                                    workspace, row_weight)  # fmt: skip
    if out is None:
        out = torch.empty(e, max_m, h, dtype=torch.bfloat16, device=x.device)
    _check_out(out, (e, max_m, h))
    w2_main = w2 if mxfp4 is None else mxfp4[0]
    device = checks.require_placement(
        {"x": x, "w13": prepared.weight, "w2": w2_main, "out": out,
         "w13 scales": prepared.scales, "w2 scales": None if mxfp4 is None else mxfp4[1]},
        {"masked_m": masked_m, "w2_bias": w2_bias, "w13 bias": prepared.bias,
         "row_weight": row_weight},
    )  # fmt: skip
    rows = e * max_m
    scale2 = 0 if row_weight is None else row_weight.data_ptr()
    if rows == 0:
        return out
    if mxfp4 is not None:
        return _masked_mxfp4(x, masked_m, prepared, mxfp4, w2_bias, out, workspace,
                             (device, e, max_m, h, i, min(expected_m, max_m)), scale2,
                             is_windowed(w2))  # fmt: skip
    if workspace is None:
        inter = torch.empty(rows, i, dtype=torch.bfloat16, device=x.device)
    else:
        if not isinstance(workspace, MoEWorkspace):
            raise TypeError(f"workspace must be a moegemm.MoEWorkspace, got {type(workspace)}")
        if workspace.device != x.device:
            raise ValueError(f"workspace is on {workspace.device}, x on {x.device}")
        if workspace.intermediate != i or workspace.h.shape[0] < rows:
            raise ValueError(
                f"workspace holds {workspace.h.shape[0]} x {workspace.intermediate} intermediate "
                f"rows; this call needs {rows} x {i}"
            )
        inter = workspace.h
    plan = masked_plan(device, e, max_m, h, i, min(expected_m, max_m), prepared.activation,
                       w2.stride(1), w2.stride(0))  # fmt: skip
    stream = plans.raw_stream(device)
    bias13 = 0 if prepared.bias is None else prepared.bias.data_ptr()
    bias2 = 0 if w2_bias is None else w2_bias.data_ptr()
    info = masked_m.data_ptr()
    launched = plan.gemm1.launch(
        x.data_ptr(), prepared.weight.data_ptr(), inter.data_ptr(), bias13, 0, info, stream
    )
    launched &= plan.gemm2.launch(
        inter.data_ptr(), w2.data_ptr(), out.data_ptr(), bias2, scale2, info, stream
    )
    plans.require_launched(launched, device)
    return out


def _fused_moe_masked_op(x, masked_m, w13: PreparedW13, w2, expected_m, w2_bias, out, workspace,
                         row_weight) -> torch.Tensor:  # fmt: skip
    """fused_moe_masked while Dynamo traces: the custom op moegemm::fused_moe_masked (BF16) or
    moegemm::fused_moe_masked_mxfp4, with out and the workspace's buffers as tensors (allocated
    here when not given, as the eager path does)."""
    e, max_m, h = x.shape
    i, rows = w13.intermediate, x.shape[0] * x.shape[1]
    if out is None:
        out = torch.empty(e, max_m, h, dtype=torch.bfloat16, device=x.device)
    if w13.is_mxfp4:
        w2b, w2s, w2_prepared = check_any_w2(w13, w2, w2_bias, e, h, i)  # flat for the schema
        bufs = masked_buffers(workspace, rows, h, i, x.device)
        torch.ops.moegemm.fused_moe_masked_mxfp4(
            x, masked_m, w13.weight, w13.scales, w13.bias, w2b, w2s, w2_bias, out, bufs["x8"],
            bufs["sfa_x"], bufs["h"], bufs["h8"], bufs["sfa_h"], expected_m, row_weight,
            w13.activation, w13.mxfp4_prepared, w2_prepared, w13.mxfp4_arch,
        )  # fmt: skip
        return out
    if workspace is None:
        inter = torch.empty(rows, i, dtype=torch.bfloat16, device=x.device)
    elif not isinstance(workspace, MoEWorkspace):
        raise TypeError(f"workspace must be a moegemm.MoEWorkspace, got {type(workspace)}")
    elif workspace.device != x.device:
        raise ValueError(f"workspace is on {workspace.device}, x on {x.device}")
    else:
        inter = workspace.h  # its size is checked by the fake implementation
    torch.ops.moegemm.fused_moe_masked(
        x, masked_m, w13.weight, w13.bias, w2, w2_bias, out, inter, expected_m, row_weight,
        w13.activation,
    )  # fmt: skip
    return out


def _masked_mxfp4(x, masked_m, w13: PreparedW13, w2, w2_bias, out, workspace, sizes: tuple,
                  row_weight_ptr: int = 0, w2_windowed: bool = False):  # fmt: skip

    device, e, max_m, h, i, expected = sizes
    w2b, w2s, w2_prepared = w2
    require_weights_for(arch_for_device(device).name, w13)
    bufs = masked_buffers(workspace, e * max_m, h, i, x.device)
    key = ("mxfp4", device, e, max_m, h, i, expected, w13.activation, w13.mxfp4_prepared,
           w2_prepared, w13.mxfp4_arch, w13.mxfp4_windowed, w2_windowed)  # fmt: skip
    plan = _masked_plans.get(key)
    if plan is None:
        plan = _masked_plans[key] = Mxfp4MaskedPlan(
            device, e, max_m, h, i, expected, w13, w2_prepared, w2_windowed
        )
    plan.run(x, masked_m, w13, w2b, w2s, w2_bias, out, bufs, row_weight_ptr)
    return out
