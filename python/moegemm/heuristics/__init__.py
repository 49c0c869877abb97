"""Config selection: `select_config(desc, arch)` with a per-signature cache.

Modules: config.py (problem and config types), arch.py (per-arch facts), ragged.py (ragged
group statistics), waves.py (the wave model), search.py (ranking), and one module per arch x
operand types with its configs and cycle model: sm90_bf16.py, sm90_fp8_fp4.py (GemmDesc.ab_dtype
"fp8_fp4"), sm100_bf16.py and sm100_fp8_fp4.py (compiled and statically checked, not run on hardware),
each refusing by name what it has no kernel for.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator

from . import sm90_bf16, sm90_fp8_fp4, sm100_bf16, sm100_fp8_fp4
from .arch import ARCH_ALIASES, ARCHS, SM90, SM100, ArchSpec, arch_for, arch_for_compute_capability
from .config import GemmConfig, GemmDesc, LaunchConfig, Layout, PipelineConfig, StorageConfig
from .sm90_bf16 import CLUSTER_SHAPES, CONTIGUOUS_ALIGNMENT, SWAP_AB_KINDS, WALK_STRIPE_M

__all__ = [
    "ARCHS",
    "ARCH_ALIASES",
    "CLUSTER_SHAPES",
    "CONTIGUOUS_ALIGNMENT",
    "SM90",
    "SM100",
    "SWAP_AB_KINDS",
    "WALK_STRIPE_M",
    "ArchSpec",
    "GemmConfig",
    "GemmDesc",
    "LaunchConfig",
    "Layout",
    "PipelineConfig",
    "StorageConfig",
    "arch_for",
    "arch_for_compute_capability",
    "enumerate_configs",
    "estimate_cycles",
    "is_legal",
    "select_config",
    "selection_key",
]


# (arch name, GemmDesc.ab_dtype) -> the family module (GemmDesc refuses other operand types).
_FAMILIES = {
    (SM90.name, "bf16"): sm90_bf16,
    (SM90.name, "fp8_fp4"): sm90_fp8_fp4,
    (SM100.name, "bf16"): sm100_bf16,
    (SM100.name, "fp8_fp4"): sm100_fp8_fp4,
}


def _family(arch: ArchSpec, desc: GemmDesc):  # -> the family module
    family = _FAMILIES.get((arch.name, desc.ab_dtype))
    if family is None:
        raise ValueError(f"moegemm has no kernels for {arch.name} yet; SM90 (Hopper) is supported")
    return family


@functools.cache
def select_config(desc: GemmDesc, arch: ArchSpec) -> GemmConfig:
    """The config the heuristics pick; computed once per (problem, arch) signature."""
    config = _family(arch, desc).select(desc, arch)
    if os.environ.get("MOEGEMM_PRINT_CONFIGS"):
        print(f"moegemm: {desc} -> {config.short_name()} on {arch.name}", file=sys.stderr)
    return config


def enumerate_configs(desc: GemmDesc, arch: ArchSpec) -> Iterator[GemmConfig]:
    """The configs the heuristics rank for `desc` (single-CTA tiles; clusters and the other
    walk are legal but not enumerated)."""
    return _family(arch, desc).enumerate_configs(desc, arch)


def is_legal(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> bool:
    """Whether `config` computes `desc` on `arch` (what `config=` accepts)."""
    return _family(arch, desc).is_legal(config, desc, arch)


def estimate_cycles(config: GemmConfig, desc: GemmDesc, arch: ArchSpec) -> float:
    """The cycle model's estimate for `config` on `desc` (lower is better)."""
    return _family(arch, desc).estimate_cycles(config, desc, arch)


def selection_key(desc: GemmDesc, arch: ArchSpec) -> tuple:
    """Descs with equal keys get the same select_config on `arch`: the desc's fields with the
    rows replaced by exactly what the heuristics read of them (see sm90_bf16.selection_key).
    Lets callers that plan many row counts (the warmup) select once per key."""
    return (arch, _family(arch, desc).selection_key(desc))
