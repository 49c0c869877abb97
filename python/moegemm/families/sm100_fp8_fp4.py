"""SM100 (Blackwell) FP8 x FP4: the tcgen05 block-scaled kernels, compiled and statically
checked, not run on hardware. The weights come only as prepare_mxfp4_weights' SM100 form."""

from __future__ import annotations

from ..heuristics import SM100, GemmConfig, GemmDesc
from ..heuristics import sm100_fp8_fp4 as heuristics
from ..jit.codegen_sm100 import sm100_kernel_spec
from .family import Family, moe_or_plain


def launcher_name(desc: GemmDesc, config: GemmConfig) -> str:
    return moe_or_plain(desc, "Sm100Fp8Fp4GemmLauncher", "Sm100Fp8Fp4MoeGemmLauncher")


FAMILY = Family(
    arch=SM100,
    ab_dtype="fp8_fp4",
    heuristics=heuristics,
    kernel_spec=sm100_kernel_spec,
    launcher_name=launcher_name,
    # Its own preparation only: codes padded to 128 of K, scales in tcgen05.cp's order.
    mxfp4_forms=("prepared",),
    hardware_checked=False,
    unsupported=heuristics.supported,
)
