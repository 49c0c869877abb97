"""The record type of a kernel family (`Family`) and the interface of its heuristics module."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from ..heuristics import ArchSpec, GemmConfig, GemmDesc
from ..jit.spec import KernelSpec


class Heuristics(Protocol):
    """What a family's heuristics module (moegemm.heuristics.sm90_bf16 etc.) provides."""

    def select(self, desc: GemmDesc, arch: ArchSpec) -> GemmConfig: ...

    def enumerate_configs(self, desc: GemmDesc, arch: ArchSpec) -> Iterator[GemmConfig]: ...

    def is_legal(self, config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool: ...

    def estimate_cycles(self, config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> float: ...

    def selection_key(self, desc: GemmDesc) -> tuple: ...


def moe_or_plain(desc: GemmDesc, plain: str, moe: str) -> str:
    """The launcher `moe` for the fused MoE layer's GEMMs (they pass bias and row-scale
    pointers), else `plain`."""
    return moe if desc.epilogue != "none" else plain


def nothing_skipped(desc: GemmDesc) -> str | None:
    """`Family.unsupported` of a family whose config selection itself raises ValueError, naming
    the reason, for a desc it has no kernel for: the warmup skips nothing ahead of it."""
    return None


def no_workspace(desc: GemmDesc, config: GemmConfig) -> tuple[int, int] | None:
    """`Family.workspace` of a family whose kernels need nothing beside their operands."""
    return None


@dataclass(frozen=True)
class Family:
    """Everything the layers above the JIT need to know about one arch x operand type.

    arch: the arch at its default SM count; lookups go by arch.name, since a caller's arch may
    carry another SM count (the heuristics are handed the caller's).
    heuristics: the configs, their legality and the cycle model.
    kernel_spec: the kernel a call of a desc compiles for a config.
    launcher_name: the `_C` launcher class a call of a desc binds with a config, by name, so that
    this layer needs no compiled module.
    workspace: (bytes, int32 words) a launch of a desc with a config needs besides its operands,
    allocated a call and passed after its pointers (the second zeroed), or None.
    mxfp4_forms: the GemmDesc.weights forms of MXFP4 weights the family takes (() for BF16).
    unsupported: why the family has no kernel for a desc, or None; what the warmup skips.
    hardware_checked: whether its kernels run on a GPU in the warmup's check; False for kernels
    that are compiled and statically checked only.
    """

    arch: ArchSpec
    ab_dtype: str
    heuristics: Heuristics
    kernel_spec: Callable[[GemmDesc, GemmConfig], KernelSpec]
    launcher_name: Callable[[GemmDesc, GemmConfig], str]
    mxfp4_forms: tuple[str, ...]
    hardware_checked: bool
    unsupported: Callable[[GemmDesc], str | None] = nothing_skipped
    workspace: Callable[[GemmDesc, GemmConfig], tuple[int, int] | None] = no_workspace

    @property
    def key(self) -> tuple[str, str]:
        """(arch name, GemmDesc.ab_dtype): what `lookup` matches."""
        return (self.arch.name, self.ab_dtype)
