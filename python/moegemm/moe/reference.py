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


def fp8_round_trip(x: torch.Tensor, ue8m0: bool = False) -> torch.Tensor:
    """x quantized per token per 128 (per_token_cast_to_fp8) and dequantized, in FP32.
    ue8m0: power-of-two scales, what the SM100 FP8 x FP4 kernels take (a layer on SM100 must
    quantize that way, so its reference rounds that way too)."""
    from ..quant import per_token_cast_to_fp8

    a, sfa = per_token_cast_to_fp8(x, ue8m0=ue8m0)
    return a.float() * sfa.repeat_interleave(128, dim=-1)[..., : x.shape[-1]]


def expert_forward_fp8(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    activation: str,
    b13: torch.Tensor | None = None,
    b2: torch.Tensor | None = None,
    ue8m0: bool = False,
) -> torch.Tensor:
    """expert_forward with the MXFP4 layer's roundings: x through FP8 per 128, the SwiGLU
    output rounded to BF16 and through FP8 per 128 again (power-of-two scales with ue8m0);
    w13, w2 the dequantized FP32 weights in source order."""
    hu = fp8_round_trip(x, ue8m0) @ w13.float().t()
    if b13 is not None:
        hu = hu + b13.float()
    if activation == "silu":
        gate, up = hu.chunk(2, dim=-1)
    else:
        gate, up = hu[:, 0::2], hu[:, 1::2]
    h = swiglu(gate, up, activation).bfloat16()
    y = fp8_round_trip(h, ue8m0) @ w2.float().t()
    return y + b2.float() if b2 is not None else y


def fused_moe_reference_fp8(
    x, w13, w2, topk_weights, topk_ids, activation="silu", b13=None, b2=None, ue8m0=False
) -> torch.Tensor:
    """fused_moe_reference with expert_forward_fp8 (MXFP4 experts, dequantized weights)."""
    t, h = x.shape
    out = torch.zeros(t, h, dtype=torch.float32, device=x.device)
    ids = topk_ids.long()
    for expert in range(w13.shape[0]):
        tokens, choice = (ids == expert).nonzero(as_tuple=True)
        if tokens.numel() == 0:
            continue
        y = expert_forward_fp8(
            x[tokens], w13[expert], w2[expert], activation,
            None if b13 is None else b13[expert], None if b2 is None else b2[expert], ue8m0,
        )  # fmt: skip
        out.index_add_(0, tokens, y * topk_weights[tokens, choice].float()[:, None])
    return out
