"""Code generation: one tiny `.cu` per config that names the config as a struct and instantiates
one kernel template with it.

The generated source holds, inside a namespace named after the kernel (so profilers tell the
kernels apart), a `struct Config` of static constants and types read from the `GemmConfig`:
the kernel template reads them by name (`Config::kBlockM`, `Config::Scheduler`, ...), so codegen
and the template never agree on argument positions. A static_assert checks that the kernel's
shared memory equals `config.pipeline.smem_bytes`, which the launch reserves.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..heuristics import CLUSTER_SHAPES as MULTI_CTA_CLUSTERS
from ..heuristics import SWAP_AB_KINDS
from ..heuristics.config import MOE_EPILOGUE_IDS, GemmConfig, GemmDesc
from .spec import KernelSpec

# wgmma N of the atoms CuTe declares without its extended shapes (which cost ~0.6 s of compile
# time each build): a kernel issuing any other N defines MOEGEMM_WGMMA_EXTENDED_N.
WGMMA_BASE_N = (8, 16, 32, 64, 96, 128, 192, 256)
# The layouts of the grouped walk (scheduler/group_walk_scheduler.cuh): the only ones with walk
# stripes, and the ones the swap-AB kernel serves.
GROUP_WALK_KINDS = ("m_grouped_offsets", "m_grouped_masked")
CLUSTER_SHAPES = ((1, 1), *MULTI_CTA_CLUSTERS)  # the heuristics enumerate (1, 1) only

_OUT_TYPES = {"bf16": "__nv_bfloat16", "fp32": "float"}

# The tile scheduler that gives each m-grouped layout its meaning, and a short tag for names.
_SCHEDULERS = {
    "bf16_gemm_nt": ("DenseScheduler<{m}, {n}, 8, {cm}, {cn}>", "dense"),
    "m_grouped_contiguous": ("ContiguousIndexScheduler<{m}, {n}, {cn}>", "contig"),
    "m_grouped_offsets": ("GroupWalkScheduler<{m}, {n}, true, {cm}, {cn}, {sp}>", "offs"),
    "m_grouped_masked": ("GroupWalkScheduler<{m}, {n}, false, {cm}, {cn}, {sp}>", "masked"),
}
# The m_indices walk in stripes other than the dense walk's 8 m-blocks (only the FP8 x FP4
# convert-ahead kernel asks for one).
_CONTIGUOUS_STRIPED = "ContiguousIndexScheduler<{m}, {n}, {cn}, {sp}>"


@dataclass(frozen=True)
class _Kernel:
    """Where a kernel template lives and how its shared memory is named."""

    header: str  # impls/<header>.cuh
    function: str  # the __global__ template
    composition: str  # the skeleton composition alias (has kSmemBytes)
    params: str  # the parameter struct
    namespace: str = "sm90"  # of the function and the composition, inside moegemm::
    note: str = ""  # after the name in the generated file's first line


_GROUPED = _Kernel(
    "sm90_bf16_grouped_gemm", "sm90_bf16_grouped_gemm_kernel", "Bf16Gemm", "Bf16GemmParams"
)
_SWAP_AB = _Kernel(
    "sm90_bf16_grouped_gemm_swap_ab",
    "sm90_bf16_grouped_gemm_swap_ab_kernel",
    "Bf16SwapAbGemm",
    "Bf16GemmParams",
)
_FP8_FP4 = _Kernel(
    "sm90_fp8_fp4_grouped_gemm",
    "sm90_fp8_fp4_grouped_gemm_kernel",
    "Fp8Fp4Gemm",
    "Sm90Fp8Fp4GemmParams",
)
_FP8_FP4_SWAP_AB = _Kernel(
    "sm90_fp8_fp4_swap_ab_gemm",
    "sm90_fp8_fp4_swap_ab_gemm_kernel",
    "Fp8Fp4SwapAbGemm",
    "Sm90Fp8Fp4GemmParams",
)
_K_GROUPED = _Kernel(
    "sm90_bf16_k_grouped_gemm",
    "sm90_bf16_k_grouped_gemm_kernel",
    "Bf16KGroupedGemm",
    "Bf16KGroupedParams",
)


def config_struct(
    config: GemmConfig,
    *,
    out_type: str,
    with_c: bool,
    scheduler: str,
    extra: str = "",
) -> str:
    """The `struct Config` of `config` (C++): uint32 kBlockM, kBlockN, kBlockK, kNumStages,
    kNumMathWG, kClusterM, kClusterN, kStripeM, kStoreCols (0: register stores), kSmemBytes,
    kNumThreads; bool kWithC, kSwapAB; types OutT and Scheduler; then any extra members (e.g.
    `using Transform = ...;`). The kernels read these by name (include/moegemm/impls/)."""
    lay = config.layout
    constants = {
        "kBlockM": lay.block_m,
        "kBlockN": lay.block_n,
        "kBlockK": lay.block_k,
        "kNumStages": config.pipeline.num_stages,
        "kNumMathWG": config.launch.num_math_warpgroups,
        "kClusterM": lay.cluster_m,
        "kClusterN": lay.cluster_n,
        "kStripeM": lay.stripe_m,
        "kStoreCols": config.store_cols,
        "kSmemBytes": config.pipeline.smem_bytes,
        "kNumThreads": config.launch.num_threads,
    }
    lines = [f"  static constexpr uint32_t {k} = {v};" for k, v in constants.items()]
    lines += [
        f"  static constexpr bool kWithC = {'true' if with_c else 'false'};",
        f"  static constexpr bool kSwapAB = {'true' if lay.swap_ab else 'false'};",
        f"  using OutT = {out_type};",
        f"  using Scheduler = {scheduler};",
    ]
    if extra:
        lines.append(extra)
    return "struct Config {\n" + "\n".join(lines) + "\n};\n"


def _source(name: str, defines: str, kernel: _Kernel, config_body: str) -> str:
    """A `.cu` that includes impls/<kernel>.cuh, names the config and instantiates the kernel
    with it once."""
    space = name.replace("-", "_")  # kernel names may hold '-', C++ identifiers may not
    ns = f"moegemm::{kernel.namespace}"
    return (
        f"// Generated by moegemm: {name}{kernel.note}\n"
        f"{defines}"
        f"#include <moegemm/impls/{kernel.header}.cuh>\n\n"
        f"namespace {space} {{\n{config_body}}}  // namespace {space}\n\n"
        # The launch reserves the config's shared memory and threads; the kernel must agree.
        f"static_assert({ns}::{kernel.composition}<{space}::Config>::kSmemBytes == "
        f'{space}::Config::kSmemBytes, "config.pipeline.smem_bytes");\n'
        f"static_assert({ns}::{kernel.composition}<{space}::Config>::kNumThreads == "
        f'{space}::Config::kNumThreads, "config.launch.num_threads");\n'
        f"template __global__ void {ns}::{kernel.function}<{space}::Config>(\n"
        f"    const __grid_constant__ moegemm::{kernel.params});\n"
    )


def _wgmma_n_define(*wgmma_ns: int) -> str:
    """The define that enables CuTe's extended wgmma shapes, when a kernel issues one."""
    extended = any(n not in WGMMA_BASE_N for n in wgmma_ns)
    return "#define MOEGEMM_WGMMA_EXTENDED_N\n" if extended else ""


