"""A Python model of the route kernel's placement (include/moegemm/moe/route_gather.cuh),
step by step as the kernel runs it (per CTA: the histograms, warp 0's chunked scan, batches of
kThreads slots ranked by warp count tables and __match_any_sync, the first warp's base
update), checked against route_reference on random routings with dropped and out-of-range
ids. It pins the algorithm the GPU tests then check on the device."""

from __future__ import annotations

import random

import pytest
import torch

from moegemm.testing.moe_reference import route_reference


def model_route(ids: list[int], num_experts: int, slots_per_cta: int, threads: int):
    """(offs, slot_row, row_slot) as the kernel writes them."""
    e_count, warps, n = num_experts, threads // 32, len(ids)
    slot_row: list[int | None] = [None] * n
    row_slot: dict[int, int] = {}
    offs: list[int | None] = [None] * e_count
    for cta in range(-(-n // slots_per_cta)):
        first = min(cta * slots_per_cta, n)
        last = min(first + slots_per_cta, n)
        counts, bases = [0] * e_count, [0] * e_count
        table = [[0] * e_count for _ in range(warps)]
        for s, e in enumerate(ids):  # 1. histograms
            if 0 <= e < e_count:
                counts[e] += 1
                bases[e] += s < first
        chunk = -(-e_count // 32)  # 2. warp 0: lane l scans experts [l * chunk, ...)
        start = 0
        for lane in range(32):
            for e in range(min(lane * chunk, e_count), min(lane * chunk + chunk, e_count)):
                bases[e] += start
                if cta == 0:
                    offs[e] = start + counts[e]
                start += counts[e]
        for batch in range(first, last, threads):  # 3. placement
            slot = [batch + t for t in range(threads)]
            keep = [s < last and 0 <= ids[s] < e_count for s in slot]
            key = [ids[s] if k else -1 for s, k in zip(slot, keep)]
            rank = []
            for t in range(threads):
                lanes = range(t // 32 * 32, t // 32 * 32 + 32)
                rank.append(sum(1 for u in lanes if u < t and key[u] == key[t]))
                if keep[t] and rank[t] == 0:
                    table[t // 32][key[t]] = sum(1 for u in lanes if key[u] == key[t])
            before = [sum(table[w][key[t]] for w in range(t // 32)) if keep[t] else 0
                      for t in range(threads)]  # fmt: skip
            for t in range(threads):
                if keep[t]:
                    row = bases[key[t]] + before[t] + rank[t]
                    assert row not in row_slot
                    slot_row[slot[t]], row_slot[row] = row, slot[t]
                elif slot[t] < last:
                    slot_row[slot[t]] = -1
            for t in range(threads):  # the expert's first warp in the batch moves its base
                if keep[t] and rank[t] == 0 and before[t] == 0:
                    bases[key[t]] += sum(table[w][key[t]] for w in range(t // 32, warps))
            for t in range(threads):
                if keep[t] and rank[t] == 0:
                    table[t // 32][key[t]] = 0
    return offs, slot_row, [row_slot[r] for r in range(len(row_slot))]


CASES = [  # (tokens, top_k, experts, slots_per_cta, threads, seed)
    (1, 8, 256, 1, 64, 0),
    (3, 2, 8, 5, 64, 1),
    (40, 6, 64, 32, 64, 2),
    (97, 4, 3, 100, 64, 3),
    (64, 8, 1024, 513, 64, 4),
    (300, 1, 1, 2048, 64, 5),
    (130, 8, 33, 70, 512, 6),
]


@pytest.mark.parametrize("tokens,top_k,experts,spc,threads,seed", CASES)
def test_the_kernels_placement_is_the_stable_expert_order(tokens, top_k, experts, spc, threads,
                                                          seed) -> None:  # fmt: skip
    rng = random.Random(seed)
    ids = [
        rng.choice([-1, experts, experts + 5]) if rng.random() < 0.1 else rng.randrange(experts)
        for _ in range(tokens * top_k)
    ]
    if seed % 3 == 0:  # a hot expert: most slots in one warp share it
        ids = [rng.randrange(min(experts, 2)) for _ in ids]
    offs, slot_row, row_slot = model_route(ids, experts, spc, threads)
    ref = route_reference(torch.tensor(ids, dtype=torch.int32).reshape(tokens, top_k), experts)
    assert offs == ref["offs"].tolist()
    assert slot_row == ref["slot_row"].tolist()
    assert row_slot == ref["row_slot"].tolist()
