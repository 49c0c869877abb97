"""The kernel families: one `Family` record per arch x operand type, found by
`lookup(arch, desc)`, and config selection dispatched through them: `select_config(desc, arch)`
(cached per signature), enumerate_configs, is_legal, estimate_cycles, selection_key.

Modules: family.py (the record type), and one per record: sm90_bf16.py, sm90_fp8_fp4.py,
sm100_bf16.py, sm100_fp8_fp4.py. A record names its heuristics module, its kernel-spec function
and its `_C` launcher; the layers above (api, warmup, moe, ep) ask it instead of comparing arch
or operand-type names. Layering: heuristics <- jit <- families <- api / warmup / moe / ep.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator

from ..heuristics import SM90, ArchSpec, GemmConfig, GemmDesc
from ..jit.spec import KernelSpec
from . import sm90_bf16, sm90_fp8_fp4, sm100_bf16, sm100_fp8_fp4
from .family import Family, Heuristics

__all__ = [
    "FAMILIES",
    "Family",
    "Heuristics",
    "enumerate_configs",
    "estimate_cycles",
    "for_operands",
    "is_legal",
    "kernel_spec",
    "lookup",
    "of_arch",
    "select_config",
    "selection_key",
]

FAMILIES: tuple[Family, ...] = (
    sm90_bf16.FAMILY,
    sm90_fp8_fp4.FAMILY,
    sm100_bf16.FAMILY,
    sm100_fp8_fp4.FAMILY,
)
_BY_KEY = {family.key: family for family in FAMILIES}


def for_operands(arch: ArchSpec, ab_dtype: str) -> Family:
    """The family of `arch` (by name, any SM count) for operands `ab_dtype`; ValueError where
    moegemm has none."""
    family = _BY_KEY.get((arch.name, ab_dtype))
    if family is None:
        raise ValueError(f"moegemm has no kernels for {arch.name} yet; SM90 (Hopper) is supported")
    return family


def lookup(arch: ArchSpec, desc: GemmDesc) -> Family:
    """The family that computes `desc` on `arch`; ValueError where moegemm has none."""
    return for_operands(arch, desc.ab_dtype)


def of_arch(arch: ArchSpec) -> tuple[Family, ...]:
    """The families of `arch` (by name), one per operand type."""
    return tuple(family for family in FAMILIES if family.arch.name == arch.name)


def kernel_spec(desc: GemmDesc, config: GemmConfig, arch: ArchSpec = SM90) -> KernelSpec:
    """The kernel a call of `desc` compiles for `config` on `arch`: what the API loads and the
    warmup builds."""
    return lookup(arch, desc).kernel_spec(desc, config)


@functools.cache
def select_config(desc: GemmDesc, arch: ArchSpec) -> GemmConfig:
    """The config the heuristics pick; computed once per (problem, arch) signature."""
    config = lookup(arch, desc).heuristics.select(desc, arch)
    if os.environ.get("MOEGEMM_PRINT_CONFIGS"):
        print(f"moegemm: {desc} -> {config.short_name()} on {arch.name}", file=sys.stderr)
    return config


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> Iterator[GemmConfig]:
    """The configs the heuristics rank for `desc` (single-CTA tiles; clusters and the other
    walk are legal but not enumerated)."""
    return lookup(arch, desc).heuristics.enumerate_configs(desc, arch)


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """Whether `config` computes `desc` on `arch` (what `config=` accepts)."""
    return lookup(arch, desc).heuristics.is_legal(config, desc, arch)


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> float:
    """The cycle model's estimate for `config` on `desc` (lower is better)."""
    return lookup(arch, desc).heuristics.estimate_cycles(config, desc, arch)


def selection_key(desc: GemmDesc, arch: ArchSpec) -> tuple:
    """Descs with equal keys get the same select_config on `arch`: the desc's fields with the
    rows replaced by exactly what the heuristics read of them (see the selection_key of
    heuristics/sm90_bf16.py). Lets callers that plan many row counts (the warmup) select once
    per key."""
    return (arch, lookup(arch, desc).heuristics.selection_key(desc))
