"""The arch-neutral search: the legal candidates of a family, ranked by its cycle model.

A family (one module per arch x operand types, e.g. sm90_bf16.py) provides the candidates and a
cost; the ranking and its tie-breaks are shared so that every family resolves ties alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .config import GemmConfig


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
