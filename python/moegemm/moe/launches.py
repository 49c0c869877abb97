"""The fused MoE layer's own kernels around its GEMMs, bound per signature: route-and-gather
(BF16, or the MXFP4 layer's FP8 gather) and combine. Shared by the BF16 and MXFP4 layers."""

from __future__ import annotations

import math
from typing import Any

from ..jit.codegen import (
    MOE_COMBINE_THREADS,
    MOE_ROUTE_THREADS,
    moe_combine_spec,
    moe_route_gather_spec,
)
from ..jit.runtime import load_kernel
from ..launch.device import arch_for_device
from ..launch.plans import bind

MAX_EXPERTS = 1024  # the route kernel's shared-memory tables
MAX_SLOTS_PER_CTA = 2048
ROUTE_WARPS = MOE_ROUTE_THREADS // 32
COMBINE_CTAS_PER_SM = 8


def route_launch(device: int, p: dict[str, int], fp8: bool = False) -> Any:
    """The bound route-and-gather launch of one signature (fp8: the MXFP4 layer's FP8 gather):
    each CTA places and gathers about slots / SMs slots, at most MAX_SLOTS_PER_CTA."""
    from .. import _C

    arch = arch_for_device(device)
    slots, e = p["tokens"] * p["top_k"], p["experts"]
    spc = min(MAX_SLOTS_PER_CTA, max(1, math.ceil(slots / arch.num_sms)))
    smem = 4 * (e * (2 + ROUTE_WARPS) + spc)  # route_gather.cuh's tables
    kernel = load_kernel(moe_route_gather_spec(arch.name, fp8=fp8))
    launcher = _C.MoeRouteGatherLauncher(
        kernel, 1, 1, 1, math.ceil(slots / spc), MOE_ROUTE_THREADS, smem, 1, 1
    )
    return bind(launcher, device, {"num_tokens": p["tokens"], "top_k": p["top_k"],
                                   "num_experts": e, "hidden": p["hidden"], "ldx": p["ldx"],
                                   "slots_per_cta": spc})  # fmt: skip


def combine_launch(device: int, p: dict[str, int]) -> Any:
    """The bound combine launch of one signature: (token, column chunk) items, grid-stride."""
    from .. import _C

    arch = arch_for_device(device)
    t, h = p["tokens"], p["hidden"]
    chunks = math.ceil(h / 8 / MOE_COMBINE_THREADS)
    ctas = max(1, min(t * chunks, arch.num_sms * COMBINE_CTAS_PER_SM))
    kernel = load_kernel(moe_combine_spec(arch.name))
    launcher = _C.MoeCombineLauncher(kernel, 1, 1, 1, ctas, MOE_COMBINE_THREADS, 0, 1, 1)
    return bind(launcher, device, {"num_tokens": t, "top_k": p["top_k"], "hidden": h,
                                   "ldo": p["ldo"]})  # fmt: skip
