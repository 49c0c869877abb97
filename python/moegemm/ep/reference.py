"""A pure-torch model of expert-parallel dispatch and combine (CPU or GPU tensors, R ranks
simulated in one process): where each (token, choice) lands, and what each rank's output is.
It pins the kernels' contract (include/moegemm/ep/): tests check it against
moegemm.moe.reference.fused_moe_reference, and the GPU tests check the kernels
against it.

Placement. Expert e lives on rank e // E_local as local expert e % E_local. On its owner, an
expert's rows are ordered by (source rank, source slot), slot = t * top_k + j: row of (s, slot)
= sum over ranks s' < s of s' slots routed to e + s's slots routed to e before slot. Rows at or
past max_m are dropped (overflow). Ids outside [0, E) are dropped (no row, nothing summed).
Combine. A kept slot's expert row, scaled by its routing weight, returns to its source slot;
each token sums its kept slots in choice order (j increasing) in FP32.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..moe.reference import expert_forward, expert_forward_fp8


@dataclass
class Placement:
    """dest[s]: int64 [T_s, k, 3] of (owner rank, local expert, row), -1 where dropped.
    masked_m[d]: int64 [E_local] rows local expert got (clamped to max_m); src[d]: int64
    [E_local, max_m, 2] of (source rank, slot), -1 past masked_m; overflow: any row dropped
    for capacity."""

    dest: list[torch.Tensor]
    masked_m: list[torch.Tensor]
    src: list[torch.Tensor]
    overflow: bool


def dispatch_placement(topk_ids: list[torch.Tensor], num_experts: int, max_m: int) -> Placement:
    """Where every (token, choice) of every rank lands; topk_ids[s] int [T_s, k] global ids."""
    world = len(topk_ids)
    if world < 1 or num_experts % world:
        raise ValueError(f"{num_experts} experts do not split over {world} ranks")
    el = num_experts // world
    k = topk_ids[0].shape[1] if topk_ids[0].dim() == 2 else 1
    ids = [t.reshape(-1).long().cpu() for t in topk_ids]
    # counts[s, e]: rank s's slots routed to expert e (the matrix the kernels all-gather).
    counts = torch.zeros(world, num_experts, dtype=torch.long)
    for s, flat in enumerate(ids):
        kept = flat[(flat >= 0) & (flat < num_experts)]
        counts[s] = torch.bincount(kept, minlength=num_experts)
    before_rank = counts.cumsum(0) - counts  # [s, e]: earlier ranks' slots of e
    dest, overflow = [], False
    src = [torch.full((el, max_m, 2), -1, dtype=torch.long) for _ in range(world)]
    for s, flat in enumerate(ids):
        d = torch.full((flat.numel(), 3), -1, dtype=torch.long)
        seen = torch.zeros(num_experts, dtype=torch.long)
        for slot, e in enumerate(flat.tolist()):
            if not 0 <= e < num_experts:
                continue
            row = int(before_rank[s, e] + seen[e])
            seen[e] += 1
            if row >= max_m:
                overflow = True
                continue
            owner, local = divmod(e, el)
            d[slot] = torch.tensor([owner, local, row])
            src[owner][local, row] = torch.tensor([s, slot])
        dest.append(d.reshape(-1, k, 3))
    totals = counts.sum(0).reshape(world, el)
    masked_m = [totals[r].clamp(max=max_m) for r in range(world)]
    return Placement(dest, masked_m, src, overflow)


def ep_forward_reference(
    xs: list[torch.Tensor],
    topk_ids: list[torch.Tensor],
    topk_weights: list[torch.Tensor],
    w13: torch.Tensor,
    w2: torch.Tensor,
    *,
    activation: str = "silu",
    b13: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    max_m: int | None = None,
    fp8: bool = False,
) -> tuple[list[torch.Tensor], Placement]:
    """Every rank's [T_s, H] FP32 output of the expert-parallel forward, computed the way the
    kernels move data: rows placed by dispatch_placement into each owner's masked layout,
    each owner's experts run on its rows (w13 [E, 2I, H], w2 [E, H, I] the gathered experts in
    source layout, FP32 math; fp8: the MXFP4 path's roundings with dequantized weights), the
    weighted rows returned to their slots and summed in choice order."""
    world = len(xs)
    e_total = w13.shape[0]
    el = e_total // world
    if max_m is None:
        max_m = world * max((x.shape[0] for x in xs), default=1)
    place = dispatch_placement(topk_ids, e_total, max(max_m, 1))
    h = xs[0].shape[1]
    forward = expert_forward_fp8 if fp8 else expert_forward
    dev = xs[0].device
    # Owner side: received rows per local expert, the expert on them, weights applied.
    returned = [torch.zeros(x.shape[0], topk_ids[s].shape[1], h, device=dev)
                for s, x in enumerate(xs)]  # fmt: skip
    for owner in range(world):
        for local in range(el):
            m = int(place.masked_m[owner][local])
            if m == 0:
                continue
            src = place.src[owner][local, :m]
            rows = torch.stack([xs[s][slot // topk_ids[s].shape[1]] for s, slot in src.tolist()])
            e = owner * el + local
            y = forward(rows, w13[e], w2[e], activation,
                        None if b13 is None else b13[e], None if b2 is None else b2[e])  # fmt: skip
            for (s, slot), row in zip(src.tolist(), y):
                k = topk_ids[s].shape[1]
                weight = topk_weights[s].reshape(-1)[slot].float()
                returned[s][slot // k, slot % k] = row * weight
    # Source side: kept slots summed in choice order.
    outs = []
    for s, x in enumerate(xs):
        out = torch.zeros(x.shape[0], h, device=dev)
        kept = (place.dest[s][..., 0] >= 0).to(dev)
        for j in range(topk_ids[s].shape[1]):
            out += torch.where(kept[:, j, None], returned[s][:, j], torch.zeros((), device=dev))
        outs.append(out)
    return outs, place