def _one_cta_scheduler(kind: str, config: GemmConfig) -> tuple[str, str]:
    """The C++ scheduler of `kind` for one-CTA tiles, and the layout's tag in kernel names."""
    template, tag = _SCHEDULERS[kind]
    lay = config.layout
    if kind == "m_grouped_contiguous" and lay.stripe_m:
        template = _CONTIGUOUS_STRIPED
    scheduler = template.format(m=lay.block_m, n=lay.block_n, cm=1, cn=1, sp=lay.stripe_m)
    return "moegemm::" + scheduler, tag


def _epilogue_suffix(epilogue: str) -> str:
    """What a fused MoE layer epilogue adds to a kernel's name."""
    return "" if epilogue == "none" else f"_{epilogue}"


def _check_dtype(d_dtype: str) -> None:
    if d_dtype not in _OUT_TYPES:
        raise ValueError(f"d_dtype must be one of {sorted(_OUT_TYPES)}, got {d_dtype!r}")


def sm90_bf16_gemm_spec(
    config: GemmConfig,
    d_dtype: str,
    with_c: bool,
    kind: str = "bf16_gemm_nt",
    *,
    transform: str | None = None,
    epilogue: str = "none",
) -> KernelSpec:
    """The dense or m-grouped kernel (impls/sm90_bf16_grouped_gemm.cuh) for `config`, or the
    swap-AB kernel (impls/sm90_bf16_grouped_gemm_swap_ab.cuh) when `config.layout.swap_ab`.

    transform: the C++ type of a transform policy (include/moegemm/pipeline/transform.cuh) run
    by a warpgroup of its own between the TMA ring and the MMA, e.g.
    "moegemm::CopyTransform<2>"; None (BF16) runs none. The config must count the transform's
    warpgroup in launch.num_threads and its ring in pipeline.smem_bytes (the kernel asserts
    both); the kernel name gets a suffix naming the transform.

    epilogue: a fused MoE layer epilogue (GemmDesc.epilogue): the offsets and masked layouts,
    BF16 out without C, register stores, no clusters; SwiGLU needs block_n % 16 == 0."""
    if kind not in _SCHEDULERS:
        raise ValueError(f"kind must be one of {sorted(_SCHEDULERS)}, got {kind!r}")
    _check_dtype(d_dtype)
    lay = config.layout
    moe = _moe_member(config, d_dtype, with_c, kind, epilogue, transform)
    if lay.swap_ab:
        if transform is not None:
            raise ValueError("swap_ab kernels take no transform stage")
        return _swap_ab_spec(config, d_dtype, with_c, kind, epilogue)
    scheduler_template, tag = _SCHEDULERS[kind]
    cluster = (lay.cluster_m, lay.cluster_n)
    if cluster not in CLUSTER_SHAPES or (lay.cluster_m != 1 and kind == "m_grouped_contiguous"):
        raise ValueError(
            f"{kind}: clusters are 1x1, 2x1 (B shared) or 1x2 (A shared), and the m_indices "
            f"layout takes no 2x1; got {lay.cluster_m}x{lay.cluster_n}"
        )
    if lay.stripe_m and kind not in GROUP_WALK_KINDS:
        raise ValueError(f"{kind}: stripe_m is a grouped-walk option (offsets, masked)")
    if config.store_cols and (with_c or d_dtype != "bf16"):
        raise ValueError(f"{kind}: the TMA-store epilogue writes BF16 without C")
    scheduler = "moegemm::" + scheduler_template.format(
        m=lay.block_m, n=lay.block_n, cm=lay.cluster_m, cn=lay.cluster_n, sp=lay.stripe_m
    )
    name = f"sm90_bf16_{tag}_{config.short_name()}_{d_dtype}" + ("_c" if with_c else "")
    name += _epilogue_suffix(epilogue)
    extra = moe
    if transform is not None:
        if not transform or any(ch in transform for ch in ";{}#\n"):
            raise ValueError(f"transform must name one C++ type, got {transform!r}")
        if lay.cluster_size != 1:
            raise ValueError("a transform stage runs without clusters")
        name += "_x" + hashlib.sha256(transform.encode()).hexdigest()[:8]
        extra = f"  using Transform = {transform};"
    body = config_struct(
        config, out_type=_OUT_TYPES[d_dtype], with_c=with_c, scheduler=scheduler, extra=extra
    )
    source = _source(name, _wgmma_n_define(lay.block_n), _GROUPED, body)
    return KernelSpec(name=name, source=source, arch="sm_90a")


