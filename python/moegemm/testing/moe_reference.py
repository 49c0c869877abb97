"""FP32 references of the fused MoE layer (tests and benchmarks): built from the weights in
their source layout (not the kernel's order), so a mistake in prepare_moe_weights shows."""

from __future__ import annotations

import torch


def swiglu(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    if activation == "silu":
        return torch.nn.functional.silu(gate) * up
    gate = gate.clamp(max=7.0)
    up = up.clamp(-7.0, 7.0)
    return (up + 1) * gate * torch.sigmoid(1.702 * gate)


def expert_forward(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    activation: str,
    b13: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
) -> torch.Tensor:
    """One expert on rows x [r, H] in FP32: w13 [2I, H] in the source layout of `activation`
    (silu: gate rows then up rows; swiglu_oai: interleaved), w2 [H, I]."""
    hu = x.float() @ w13.float().t()
    if b13 is not None:
        hu = hu + b13.float()
    if activation == "silu":
        gate, up = hu.chunk(2, dim=-1)
    else:
        gate, up = hu[:, 0::2], hu[:, 1::2]
    y = swiglu(gate, up, activation) @ w2.float().t()
    return y + b2.float() if b2 is not None else y


def fused_moe_reference(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu",
    b13: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
) -> torch.Tensor:
    """[T, H] FP32: sum over each token's choices with an id in [0, E) of weight * expert."""
    t, h = x.shape
    e = w13.shape[0]
    out = torch.zeros(t, h, dtype=torch.float32, device=x.device)
    ids = topk_ids.long()
    for expert in range(e):
        tokens, choice = (ids == expert).nonzero(as_tuple=True)
        if tokens.numel() == 0:
            continue
        y = expert_forward(
            x[tokens], w13[expert], w2[expert], activation,
            None if b13 is None else b13[expert], None if b2 is None else b2[expert],
        )  # fmt: skip
        out.index_add_(0, tokens, y * topk_weights[tokens, choice].float()[:, None])
    return out


def route_reference(topk_ids: torch.Tensor, num_experts: int) -> dict[str, torch.Tensor]:
    """What the route kernel must write, in torch: offs [E] (end rows), slot_row [T * k] (-1 for
    dropped slots) and row_slot [kept] in the stable expert order (expert, then slot)."""
    ids = topk_ids.reshape(-1).long()
    kept = (ids >= 0) & (ids < num_experts)
    slots = torch.arange(ids.numel(), device=ids.device)
    key = torch.where(kept, ids, torch.full_like(ids, num_experts))
    order = torch.sort(key * ids.numel() + slots).indices  # stable by construction
    row_slot = order[: int(kept.sum())]
    slot_row = torch.full_like(ids, -1)
    slot_row[row_slot] = torch.arange(row_slot.numel(), device=ids.device)
    counts = torch.bincount(ids[kept], minlength=num_experts)
    return {
        "offs": counts.cumsum(0).to(torch.int32),
        "slot_row": slot_row.to(torch.int32),
        "row_slot": row_slot.to(torch.int32),
    }
