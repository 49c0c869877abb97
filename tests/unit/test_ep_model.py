"""The expert-parallel reference model (python/moegemm/ep/reference.py) on CPU, R ranks
simulated in one process: its outputs equal the single-device fused_moe_reference per rank
(skewed routing, empty ranks, all tokens to one rank, T = 0 on a rank, dropped ids, MXFP4
roundings), its placement is the order the dispatch kernel computes step by step (per-CTA
histograms and warp ranks: tests/unit/test_moe_route_model.py's model, plus the earlier ranks'
counts), and capacity overflow drops exactly the rows past max_m. Plus the host buffer plan,
the multicast-off guards and the status word."""

from __future__ import annotations

import itertools
import random
import zlib

import pytest
import torch
from test_moe_route_model import model_route

from moegemm.ep import (
    MULTICAST_OFF,
    EPBufferPlan,
    dispatch_placement,
    ep_forward_reference,
    require_multicast_off,
    set_multicast_off,
)
from moegemm.ep.status import STATUS_OVERFLOW, STATUS_TIMEOUT, describe_status, encode_status
from moegemm.testing.moe_reference import fused_moe_reference, fused_moe_reference_fp8

H, I = 32, 16


def routing(t: int, k: int, e: int, gen: torch.Generator, hot: list[int] | None = None):
    """Distinct experts per token (as a router's top-k), from `hot` only when given."""
    pool = torch.tensor(hot) if hot else torch.arange(e)
    rows = [pool[torch.randperm(len(pool), generator=gen)[:k]] for _ in range(t)]
    ids = torch.stack(rows) if rows else torch.empty(0, k, dtype=torch.long)
    weights = torch.rand(t, k, generator=gen)
    return ids.reshape(t, k).to(torch.int32), weights


def experts(e: int, gen: torch.Generator):
    return (torch.randn(e, 2 * I, H, generator=gen) / 4, torch.randn(e, H, I, generator=gen) / 4)


