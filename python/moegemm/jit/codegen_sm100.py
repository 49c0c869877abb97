"""Code generation of the SM100 kernels: the same named `struct Config` as SM90's (codegen.py's
config_struct), instantiating impls/sm100_bf16_grouped_gemm.cuh, the k-grouped
impls/sm100_bf16_k_grouped_gemm.cuh or (FP8 x FP4) impls/sm100_fp8_fp4_grouped_gemm.cuh for the
family target sm_100f.

Compiled and statically checked, not run on hardware.
"""

from __future__ import annotations

from ..heuristics import SM100
from ..heuristics.config import GemmConfig, GemmDesc
from .codegen import (
    _OUT_TYPES,
    _SCHEDULERS,
    _epilogue_suffix,
    _Kernel,
    _moe_member,
    _one_cta_scheduler,
    _source,
    config_struct,
)
from .spec import KernelSpec

_NOTE = " (compiled and statically checked, not run on hardware)"
_BF16 = _Kernel(
    "sm100_bf16_grouped_gemm",
    "sm100_bf16_grouped_gemm_kernel",
    "Bf16Gemm",
    "Bf16GemmParams",  # the SM90 launcher's params: same TMA boxes
    namespace="sm100",
    note=_NOTE,
)
_K_GROUPED = _Kernel(
    "sm100_bf16_k_grouped_gemm",
    "sm100_bf16_k_grouped_gemm_kernel",
    "Bf16KGroupedGemm",
    "Bf16KGroupedParams",
    namespace="sm100",
    note=_NOTE,
)
_FP8_FP4 = _Kernel(
    "sm100_fp8_fp4_grouped_gemm",
    "sm100_fp8_fp4_grouped_gemm_kernel",
    "Fp8Fp4Gemm",
    "Sm100Fp8Fp4GemmParams",
    namespace="sm100",
    note=_NOTE,
)


def sm100_bf16_gemm_spec(
    config: GemmConfig,
    d_dtype: str,
    with_c: bool,
    kind: str = "bf16_gemm_nt",
    *,
    epilogue: str = "none",
) -> KernelSpec:
    """The dense or m-grouped SM100 BF16 kernel for `config` (either orientation); `epilogue`
    a fused MoE layer epilogue (GemmDesc.epilogue: offsets or masked, swapped tiles, BF16 out
    without C; SwiGLU needs block_n % 16 == 0)."""
    if kind not in _SCHEDULERS:
        raise ValueError(f"kind must be one of {sorted(_SCHEDULERS)}, got {kind!r}")
    if d_dtype not in _OUT_TYPES:
        raise ValueError(f"d_dtype must be one of {sorted(_OUT_TYPES)}, got {d_dtype!r}")
    lay = config.layout
    if lay.cluster_size != 1 or lay.stripe_m or config.store_cols:
        raise ValueError("sm100 bf16: one CTA per tile, no walk stripes, register stores")
    if lay.swap_ab and with_c:
        raise ValueError("sm100 bf16: swapped tiles add no C")
    moe = _moe_member(config, d_dtype, with_c, kind, epilogue, None)
    if moe and not lay.swap_ab:
        raise ValueError(f"sm100 bf16: epilogue {epilogue} runs on swapped tiles")
    scheduler, tag = _one_cta_scheduler(kind, config)
    name = f"sm100_bf16_{tag}_{config.short_name()}_{d_dtype}" + ("_c" if with_c else "")
    name += _epilogue_suffix(epilogue)
    body = config_struct(
        config, out_type=_OUT_TYPES[d_dtype], with_c=with_c, scheduler=scheduler, extra=moe
    )
    return KernelSpec(name=name, source=_source(name, "", _BF16, body), arch=SM100.name)


def sm100_bf16_k_grouped_spec(config: GemmConfig, with_c: bool) -> KernelSpec:
    """The k-grouped weight-gradient kernel (impls/sm100_bf16_k_grouped_gemm.cuh), FP32 out;
    launched by the SM90 k-grouped launcher (same parameters and TMA boxes)."""
    lay = config.layout
    if lay.cluster_size != 1 or lay.stripe_m or lay.swap_ab or config.store_cols:
        raise ValueError(
            "sm100 k-grouped: one CTA per tile, no stripes, no swap_ab, register stores"
        )
    name = f"sm100_bf16_kgrouped_{config.short_name()}" + ("_c" if with_c else "")
    scheduler = f"moegemm::KGroupedScheduler<{lay.block_m}, {lay.block_n}>"
    body = config_struct(config, out_type="float", with_c=with_c, scheduler=scheduler)
    return KernelSpec(name=name, source=_source(name, "", _K_GROUPED, body), arch=SM100.name)


def sm100_fp8_fp4_gemm_spec(
    config: GemmConfig, kind: str = "bf16_gemm_nt", *, epilogue: str = "none"
) -> KernelSpec:
    """The dense or m-grouped SM100 FP8 x FP4 kernel for `config` (BF16 out, no C; the weights'
    side of a tile is 128 rows); `epilogue` a fused MoE layer epilogue (offsets or masked,
    swapped tiles)."""
    if kind not in _SCHEDULERS:
        raise ValueError(f"kind must be one of {sorted(_SCHEDULERS)}, got {kind!r}")
    lay = config.layout
    if lay.cluster_size != 1 or lay.stripe_m or config.store_cols:
        raise ValueError("sm100 fp8_fp4: one CTA per tile, no walk stripes, register stores")
    if lay.block_n != 128 or lay.block_k != 128:
        raise ValueError("sm100 fp8_fp4: block_n and block_k are 128")
    moe = _moe_member(config, "bf16", False, kind, epilogue, None)
    if moe and not lay.swap_ab:
        raise ValueError(f"sm100 fp8_fp4: epilogue {epilogue} runs on swapped tiles")
    scheduler, tag = _one_cta_scheduler(kind, config)
    name = f"sm100_fp8_fp4_{tag}_{config.short_name()}_bf16" + _epilogue_suffix(epilogue)
    body = config_struct(
        config, out_type=_OUT_TYPES["bf16"], with_c=False, scheduler=scheduler, extra=moe
    )
    return KernelSpec(name=name, source=_source(name, "", _FP8_FP4, body), arch=SM100.name)


def sm100_kernel_spec(desc: GemmDesc, config: GemmConfig) -> KernelSpec:
    """The SM100 kernel a call of `desc` compiles for `config`."""
    if desc.ab_dtype == "fp8_fp4" and desc.kind != "k_grouped":
        return sm100_fp8_fp4_gemm_spec(config, desc.kind, epilogue=desc.epilogue)
    if desc.ab_dtype != "bf16":
        raise ValueError(f"moegemm has no SM100 kernel for {desc.ab_dtype} {desc.kind} yet")
    if desc.kind == "k_grouped":
        if desc.d_dtype != "fp32" or desc.epilogue != "none":
            raise ValueError("sm100 k-grouped: FP32 out, no fused MoE epilogue")
        return sm100_bf16_k_grouped_spec(config, desc.with_c)
    return sm100_bf16_gemm_spec(
        config, desc.d_dtype, desc.with_c, desc.kind, epilogue=desc.epilogue
    )