def _moe_member(
    config: GemmConfig, d_dtype: str, with_c: bool, kind: str, epilogue: str, transform
) -> str:
    """The Config member naming a MoE epilogue ("" for none), after checking what it needs."""
    if epilogue == "none":
        return ""
    if epilogue not in MOE_EPILOGUE_IDS:
        raise ValueError(f"epilogue must be one of {sorted(MOE_EPILOGUE_IDS)}, got {epilogue!r}")
    lay = config.layout
    if (
        kind not in GROUP_WALK_KINDS
        or d_dtype != "bf16"
        or with_c
        or transform is not None
        or lay.cluster_size != 1
    ):
        raise ValueError(
            f"epilogue {epilogue}: offsets or masked layouts, BF16 out without C, no clusters "
            "and no transform"
        )
    if epilogue.startswith("swiglu") and lay.block_n % (32 if config.store_cols else 16):
        raise ValueError(
            f"epilogue {epilogue}: block_n must pair 8 gate with 8 up rows (a multiple of 16; "
            "of 32 with TMA stores, whose staged outputs fill 16-column blocks)"
        )
    return f"  static constexpr uint32_t kMoeEpilogue = {MOE_EPILOGUE_IDS[epilogue]};"


def _swap_ab_spec(
    config: GemmConfig, d_dtype: str, with_c: bool, kind: str, epilogue: str = "none"
) -> KernelSpec:
    """The decode kernel with the weights on the MMA's M side
    (impls/sm90_bf16_grouped_gemm_swap_ab.cuh): offsets and masked layouts, BF16 out, no C."""
    lay = config.layout
    if kind not in SWAP_AB_KINDS or d_dtype != "bf16" or with_c:
        raise ValueError(f"swap_ab: {SWAP_AB_KINDS} with BF16 out and no C only, got {kind}")
    if lay.cluster_size != 1 or config.store_cols or lay.stripe_m:
        raise ValueError("swap_ab: no clusters, no TMA-store epilogue and no stripes")
    scheduler, tag = _one_cta_scheduler(kind, config)
    name = f"sm90_bf16_{tag}_{config.short_name()}_{d_dtype}" + _epilogue_suffix(epilogue)
    body = config_struct(
        config,
        out_type=_OUT_TYPES[d_dtype],
        with_c=False,
        scheduler=scheduler,
        extra=_moe_member(config, d_dtype, False, kind, epilogue, None),
    )
    # The tokens (block_m) are the wgmma's N here.
    source = _source(name, _wgmma_n_define(lay.block_m), _SWAP_AB, body)
    return KernelSpec(name=name, source=source, arch="sm_90a")


