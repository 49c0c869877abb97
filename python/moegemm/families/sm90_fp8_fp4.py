"""SM90 (Hopper) FP8 x FP4 (GemmDesc.ab_dtype "fp8_fp4"): FP8 activations, MXFP4 weights in
the checkpoint's layout ("raw") or prepare_mxfp4_weights' ("prepared", the table kernels)."""

from __future__ import annotations

from ..heuristics import SM90, GemmDesc
from ..heuristics import sm90_fp8_fp4 as heuristics
from ..jit.codegen import sm90_kernel_spec
from .family import Family, moe_or_plain


def launcher_name(desc: GemmDesc) -> str:
    if desc.weights == "prepared":  # the table kernels read their own params
        return moe_or_plain(desc, "Sm90Fp8Fp4TableGemmLauncher", "Sm90Fp8Fp4TableMoeGemmLauncher")
    return moe_or_plain(desc, "Sm90Fp8Fp4GemmLauncher", "Sm90Fp8Fp4MoeGemmLauncher")


FAMILY = Family(
    arch=SM90,
    ab_dtype="fp8_fp4",
    heuristics=heuristics,
    kernel_spec=sm90_kernel_spec,
    launcher_name=launcher_name,
    mxfp4_forms=("raw", "prepared"),
    hardware_checked=True,
)
