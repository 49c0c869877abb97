"""SM100 selection for what has no SM100 kernel yet (FP8 x FP4): a clear error, not a guess.
BF16 has its kernels in sm100_bf16.py."""

from __future__ import annotations

from .arch import ArchSpec
from .config import GemmConfig, GemmDesc


def select_config(desc: GemmDesc, arch: ArchSpec) -> GemmConfig:
    raise ValueError(
        f"moegemm has no SM100 kernel for {desc.ab_dtype} {desc.kind} yet (arch {arch.name}); "
        "SM90 (Hopper) supports it"
    )
