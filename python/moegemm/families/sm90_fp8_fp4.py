"""SM90 (Hopper) FP8 x FP4 (GemmDesc.ab_dtype "fp8_fp4"): FP8 activations, MXFP4 weights in
the checkpoint's layout ("raw") or prepare_mxfp4_weights' ("prepared": the table kernels, and on
windowed weights the convert-ahead kernel; its launches and those of the decode kernel with its
last wave split along K take a workspace)."""

from __future__ import annotations

from ..heuristics import SM90, GemmConfig, GemmDesc
from ..heuristics import sm90_fp8_fp4 as heuristics
from ..heuristics import sm90_fp8_fp4_convert_ahead as convert_ahead
from ..jit.codegen import sm90_kernel_spec
from .family import Family, moe_or_plain


def _convert_ahead(desc: GemmDesc, config: GemmConfig) -> bool:
    return desc.weights == "prepared" and convert_ahead.is_convert_ahead(config)


def launcher_name(desc: GemmDesc, config: GemmConfig) -> str:
    if _convert_ahead(desc, config):
        return moe_or_plain(
            desc, "Sm90Fp8Fp4ConvertAheadGemmLauncher", "Sm90Fp8Fp4ConvertAheadMoeGemmLauncher"
        )
    if config.layout.split_tail:
        return moe_or_plain(
            desc, "Sm90Fp8Fp4TableSplitGemmLauncher", "Sm90Fp8Fp4TableSplitMoeGemmLauncher"
        )
    if desc.weights == "prepared":  # the table kernels read their own params
        return moe_or_plain(desc, "Sm90Fp8Fp4TableGemmLauncher", "Sm90Fp8Fp4TableMoeGemmLauncher")
    return moe_or_plain(desc, "Sm90Fp8Fp4GemmLauncher", "Sm90Fp8Fp4MoeGemmLauncher")


def workspace(desc: GemmDesc, config: GemmConfig) -> tuple[int, int] | None:
    """The convert-ahead kernel's E4M3 copy and ready flags, the split decode kernel's partial
    sums and their tickets; nothing for the other kernels."""
    if _convert_ahead(desc, config):
        return convert_ahead.workspace_bytes(desc)
    if config.layout.split_tail:
        return split_tail_workspace(config)
    return None


def split_tail_workspace(config: GemmConfig) -> tuple[int, int]:
    """A slot a CTA, at most one CTA an SM (no SM90 part has more SMs than SM90.num_sms): the
    tile's FP32 sums (block_m tokens x block_n weight rows) and a ticket a math warpgroup."""
    lay = config.layout
    return SM90.num_sms * lay.block_m * lay.block_n * 4, SM90.num_sms * (lay.block_n // 64)


FAMILY = Family(
    arch=SM90,
    ab_dtype="fp8_fp4",
    heuristics=heuristics,
    kernel_spec=sm90_kernel_spec,
    launcher_name=launcher_name,
    mxfp4_forms=("raw", "prepared"),
    hardware_checked=True,
    workspace=workspace,
)
