"""Per-architecture facts the heuristics need. SM counts come from the device when one is
present, or are given (the warmup CLI builds for a machine it does not run on)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class ArchSpec:
    name: str  # nvcc arch, e.g. "sm_90a"
    num_sms: int
    smem_budget: int  # dynamic shared memory a block may opt into, bytes
    l2_bytes: int
    # Cycle-model rates per SM per clock.
    mma_flops_per_clk: int  # dense BF16
    smem_bytes_per_clk: int
    l2_bytes_per_clk: float  # share of L2 bandwidth per SM when all SMs stream

    def with_num_sms(self, num_sms: int) -> ArchSpec:
        if num_sms <= 0:
            raise ValueError(f"num_sms must be positive, got {num_sms}")
        return replace(self, num_sms=num_sms)


SM90 = ArchSpec(
    name="sm_90a",
    num_sms=132,
    smem_budget=232448,
    l2_bytes=60 * 1024 * 1024,
    mma_flops_per_clk=4096,
    smem_bytes_per_clk=128,
    l2_bytes_per_clk=48.0,
)

# Built for the family target sm_100f (B200/B300 and later SM10x parts run one cubin); nvcc
# >= 12.9 knows it (jit/compiler.py refuses older ones). "sm_100a" is accepted as an alias.
SM100 = ArchSpec(
    name="sm_100f",
    num_sms=148,
    smem_budget=232448,
    l2_bytes=126 * 1024 * 1024,
    mma_flops_per_clk=8192,
    smem_bytes_per_clk=128,
    l2_bytes_per_clk=40.0,
)

ARCHS = {"sm_90a": SM90, "sm_100f": SM100}
ARCH_ALIASES = {"sm_100a": "sm_100f"}


def arch_for(name: str, num_sms: int | None = None) -> ArchSpec:
    try:
        spec = ARCHS[ARCH_ALIASES.get(name, name)]
    except KeyError:
        raise ValueError(f"unknown arch {name!r}; known: {sorted(ARCHS)}") from None
    return spec if num_sms is None else spec.with_num_sms(num_sms)


def arch_for_compute_capability(major: int, minor: int) -> str:
    if major == 9 and minor == 0:
        return "sm_90a"
    if major == 10 and minor in (0, 3):  # B200 and B300: the sm_100f family runs one cubin
        return "sm_100f"
    raise ValueError(
        f"moegemm supports SM90 (Hopper) and SM100/SM103 (Blackwell B200/B300) GPUs; this "
        f"device is sm_{major}{minor}"
    )