CASES = {  # name: (world, experts, top_k, tokens per rank, hot experts or None)
    "uniform_r2": (2, 8, 2, [7, 5], None),
    "uniform_r4": (4, 16, 4, [9, 3, 6, 1], None),
    "one_rank": (1, 4, 2, [6], None),
    "skewed_to_rank0": (4, 16, 3, [8, 8, 8, 8], [0, 1, 2, 3]),
    "all_to_one_expert_rank": (2, 8, 2, [5, 7], [4, 5]),
    "empty_rank": (4, 8, 2, [6, 0, 4, 3], None),
    "all_empty_but_one": (2, 4, 1, [0, 5], None),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("fp8", [False, True])
def test_reference_equals_single_device_layer(name: str, fp8: bool) -> None:
    world, e, k, tokens, hot = CASES[name]
    # A stable seed per case: str hashes change with every process (PYTHONHASHSEED).
    gen = torch.Generator().manual_seed(zlib.crc32(name.encode()) % 1000)
    w13, w2 = experts(e, gen)
    xs = [torch.randn(t, H, generator=gen) for t in tokens]
    routed = [routing(t, k, e, gen, hot) for t in tokens]
    ids, weights = [r[0] for r in routed], [r[1] for r in routed]
    if name == "uniform_r4":  # dropped slots: -1 and an id past E
        ids[0][0, 0], ids[0][1, 1] = -1, e + 3
    b2 = torch.randn(e, H, generator=gen)
    outs, place = ep_forward_reference(xs, ids, weights, w13, w2, b2=b2, fp8=fp8)
    assert not place.overflow
    single = fused_moe_reference_fp8 if fp8 else fused_moe_reference
    for s in range(world):
        want = single(xs[s], w13, w2, weights[s], ids[s], b2=b2)
        assert outs[s].shape == (tokens[s], H)
        torch.testing.assert_close(outs[s], want, rtol=1e-5, atol=1e-5)
    # Every kept slot has a row; the owners' masked_m add up to the kept slots.
    kept = sum(int(((i >= 0) & (i < e)).sum()) for i in ids)
    assert sum(int(m.sum()) for m in place.masked_m) == kept


def test_placement_order_is_source_rank_then_slot() -> None:
    ids = [torch.tensor([[1, 0], [0, 1]], dtype=torch.int32),
           torch.tensor([[0, 3]], dtype=torch.int32)]  # fmt: skip
    place = dispatch_placement(ids, num_experts=4, max_m=8)
    # Expert 0 (rank 0, local 0): rank 0 slots 1 and 2, then rank 1 slot 0.
    assert place.src[0][0, :3].tolist() == [[0, 1], [0, 2], [1, 0]]
    assert place.masked_m[0].tolist() == [3, 2] and place.masked_m[1].tolist() == [0, 1]
    assert place.dest[1][0].tolist() == [[0, 0, 2], [1, 1, 0]]  # (owner, local, row)
    assert place.src[0][0, 3:].eq(-1).all()


def test_capacity_overflow_drops_the_rows_past_max_m() -> None:
    ids = [torch.zeros(5, 1, dtype=torch.int32), torch.zeros(4, 1, dtype=torch.int32)]
    place = dispatch_placement(ids, num_experts=2, max_m=6)
    assert place.overflow and place.masked_m[0].tolist() == [6]
    assert place.dest[0][:, 0, 2].tolist() == [0, 1, 2, 3, 4]
    assert place.dest[1][:, 0, 2].tolist() == [5, -1, -1, -1]


def model_dispatch_rows(ids: list[list[int]], e: int, spc: int, threads: int) -> list[list[int]]:
    """The dispatch kernel's row of every slot, step by step: the route kernel's per-CTA
    placement within the rank (model_route) gives each slot's rank among the rank's slots of
    its expert; the kernel adds the earlier ranks' counts of that expert (counts exchange)."""
    counts = [[sum(1 for x in rank_ids if x == ex) for ex in range(e)] for rank_ids in ids]
    rows = []
    for s, rank_ids in enumerate(ids):
        if not rank_ids:
            rows.append([])
            continue
        offs, slot_row, _ = model_route(rank_ids, e, spc, threads)
        starts = [offs[ex] - counts[s][ex] for ex in range(e)]
        before = [sum(counts[r][ex] for r in range(s)) for ex in range(e)]
        rows.append(
            [-1 if r < 0 else before[x] + r - starts[x] for x, r in zip(rank_ids, slot_row)]
        )
    return rows


@pytest.mark.parametrize("seed", range(4))
def test_the_kernels_steps_give_the_reference_placement(seed: int) -> None:
    rng = random.Random(seed)
    world, e, k = rng.choice([(2, 8, 2), (4, 16, 4), (3, 33, 3)])
    tokens = [rng.choice([0, 1, 17, 40]) for _ in range(world)]
    ids = [[rng.randrange(2) if seed % 2 else rng.choice([-1, *range(e)]) for _ in range(t * k)]
           for t in tokens]  # fmt: skip
    spc, threads = rng.choice([(5, 64), (64, 64), (70, 512)])
    rows = model_dispatch_rows(ids, e, spc, threads)
    place = dispatch_placement(
        [torch.tensor(i, dtype=torch.int32).reshape(-1, k) for i in ids], e, max_m=10**6
    )
    for s in range(world):
        assert place.dest[s][..., 2].reshape(-1).tolist() == rows[s]


def test_buffer_plan_layout() -> None:
    plan = EPBufferPlan(4, 256, 8, 7168, 128)
    assert plan.max_m == 512 and plan.experts_per_rank == 64 and plan.slots_per_rank == 1024
    offsets = plan.offsets()
    assert len(offsets) == 9 and all(o % 128 == 0 for o in offsets.values())
    spans = sorted((r.offset, r.offset + r.nbytes) for r in plan.regions.values())
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), "regions overlap"
    assert plan.regions["x_recv"].nbytes == 64 * 512 * 7168 * 2
    assert plan.regions["sfa_recv"].nbytes == 0
    assert plan.signal_bytes == plan.regions["recv_weight"].offset
    assert (
        max(
            r.offset
            for n, r in plan.regions.items()
            if n in ("count_flag", "dispatch_arrive", "combine_arrive", "counts")
        )
        < plan.signal_bytes
    )
    fp8 = EPBufferPlan(4, 256, 8, 7168, 128, fp8=True, max_m=100)
    assert fp8.regions["x_recv"].nbytes == 64 * 100 * 7168
    assert fp8.regions["sfa_recv"].shape == (64, 100, 56)
    # Grids depend on the plan only: equal on every rank, whatever each rank's T.
    ctas, spc, smem = plan.dispatch_grid(132)
    assert ctas * spc >= plan.slots_per_rank and ctas <= 132 and smem < 227 * 1024
    assert plan.combine_grid(132) <= 132


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"num_experts": 10}, ValueError, "split evenly"),
        ({"hidden": 12}, ValueError, "multiple of 8"),
        ({"world_size": 65, "num_experts": 65}, ValueError, "at most 64 ranks"),
        ({"num_experts": 2048, "world_size": 2}, ValueError, "at most 1024"),
        ({"top_k": 1.5}, TypeError, "top_k must be an int"),
        ({"max_tokens_per_rank": 0}, ValueError, "max_tokens_per_rank must be positive"),
    ],
)
def test_buffer_plan_refuses(kwargs, error, words) -> None:
    args = {"world_size": 4, "num_experts": 8, "top_k": 2, "hidden": 64,
            "max_tokens_per_rank": 4} | kwargs  # fmt: skip
    with pytest.raises(error, match=words):
        EPBufferPlan(**args)


