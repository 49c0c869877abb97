"""SM100 selection. No SM100 kernel exists yet: asking for one is a clear error, not a guess."""

from __future__ import annotations

from .arch import ArchSpec
from .config import GemmConfig, GemmDesc


def select_config(desc: GemmDesc, arch: ArchSpec) -> GemmConfig:
    raise ValueError(
        f"moegemm has no SM100 kernel for {desc.kind} yet (arch {arch.name}); "
        "SM90 (Hopper) is supported"
    )
