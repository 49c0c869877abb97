"""What the JIT compiles: one generated source holding exactly one kernel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SUPPORTED_ARCHS = ("sm_90a", "sm_100a", "sm_100f")


@dataclass(frozen=True)
class KernelSpec:
    """A kernel to compile: a short name (used in cache folder names), its full generated `.cu`
    source, the target arch (`sm_90a`, `sm_100f`, or `sm_100a`) and extra nvcc flags.

    The source includes `moegemm/...` headers by angle brackets; everything else the cubin
    depends on (include tree, CUTLASS version, flags) enters the cache key."""

    name: str
    source: str
    arch: str = "sm_90a"
    extra_flags: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.arch not in SUPPORTED_ARCHS:
            raise ValueError(f"arch must be one of {SUPPORTED_ARCHS}, got {self.arch!r}")
        if not self.name or not all(ch.isalnum() or ch in "_-" for ch in self.name):
            raise ValueError(f"kernel name must be [A-Za-z0-9_-]+, got {self.name!r}")

    def to_json(self) -> dict[str, Any]:
        """The spec as a JSON object (how the warmup hands a kernel to a build process)."""
        return {
            "name": self.name,
            "source": self.source,
            "arch": self.arch,
            "extra_flags": list(self.extra_flags),
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> KernelSpec:
        return cls(
            name=obj["name"],
            source=obj["source"],
            arch=obj.get("arch", "sm_90a"),
            extra_flags=tuple(obj.get("extra_flags", ())),
        )