def test_multicast_guards() -> None:
    env: dict[str, str] = {}
    with pytest.raises(RuntimeError, match="NCCL_NVLS_ENABLE unset"):
        require_multicast_off(env)
    set_multicast_off(env)
    assert env == MULTICAST_OFF
    require_multicast_off(env)
    env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "0"
    with pytest.raises(RuntimeError, match="TORCH_SYMM_MEM_DISABLE_MULTICAST='0'"):
        require_multicast_off(env)
    with pytest.raises(ValueError, match="turns it on"):
        set_multicast_off(env)


def test_status_words() -> None:
    assert describe_status(0, 5.0) is None
    text = describe_status(encode_status(STATUS_TIMEOUT, 1, 3), 5.0)
    assert "rank 3 never arrived in the counts exchange within 5 s" in text
    assert "the combine" in describe_status(encode_status(STATUS_TIMEOUT, 3, 0), 1.0)
    assert "expert 17 received more rows" in describe_status(
        encode_status(STATUS_OVERFLOW, 0, 17), 1.0
    )


def test_status_constants_match_the_header() -> None:
    from conftest import REPO

    header = (REPO / "include/moegemm/common/ep_params.h").read_text()
    assert f"kEpStatusTimeout = {STATUS_TIMEOUT}u" in header
    assert f"kEpStatusOverflow = {STATUS_OVERFLOW}u" in header
    for phase, name in ((1, "Counts"), (2, "Dispatch"), (3, "Combine")):
        assert f"kEpPhase{name} = {phase}u" in header
    # EpLayout's fields, named as the plan passes the offsets (off_<field>).
    from moegemm.ep.plan import LAYOUT_ORDER

    struct = header[
        header.index("struct EpLayout") : header.index("};", header.index("struct EpLayout"))
    ]
    fields = [line.split()[1].rstrip(";") for line in struct.splitlines()[1:] if "uint64_t" in line]
    assert tuple(fields) == LAYOUT_ORDER
