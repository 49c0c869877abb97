"""Config selection: `select_config(desc, arch)` with a per-signature cache."""

from __future__ import annotations

import functools
import os
import sys

from . import sm90, sm100
from .arch import ARCHS, SM90, SM100, ArchSpec, arch_for, arch_for_compute_capability
from .sm90 import CONTIGUOUS_ALIGNMENT
from .config import GemmConfig, GemmDesc, LaunchConfig, Layout, PipelineConfig, StorageConfig

__all__ = [
    "ARCHS",
    "CONTIGUOUS_ALIGNMENT",
    "SM90",
    "SM100",
    "ArchSpec",
    "GemmConfig",
    "GemmDesc",
    "LaunchConfig",
    "Layout",
    "PipelineConfig",
    "StorageConfig",
    "arch_for",
    "arch_for_compute_capability",
    "select_config",
]


@functools.cache
def select_config(desc: GemmDesc, arch: ArchSpec) -> GemmConfig:
    """The config the heuristics pick; computed once per (problem, arch) signature."""
    if arch.name == "sm_90a":
        config = sm90.select(desc, arch)
    else:
        config = sm100.select_config(desc, arch)
    if os.environ.get("MOEGEMM_PRINT_CONFIGS"):
        print(f"moegemm: {desc} -> {config.short_name()} on {arch.name}", file=sys.stderr)
    return config