def sm90_bf16_k_grouped_spec(config: GemmConfig, with_c: bool) -> KernelSpec:
    """The k-grouped weight-gradient kernel (impls/sm90_bf16_k_grouped_gemm.cuh), FP32 out."""
    lay = config.layout
    if lay.cluster_size != 1 or lay.stripe_m or lay.swap_ab:
        raise ValueError("the k-grouped kernel takes no clusters, no walk stripes and no swap_ab")
    if config.store_cols not in (0, 32):
        raise ValueError(f"k-grouped TMA stores are 32 FP32 columns wide, got {config.store_cols}")
    name = f"sm90_bf16_kgrouped_{config.short_name()}" + ("_c" if with_c else "")
    scheduler = f"moegemm::KGroupedScheduler<{lay.block_m}, {lay.block_n}>"
    body = config_struct(config, out_type="float", with_c=with_c, scheduler=scheduler)
    source = _source(name, _wgmma_n_define(lay.block_n), _K_GROUPED, body)
    return KernelSpec(name=name, source=source, arch="sm_90a")


def sm90_fp8_fp4_spec(
    config: GemmConfig, kind: str, weights: str, epilogue: str = "none"
) -> KernelSpec:
    """The FP8 x FP4 kernel (impls/sm90_fp8_fp4_grouped_gemm.cuh): dense or m-grouped, BF16
    out, the weights' layout ("raw" checkpoint nibbles or "prepared") compiled in; `epilogue`
    a fused MoE layer epilogue as for sm90_bf16_gemm_spec."""
    if kind not in _SCHEDULERS:
        raise ValueError(f"kind must be one of {sorted(_SCHEDULERS)}, got {kind!r}")
    if weights not in ("raw", "prepared"):
        raise ValueError(f"weights must be 'raw' or 'prepared', got {weights!r}")
    lay = config.layout
    if lay.cluster_size != 1 or lay.block_k != 128:
        raise ValueError("fp8_fp4: block_k 128, no clusters")
    if lay.stripe_m and (weights != "prepared" or config.pipeline.transform_stages or lay.swap_ab):
        raise ValueError("fp8_fp4: walk stripes are the convert-ahead kernel's only")
    if lay.stripe_m and kind == "bf16_gemm_nt":
        raise ValueError("fp8_fp4: the dense walk takes no stripe")
    moe = _moe_member(config, "bf16", False, kind, epilogue, None)
    if lay.swap_ab:
        return _fp8_fp4_swap_ab_spec(config, kind, weights, moe, epilogue)
    if lay.block_m != 64 * config.launch.num_math_warpgroups:
        raise ValueError("fp8_fp4: each math warpgroup owns 64 rows (block_m = 64 x warpgroups)")
    if config.pipeline.transform_stages < 1 and weights != "prepared":
        raise ValueError("fp8_fp4: the checkpoint transform ring needs at least one stage")
    transform = (
        f"  static constexpr uint32_t kTransformStages = {config.pipeline.transform_stages};"
    )
    return _fp8_fp4_kernel_spec(
        config, kind, weights, epilogue, moe, _FP8_FP4, lay.block_n, transform
    )


