"""The kernel a GEMM call compiles: `kernel_spec(desc, config, arch)`, SM90's (codegen.py) or
SM100's (codegen_sm100.py). What the API loads and the warmup builds."""

from __future__ import annotations

from ..heuristics import SM90
from ..heuristics.config import GemmConfig, GemmDesc
from .codegen import sm90_kernel_spec
from .codegen_sm100 import sm100_kernel_spec
from .spec import KernelSpec


def kernel_spec(desc: GemmDesc, config: GemmConfig, arch: str = SM90.name) -> KernelSpec:
    """The kernel a call of `desc` compiles for `config` on `arch` (an ArchSpec name)."""
    if arch == SM90.name:
        return sm90_kernel_spec(desc, config)
    return sm100_kernel_spec(desc, config)
