"""Public functions (argument checks and dispatch) and the warmup enumeration."""

from __future__ import annotations

from ..heuristics import GemmDesc, arch_for, select_config
from ..jit.codegen import sm90_bf16_gemm_spec
from ..jit.spec import KernelSpec
from .bf16_gemm import bf16_gemm_nt
from .device import get_num_sms, get_pdl, set_num_sms, set_pdl

__all__ = ["bf16_gemm_nt", "get_num_sms", "get_pdl", "set_num_sms", "set_pdl", "warmup_specs"]


def warmup_specs(
    shapes: list[dict], tokens: list[int], arch: str, num_sms: int
) -> list[KernelSpec]:
    """The kernels the heuristics pick for `shapes` (dicts with `n`, `k`) at each token count.

    Only the dense BF16 kernel exists so far, so each shape is enumerated as a dense
    `bf16_gemm_nt` with M = tokens, BF16 output (shared experts and dense fallbacks).
    """
    spec_arch = arch_for(arch, num_sms)
    specs: dict[KernelSpec, None] = {}
    if spec_arch.name != "sm_90a":
        return []
    for shape in shapes:
        for m in tokens:
            desc = GemmDesc("bf16_gemm_nt", m=m, n=int(shape["n"]), k=int(shape["k"]))
            config = select_config(desc, spec_arch)
            specs[sm90_bf16_gemm_spec(config, "bf16", with_c=False)] = None
    return list(specs)
