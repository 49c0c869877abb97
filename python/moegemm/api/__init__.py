"""Public functions (argument checks and dispatch) and the warmup enumeration."""

from __future__ import annotations

import math

from ..heuristics import GemmDesc, arch_for, select_config
from ..jit.codegen import sm90_bf16_gemm_spec, sm90_bf16_k_grouped_spec
from ..jit.spec import KernelSpec
from .bf16_gemm import bf16_gemm_nt
from .device import get_num_sms, get_pdl, set_num_sms, set_pdl
from .k_grouped import k_grouped_bf16_gemm_tn_contiguous
from .m_grouped import (
    get_mk_alignment_for_contiguous_layout,
    m_grouped_bf16_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nt_masked,
)

__all__ = [
    "bf16_gemm_nt",
    "get_mk_alignment_for_contiguous_layout",
    "get_num_sms",
    "get_pdl",
    "k_grouped_bf16_gemm_tn_contiguous",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "set_num_sms",
    "set_pdl",
    "warmup_specs",
]


def warmup_specs(
    shapes: list[dict], tokens: list[int], arch: str, num_sms: int
) -> list[KernelSpec]:
    """The kernels the heuristics pick for `shapes` (dicts with `n`, `k`, optional
    `num_groups`) when `tokens` rows reach the layer, BF16 out.

    One group (shared experts, dense layers): `bf16_gemm_nt` with M = tokens. Several groups
    (routed experts): every m-grouped layout with tokens rows spread evenly over the groups, and
    the k-grouped weight gradient of the same layer (M = n, N = k, tokens rows). The masked
    layout's choice reads the expected rows and, where a group's spread of rows would not fit,
    the buffer's max_m: it is planned for buffers that hold every token of the step
    (max_m = tokens), as a buffer must for any routing; any larger buffer picks the same kernel.
    """
    spec_arch = arch_for(arch, num_sms)
    if spec_arch.name != "sm_90a":
        return []
    specs: dict[KernelSpec, None] = {}

    def add(desc: GemmDesc) -> None:
        config = select_config(desc, spec_arch)
        if desc.kind == "k_grouped":
            specs[sm90_bf16_k_grouped_spec(config, desc.with_c)] = None
        else:
            specs[sm90_bf16_gemm_spec(config, desc.d_dtype, desc.with_c, desc.kind)] = None

    for shape in shapes:
        n, k = int(shape["n"]), int(shape["k"])
        groups = int(shape.get("num_groups", 1))
        for m in tokens:
            if groups == 1:
                add(GemmDesc("bf16_gemm_nt", m=m, n=n, k=k))
                continue
            per_group = max(1, math.ceil(m / groups))
            align = get_mk_alignment_for_contiguous_layout()
            padded = groups * math.ceil(per_group / align) * align
            add(GemmDesc("m_grouped_contiguous", padded, n, k, groups))
            add(GemmDesc("m_grouped_offsets", m, n, k, groups, expected_m=per_group))
            add(GemmDesc("m_grouped_masked", m, n, k, groups, expected_m=per_group))
            if n % 8 == 0 and k % 8 == 0:
                add(GemmDesc("k_grouped", n, k, per_group, groups, d_dtype="fp32"))
    return list(specs)
