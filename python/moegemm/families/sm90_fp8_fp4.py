"""SM90 (Hopper) FP8 x FP4 (GemmDesc.ab_dtype "fp8_fp4"): FP8 activations, MXFP4 weights in
the checkpoint's layout ("raw") or prepare_mxfp4_weights' ("prepared", the table kernels)."""

from __future__ import annotations

from ..heuristics import SM90, GemmDesc
from ..heuristics import sm90_fp8_fp4 as heuristics
from ..jit.codegen import sm90_kernel_spec
from .family import Family


def launcher_name(desc: GemmDesc) -> str:
    moe = desc.epilogue != "none"  # the fused MoE layer's GEMMs: bias and row-scale pointers
    if desc.weights == "prepared":  # the table kernels read their own params
        return "Sm90Fp8Fp4TableMoeGemmLauncher" if moe else "Sm90Fp8Fp4TableGemmLauncher"
    return "Sm90Fp8Fp4MoeGemmLauncher" if moe else "Sm90Fp8Fp4GemmLauncher"


FAMILY = Family(
    arch=SM90,
    ab_dtype="fp8_fp4",
    heuristics=heuristics,
    kernel_spec=sm90_kernel_spec,
    launcher_name=launcher_name,
    mxfp4_forms=("raw", "prepared"),
    hardware_checked=True,
)
