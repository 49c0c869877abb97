"""Interleaved twin timing shared by the twin scripts (scripts/order_twins.py, cluster_twins.py,
tile_probe.py): every build is checked against the FP32 reference first, then all builds are
timed in turn, `rounds` times, so drift in the machine's clocks hits each alike."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

from heuristic_quality import TOL


def check_and_time(
    prob: Any,
    timer: Callable[[Any], float],
    builds: Mapping[Hashable, Any],
    select: Callable[[Hashable], None] = lambda key: None,
    rounds: int = 3,
) -> tuple[dict[Hashable, float], list[str]]:
    """({key: median time}, []) for every build of `builds` (key -> config), or ({}, failures)
    when a build's result is off. `prob` is a heuristic_quality.Problem (check(config) ->
    calc_diff, timed(config) -> runner); `select(key)` runs before each check and timing of that
    key's build (e.g. to switch the stage variant a forced config is built with)."""
    bad = []
    for key, config in builds.items():
        select(key)
        diff = prob.check(config)
        if not diff < TOL:
            bad.append(f"{key}: calc_diff {diff:.2e}")
    if bad:
        return {}, bad
    samples: dict[Hashable, list[float]] = {key: [] for key in builds}
    for _ in range(rounds):
        for key, config in builds.items():
            select(key)
            samples[key].append(timer(prob.timed(config)))
    return {key: sorted(s)[len(s) // 2] for key, s in samples.items()}, []