def _fp8_fp4_swap_ab_spec(
    config: GemmConfig, kind: str, weights: str, moe: str = "", epilogue: str = "none"
) -> KernelSpec:
    """The FP8 x FP4 swapped kernel (impls/sm90_fp8_fp4_swap_ab_gemm.cuh), tokens (block_m) on
    the wgmma's N side, register stores: every layout on prepared weights, the grouped walk
    (offsets, masked) on the checkpoint layout."""
    lay = config.layout
    kinds = tuple(_SCHEDULERS) if weights == "prepared" else SWAP_AB_KINDS
    if kind not in kinds or config.store_cols or config.pipeline.transform_stages:
        raise ValueError(
            f"fp8_fp4 swap_ab ({weights} weights): {kinds}, register stores, no transform stage"
        )
    if lay.block_n != 64 * config.launch.num_math_warpgroups:
        raise ValueError("fp8_fp4 swap_ab: each math warpgroup owns 64 weight rows")
    # The tokens (block_m) are the wgmma's N here.
    return _fp8_fp4_kernel_spec(config, kind, weights, epilogue, moe, _FP8_FP4_SWAP_AB, lay.block_m)


def _fp8_fp4_kernel_spec(
    config: GemmConfig,
    kind: str,
    weights: str,
    epilogue: str,
    moe: str,
    kernel: _Kernel,
    wgmma_n: int,
    transform: str = "",
) -> KernelSpec:
    """An FP8 x FP4 kernel's spec: BF16 out without C, named by layout, config, weights' form
    and MoE epilogue; the Config adds the transform ring's member, the form and the epilogue's
    member (`moe`), each where given."""
    scheduler, tag = _one_cta_scheduler(kind, config)
    name = f"sm90_fp8fp4_{tag}_{config.short_name()}_{weights}" + _epilogue_suffix(epilogue)
    flag = "true" if weights == "prepared" else "false"
    prepared = f"  static constexpr bool kPreparedWeights = {flag};"
    extra = "\n".join(member for member in (transform, prepared, moe) if member)
    body = config_struct(
        config, out_type="__nv_bfloat16", with_c=False, scheduler=scheduler, extra=extra
    )
    source = _source(name, _wgmma_n_define(wgmma_n), kernel, body)
    return KernelSpec(name=name, source=source, arch="sm_90a")


def sm90_kernel_spec(desc: GemmDesc, config: GemmConfig) -> KernelSpec:
    """The SM90 kernel a call of `desc` compiles for `config` (the SM90 families' kernel_spec)."""
    if desc.ab_dtype == "fp8_fp4":
        return sm90_fp8_fp4_spec(config, desc.kind, desc.weights, desc.epilogue)
    if desc.kind == "k_grouped":
        return sm90_bf16_k_grouped_spec(config, desc.with_c)
    return sm90_bf16_gemm_spec(config, desc.d_dtype, desc.with_c, desc.kind, epilogue=desc.epilogue)


