"""SM90 (Hopper) BF16 x BF16: the wgmma kernels, dense, m-grouped and k-grouped."""

from __future__ import annotations

from ..heuristics import SM90, GemmConfig, GemmDesc
from ..heuristics import sm90_bf16 as heuristics
from ..jit.codegen import sm90_kernel_spec
from .family import Family, moe_or_plain


def launcher_name(desc: GemmDesc, config: GemmConfig) -> str:
    """The BF16 launchers (SM100's BF16 kernels share their params and TMA boxes)."""
    plain = "Bf16KGroupedLauncher" if desc.kind == "k_grouped" else "Bf16GemmLauncher"
    return moe_or_plain(desc, plain, "Bf16MoeGemmLauncher")


FAMILY = Family(
    arch=SM90,
    ab_dtype="bf16",
    heuristics=heuristics,
    kernel_spec=sm90_kernel_spec,
    launcher_name=launcher_name,
    mxfp4_forms=(),
    hardware_checked=True,
)
