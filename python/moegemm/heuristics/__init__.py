"""The heuristics: problem and config types, per-arch facts, and one config-selection and cycle
model per arch x operand types (moegemm.families dispatches to them and caches the picks).

Modules: config.py (problem and config types), arch.py (per-arch facts), ragged.py (ragged
group statistics), waves.py (the wave model), search.py (ranking), and one module per arch x
operand types with its configs and cycle model: sm90_bf16.py, sm90_fp8_fp4.py (GemmDesc.ab_dtype
"fp8_fp4"; the configs on prepared weights in sm90_fp8_fp4_table.py, the decode kernel's in
sm90_fp8_fp4_decode.py, what the three share in sm90_fp8_fp4_tiles.py), sm100_bf16.py and
sm100_fp8_fp4.py (compiled and statically checked, not run on hardware; the FP8 x FP4 one builds
on the BF16 one's skeleton and model), each refusing by name what it has no kernel for. Nothing
here imports the families or the JIT.
"""

from __future__ import annotations

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
]
