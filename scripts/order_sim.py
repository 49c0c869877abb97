"""Simulates how the persistent CTAs' static tile orders balance work (CPU only; the numbers
BENCHMARKS.md quotes for the tile orders come from here).

Each CTA's load is the sum of the costs of the tiles it is handed; the busiest CTA sets the
kernel time. Orders, as the kernels implement them:
  round-robin   tile t goes to CTA t mod S (both kernels before this change);
  rotated       round r's tiles go to the CTAs rotated by r (the m-grouped walk now);
  sorted-snake  k-grouped: groups largest first, rounds alternating direction (now);
  greedy        each tile to the least-loaded CTA (a dynamic scheduler; not built).
Costs: a k-grouped tile costs its group's k-blocks plus 3 for its epilogue; an m-grouped tile
costs 1, or `tail_cost` for a group's last m-block with at most 64 rows.

    python3 scripts/order_sim.py
"""

from __future__ import annotations

import heapq
import math
import random
import sys
from pathlib import Path

NUM_SMS = 132
K_GROUPED_EPILOGUE_KBLOCKS = 3


def k_grouped_costs(rows: list[int], m: int, n: int, block_m: int, block_n: int) -> list[float]:
    """Tile costs in group order (every group has the same m x n tiles)."""
    tiles_per_group = math.ceil(m / block_m) * math.ceil(n / block_n)
    return [
        float(math.ceil(r / 64) + K_GROUPED_EPILOGUE_KBLOCKS)
        for r in rows
        for _ in range(tiles_per_group)
    ]


def m_grouped_costs(rows: list[int], block_m: int, n_blocks: int, tail_cost: float) -> list[float]:
    """Tile costs in the grouped walk's order: per group, n-blocks outer, m-blocks inner."""
    costs = []
    for r in rows:
        m_blocks = math.ceil(r / block_m)
        for _ in range(n_blocks):
            for mb in range(m_blocks):
                costs.append(tail_cost if r - mb * block_m <= 64 else 1.0)
    return costs


def busiest(costs: list[float], order: str, ctas: int = NUM_SMS) -> float:
    """The busiest CTA's load under `order` (costs already in the walk's order)."""
    if order == "greedy":
        heap = [0.0] * ctas
        for c in costs:
            heapq.heapreplace(heap, heap[0] + c)
        return max(heap)
    load = [0.0] * ctas
    for t, c in enumerate(costs):
        r, p = divmod(t, ctas)
        if order == "round-robin":
            cta = p
        elif order == "rotated":  # round r hands position p to CTA (p - r) mod S
            cta = (p - r) % ctas
        elif order == "snake":
            cta = ctas - 1 - p if r % 2 else p
        else:
            raise ValueError(order)
        load[cta] += c
    return max(load)


def sorted_groups(rows: list[int]) -> list[int]:
    """The k-grouped order's group sequence: most rows first, ties by index."""
    return sorted(range(len(rows)), key=lambda g: (-rows[g], g))


def k_grouped_report(rows: list[int], m: int, n: int, block_m: int, block_n: int) -> dict:
    natural = k_grouped_costs(rows, m, n, block_m, block_n)
    ordered = k_grouped_costs([rows[g] for g in sorted_groups(rows)], m, n, block_m, block_n)
    mean = sum(natural) / NUM_SMS
    return {
        "round-robin": busiest(natural, "round-robin") / mean,
        "sorted-snake": busiest(ordered, "snake") / mean,
        "greedy": busiest(ordered, "greedy") / mean,
    }


def anchor_rows(expected_m: int, groups: int) -> list[int]:
    rng = random.Random(0)
    return [int(expected_m * rng.uniform(0.7, 1.3)) for _ in range(groups)]


def main() -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from bf16_cases import load_cases

    print("k-grouped suite: busiest CTA / mean load (128-row tiles)")
    print(f"{'case':58s} {'n':>4s} {'round-robin':>12s} {'sorted-snake':>13s} {'greedy':>7s}")
    for case in load_cases(("k_grouped",)):
        for block_n in (256, 192):
            r = k_grouped_report(case.rows, case.n, case.k, 128, block_n)
            print(f"{case.name[:58]:58s} {block_n:4d} {r['round-robin']:12.3f} "
                  f"{r['sorted-snake']:13.3f} {r['greedy']:7.3f}")  # fmt: skip

    rows = anchor_rows(256, 128)
    print(f"\ngpt-oss anchor rows ({sum(rows)} rows, 128 x 240 tiles): busiest CTA in tiles")
    for tail in (1.0, 0.8, 0.6, 0.5):
        costs = m_grouped_costs(rows, 128, math.ceil(5760 / 240), tail)
        cells = " ".join(
            f"{o} {busiest(costs, o):5.1f}" for o in ("round-robin", "rotated", "greedy")
        )
        print(
            f"tail cost {tail:.1f}: {len(costs)} tiles, mean {sum(costs) / NUM_SMS:5.1f}, {cells}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
