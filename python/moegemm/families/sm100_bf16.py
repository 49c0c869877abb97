"""SM100 (Blackwell) BF16 x BF16: the tcgen05 kernels, compiled and statically checked, not
run on hardware."""

from __future__ import annotations

from ..heuristics import SM100
from ..heuristics import sm100_bf16 as heuristics
from ..jit.codegen_sm100 import sm100_kernel_spec
from . import sm90_bf16
from .family import Family

FAMILY = Family(
    arch=SM100,
    ab_dtype="bf16",
    heuristics=heuristics,
    kernel_spec=sm100_kernel_spec,
    # The kernels take SM90's params and TMA boxes, so SM90's launchers bind them.
    launcher_name=sm90_bf16.launcher_name,
    mxfp4_forms=(),
    hardware_checked=False,
    unsupported=heuristics.supported,
)