# The fused MoE layer's own kernels (include/moegemm/moe/): one template parameter, the CTA's
# threads.
MOE_ROUTE_THREADS = 512
MOE_COMBINE_THREADS = 128
MOE_QUANTIZE_THREADS = 256
# The expert-parallel kernels (include/moegemm/ep/): one template parameter the CTA's
# threads, and for the dispatch whether rows travel as FP8 with per-128 scales (MXFP4 experts).
EP_DISPATCH_THREADS = 512
EP_COMBINE_THREADS = 256


def _layer_kernel_spec(
    layer: str, header: str, params: str, threads: int, arch: str, **flags: bool
) -> KernelSpec:
    """The kernel moegemm::{layer}::{layer}_{header}_kernel of include/moegemm/{layer}/ for
    `threads` a CTA and its bool template parameters `flags`, in order; each flag that is set
    names itself in the kernel's name."""
    name = f"{layer}_{header}_t{threads}" + "".join(f"_{flag}" for flag, on in flags.items() if on)
    targs = ", ".join([str(threads), *("true" if on else "false" for on in flags.values())])
    source = (
        f"// Generated by moegemm: {name}\n"
        f"#include <moegemm/{layer}/{header}.cuh>\n\n"
        f"template __global__ void moegemm::{layer}::{layer}_{header}_kernel<{targs}>(\n"
        f"    const __grid_constant__ moegemm::{params});\n"
    )
    return KernelSpec(name=name, source=source, arch=arch)


def _ue8m0_rows(arch: str) -> bool:
    """Whether FP8 rows built for `arch` carry power-of-two scales: the SM100 FP8 x FP4 kernel
    reads each per-128 scale as a UE8M0 exponent (per_token_cast_to_fp8(..., ue8m0=True))."""
    return arch in ("sm_100f", "sm_100a")


def moe_route_gather_spec(arch: str = "sm_90a", fp8: bool = False) -> KernelSpec:
    """The route-and-gather kernel (moe/route_gather.cuh), MOE_ROUTE_THREADS a CTA; `fp8`
    quantizes the gathered rows per 128 columns (MXFP4 experts; on SM100 with power-of-two
    scales)."""
    ue8m0 = fp8 and _ue8m0_rows(arch)
    return _layer_kernel_spec(
        "moe", "route_gather", "MoeRouteParams", MOE_ROUTE_THREADS, arch, fp8=fp8, ue8m0=ue8m0
    )


def moe_quantize_rows_spec(arch: str = "sm_90a") -> KernelSpec:
    """The per-token FP8 quantization of BF16 rows (moe/quantize_rows.cuh; on SM100 with
    power-of-two scales)."""
    return _layer_kernel_spec(
        "moe", "quantize_rows", "MoeQuantizeParams", MOE_QUANTIZE_THREADS, arch,
        ue8m0=_ue8m0_rows(arch),
    )  # fmt: skip


def moe_combine_spec(arch: str = "sm_90a") -> KernelSpec:
    """The combine kernel (moe/combine.cuh), MOE_COMBINE_THREADS a CTA."""
    return _layer_kernel_spec("moe", "combine", "MoeCombineParams", MOE_COMBINE_THREADS, arch)


def ep_dispatch_spec(arch: str = "sm_90a", fp8: bool = False) -> KernelSpec:
    """The expert-parallel dispatch (ep/dispatch.cuh), EP_DISPATCH_THREADS a CTA; `fp8` pushes
    rows quantized to FP8 per 128 columns with their scales (MXFP4 experts; on SM100 with
    power-of-two scales)."""
    ue8m0 = fp8 and _ue8m0_rows(arch)
    return _layer_kernel_spec(
        "ep", "dispatch", "EpDispatchParams", EP_DISPATCH_THREADS, arch, fp8=fp8, ue8m0=ue8m0
    )


def ep_combine_spec(arch: str = "sm_90a") -> KernelSpec:
    """The expert-parallel combine (ep/combine.cuh), EP_COMBINE_THREADS a CTA."""
    return _layer_kernel_spec("ep", "combine", "EpCombineParams", EP_COMBINE_THREADS, arch)
