"""What `--layer` adds to a model's warmup: the kernels of the fused MoE layer (moegemm.moe),
so that serving compiles nothing when an engine calls fused_moe or fused_moe_masked.

For each token count T the layer runs S = T x top_k slots through
  GEMM1: m_grouped_offsets, rows S, N = 2I (the preset's linear1), K = H, expected_m =
         max(1, ceil(S / E)), epilogue = the model's SwiGLU ("swiglu", or "swiglu_oai" for
         gpt-oss);
  GEMM2: the same rows, N = H, K = I (linear2), epilogue "row_scale";
and fused_moe_masked the masked twins of both over the buffers of specs.masked_max_ms, with the
hint the mean (min(ceil(S / E), max_m)); plus the route-and-gather and combine kernels, which
do not depend on the sizes. With MXFP4 experts (weights="mxfp4") the same GEMMs as FP8 x FP4
kernels for both weight layouts (checkpoint and prepared), the FP8 route kernel and the
intermediate's quantization kernel."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Sequence

from ..families import for_operands, kernel_spec
from ..heuristics import GemmDesc, arch_for
from ..jit.codegen import (
    moe_combine_spec,
    moe_quantize_rows_spec,
    moe_route_gather_spec,
)
from ..jit.spec import KernelSpec
from ..moe.weights import EPILOGUE_OF
from . import presets
from .specs import Picker, check_arguments, masked_max_ms


def layer_gemm_descs(
    experts: int, hidden: int, intermediate: int, top_k: int, activation: str,
    token_counts: Sequence[int],
) -> Iterator[GemmDesc]:  # fmt: skip
    e, h, i = experts, hidden, intermediate
    max_tokens = max(token_counts)
    for tokens in token_counts:
        slots = tokens * top_k
        expected = max(1, math.ceil(slots / e))
        yield GemmDesc("m_grouped_offsets", slots, 2 * i, h, e, expected_m=expected,
                       epilogue=activation)  # fmt: skip
        yield GemmDesc("m_grouped_offsets", slots, h, i, e, expected_m=expected,
                       epilogue="row_scale")  # fmt: skip
        for max_m in masked_max_ms(tokens, max_tokens):
            hint = min(expected, max_m)
            yield GemmDesc("m_grouped_masked", max_m, 2 * i, h, e, expected_m=hint,
                           epilogue=activation)  # fmt: skip
            yield GemmDesc("m_grouped_masked", max_m, h, i, e, expected_m=hint,
                           epilogue="row_scale")  # fmt: skip


def model_layer(model: str) -> tuple[int, int, int, int, str]:
    """(experts, hidden, intermediate, top_k, activation) of a preset's routed experts."""
    shapes = {s["op"]: s for s in presets.model_shapes(model)}
    up = shapes["linear1"]  # [2I, H]; linear2 is its transpose [H, I]
    return (up["num_groups"], up["k"], up["n"] // 2, presets.model_top_k(model),
            presets.model_activation(model))  # fmt: skip


def layer_specs(
    model: str, token_counts: Sequence[int], arch: str, num_sms: int,
    picker: Picker | None = None, weights: str = "bf16",
) -> list[KernelSpec]:  # fmt: skip
    """Every kernel fused_moe / fused_moe_masked pick for `model` at `token_counts`, for BF16
    or MXFP4 (`weights`) experts; on sm_100f (compiled and statically checked, not run on
    hardware) the MXFP4 experts in the SM100-prepared form only, the one it takes."""
    e, h, i, top_k, activation = model_layer(model)
    check_arguments(token_counts, top_k, num_sms)
    spec_arch = arch_for(arch, num_sms)
    forms = for_operands(spec_arch, "fp8_fp4").mxfp4_forms
    pick = picker if picker is not None and picker.arch == spec_arch else Picker(spec_arch)
    mxfp4 = weights == "mxfp4"
    specs: dict[KernelSpec, None] = {
        moe_route_gather_spec(spec_arch.name, fp8=mxfp4): None,
        moe_combine_spec(spec_arch.name): None,
    }
    if mxfp4:
        specs[moe_quantize_rows_spec(spec_arch.name)] = None
    seen: set[tuple] = set()
    for desc in layer_gemm_descs(e, h, i, top_k, EPILOGUE_OF[activation], token_counts):
        variants = (
            [dataclasses.replace(desc, ab_dtype="fp8_fp4", weights=f) for f in forms]
            if mxfp4
            else [desc]
        )
        if mxfp4 and "raw" in forms:  # SM90: prepared weights windowed or not (the data says)
            variants.append(dataclasses.replace(desc, ab_dtype="fp8_fp4", weights="prepared",
                                                windowed=True))  # fmt: skip
        for d in variants:
            config = pick(d)
            if (d.kind, d.ab_dtype, d.weights, d.epilogue, config) not in seen:
                seen.add((d.kind, d.ab_dtype, d.weights, d.epilogue, config))
                specs[kernel_spec(d, config, spec_arch)] = None
    return list(specs)
