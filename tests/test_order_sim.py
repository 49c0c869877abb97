"""The tile-order simulation behind the k-grouped and m-grouped schedulers' orders
(scripts/order_sim.py): the figures BENCHMARKS.md quotes, and that the new orders never balance
worse than the ones they replaced on the suites' cases. CPU only."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import order_sim
from bf16_cases import load_cases


def test_every_order_hands_out_every_tile_once() -> None:
    costs = [float(i % 7 + 1) for i in range(1000)]  # distinct-enough costs, 7.6 rounds
    for order in ("round-robin", "rotated", "snake", "greedy"):
        # The busiest CTA carries at least the mean, and the loads add up to the total.
        assert order_sim.busiest(costs, order) >= sum(costs) / order_sim.NUM_SMS
    load = [0.0] * 132
    for t, c in enumerate(costs):
        r, p = divmod(t, 132)
        load[(p - r) % 132] += c
    assert sum(load) == pytest.approx(sum(costs))


def test_sorted_order_is_largest_first_with_ties_by_index() -> None:
    assert order_sim.sorted_groups([5, 9, 0, 9, 5]) == [1, 3, 0, 4, 2]


def test_k_grouped_order_balances_the_ragged_case() -> None:
    """qwen3-30b wgrad (rows 1280-8192): round-robin in group order left the busiest CTA at
    1.35x the mean with 128 x 256 tiles; largest-first with snaking rounds, about 1.04x."""
    case = next(c for c in load_cases(("k_grouped",)) if c.index == 9)
    report = order_sim.k_grouped_report(case.rows, case.n, case.k, 128, 256)
    assert report["round-robin"] > 1.3
    assert report["sorted-snake"] < 1.05


@pytest.mark.parametrize("block_n", [256, 192, 128])
def test_k_grouped_order_never_much_worse_on_the_suite(block_n: int) -> None:
    for case in load_cases(("k_grouped",)):
        report = order_sim.k_grouped_report(case.rows, case.n, case.k, 128, block_n)
        assert report["sorted-snake"] <= report["round-robin"] + 0.01, case.name


def test_rotation_lets_cheaper_tails_shorten_the_busiest_cta() -> None:
    rows = order_sim.anchor_rows(256, 128)
    assert sum(rows) == 33896  # the gpt-oss anchor's total
    n_blocks = math.ceil(5760 / 240)
    for tail in (1.0, 0.6):
        costs = order_sim.m_grouped_costs(rows, 128, n_blocks, tail)
        assert len(costs) == 7992
        round_robin = order_sim.busiest(costs, "round-robin")
        assert round_robin == 61.0  # unrotated: some CTA draws only full blocks
        if tail < 1.0:
            assert order_sim.busiest(costs, "rotated") < 57.01 < round_robin
