"""The arch-neutral search: the legal candidates of a family, ranked by its cycle model.

A family (one module per arch x operand types, e.g. sm90_bf16.py) provides the candidates and a
cost; the ranking and its tie-breaks are shared so that every family resolves ties alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from .arch import ArchSpec
from .config import GemmConfig, GemmDesc

Enumerate = Callable[[GemmDesc, ArchSpec], Iterable[GemmConfig]]
IsLegal = Callable[[GemmConfig, GemmDesc, ArchSpec], bool]


def rank_key(config: GemmConfig, cycles: float) -> tuple:
    """Cheapest first (whole cycles, so that model noise does not decide); ties go to the
    larger tile (less L2 traffic), then to more stages, then to no cluster."""
    lay = config.layout
    return (
        round(cycles),
        -lay.block_m * lay.block_n,
        -lay.block_m,
        -config.pipeline.num_stages,
        lay.cluster_size,
    )


def best_config(
    candidates: Sequence[GemmConfig], cost: Callable[[GemmConfig], float], what: str
) -> GemmConfig:
    """The first config of minimal rank_key; ValueError naming `what` when there is none."""
    if not candidates:
        raise ValueError(f"no legal config for {what}")
    return min(candidates, key=lambda c: rank_key(c, cost(c)))


def legal_configs(
    desc: GemmDesc, arch: ArchSpec, enumerate_configs: Enumerate, is_legal: IsLegal
) -> tuple[GemmConfig, ...]:
    """The configs a family enumerates for `desc` that it also finds legal, in enumeration
    order."""
    return tuple(c for c in enumerate_configs(desc, arch) if is_legal(c, desc, arch))


def memoized_legal_configs(
    memo: dict[tuple, tuple[GemmConfig, ...]],
    key: tuple,
    desc: GemmDesc,
    arch: ArchSpec,
    enumerate_configs: Enumerate,
    is_legal: IsLegal,
) -> tuple[GemmConfig, ...]:
    """legal_configs, kept in `memo` under (key, arch) for every desc with the same `key`: what
    the family's enumeration and legality read of a desc, so that the few keys bound it."""
    found = memo.get((key, arch))
    if found is None:
        found = memo[(key, arch)] = legal_configs(desc, arch, enumerate_configs, is_legal)
    return found


def select_legal(
    desc: GemmDesc,
    arch: ArchSpec,
    enumerate_configs: Enumerate,
    is_legal: IsLegal,
    estimate_cycles: Callable[[GemmConfig, GemmDesc, ArchSpec], float],
    family: str,
) -> GemmConfig:
    """best_config among a family's legal_configs by its cycle model; `family` names it in the
    error where there is none."""
    return best_config(
        legal_configs(desc, arch, enumerate_configs, is_legal),
        lambda c: estimate_cycles(c, desc, arch),
        f"{family} {desc}",
    )
