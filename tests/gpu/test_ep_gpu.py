"""EPMoE on 2 (and 4, where present) GPUs of one host, one process per GPU through
torch.multiprocessing (NCCL group, torch symmetric memory, NVLink multicast off in every
process). Skipped with fewer than 2 GPUs. NOT YET RUN: written without a multi-GPU machine.

  test_matches_single_gpu      per scenario (uniform, skewed, T = 0 on a rank, all tokens to
                               one rank's experts, no tokens to a rank, dropped ids), several
                               forwards on one layer (the epochs advance): the output against
                               single-GPU fused_moe on the gathered experts (calc_diff < 1e-5),
                               and, for BF16, bitwise against the split path rebuilt on one GPU
                               (the same masked GEMMs per owner on the reference placement, the
                               same FP32 choice-order sum)
  test_graph_replay            a forward captured in a CUDA graph, replayed with new routing
                               and tokens: equal to eager forwards; eager forwards under
                               torch.cuda.set_sync_debug_mode("error") (no host sync)
  test_missing_rank            a rank that never calls forward, or dies after construction:
                               the others' check() names it within the timeout, no hang
"""

from __future__ import annotations

import os
import socket
import time
import traceback
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu

E, K, H, I, TMAX = 16, 4, 512, 256, 64
SCENARIOS = ("uniform", "skewed", "t0_on_last", "all_to_rank0", "none_to_last", "dropped")
JOIN_TIMEOUT_S = 300


def world_sizes() -> list[int]:
    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [w for w in (2, 4) if w <= n] or [2]


@pytest.fixture(autouse=True)
def _two_gpus() -> None:
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("expert parallelism needs at least 2 GPUs")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, name: str, *args, tmp_path: Path, dies: int | None = None) -> None:
    """Runs `name`(rank, world, *args) in `world` processes; fails with the first rank's
    traceback, or after JOIN_TIMEOUT_S (a hang) with every process killed."""
    import torch.multiprocessing as mp

    ctx = mp.start_processes(
        _worker, args=(world, _free_port(), name, args, str(tmp_path), dies), nprocs=world,
        join=False, start_method="spawn",
    )  # fmt: skip
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    try:
        while not ctx.join(timeout=5):
            if time.monotonic() > deadline:
                pytest.fail(f"{name}: ranks still running after {JOIN_TIMEOUT_S} s (a hang)")
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        pytest.fail(f"{name}: {e}")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    for r in range(world):
        err = tmp_path / f"rank{r}.err"
        assert not err.exists(), err.read_text()
        if r != dies:
            assert (tmp_path / f"rank{r}.ok").exists(), f"rank {r} did not finish"


def _worker(rank: int, world: int, port: int, name: str, args: tuple, out: str, dies) -> None:
    from moegemm.ep import set_multicast_off

    set_multicast_off()  # before NCCL and symmetric memory read the environment
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))  # fmt: skip
    try:
        globals()[name](rank, world, *args)
        Path(out, f"rank{rank}.ok").write_text("ok")
    except BaseException:
        Path(out, f"rank{rank}.err").write_text(traceback.format_exc())
        raise
    finally:
        if dies is not None:  # a peer is gone: tearing NCCL down could wait for it
            os._exit(0)
        dist.destroy_process_group()


# -- inputs, the same on every rank (each rank rebuilds every rank's inputs) ------------------


def full_experts(weight_dtype: str):
    """The gathered experts: (source-layout BF16 or MXFP4 w13, w2), deterministic."""
    from moegemm.quant import quantize_mxfp4

    gen = torch.Generator().manual_seed(0)
    w13 = (torch.randn(E, 2 * I, H, generator=gen) / H**0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=gen) / I**0.5).bfloat16()
    if weight_dtype == "mxfp4":
        return quantize_mxfp4(w13.float()), quantize_mxfp4(w2.float())
    return w13, w2


def local_experts(w13, w2, rank: int, world: int, dev):
    import moegemm

    el = E // world
    part = slice(rank * el, (rank + 1) * el)
    if isinstance(w13, tuple):
        return (moegemm.prepare_moe_weights(tuple(t[part].to(dev) for t in w13)),
                tuple(t[part].to(dev) for t in w2))  # fmt: skip
    return moegemm.prepare_moe_weights(w13[part].to(dev)), w2[part].to(dev)


def scenario_inputs(name: str, world: int, step: int):
    """Per rank (x [T, H] BF16, ids int32 [T, K], weights FP32 [T, K]) on the CPU."""
    el = E // world
    inputs = []
    for r in range(world):
        gen = torch.Generator().manual_seed(1000 * step + 10 * r + SCENARIOS.index(name))
        t = 0 if name == "t0_on_last" and r == world - 1 else int(
            torch.randint(1, TMAX + 1, (1,), generator=gen))  # fmt: skip
        pool = torch.arange(E)
        if name == "skewed":
            pool = torch.tensor([0, 1, 2, 3, el, E - 1])
        elif name == "all_to_rank0":
            pool = torch.arange(el)
        elif name == "none_to_last":
            pool = torch.arange(E - el)
        assert len(pool) >= K, "a scenario's pool holds at least top_k experts"
        rows = [pool[torch.randperm(len(pool), generator=gen)[:K]] for _ in range(t)]
        ids = (torch.stack(rows) if rows else torch.empty(0, K, dtype=torch.long)).int()
        if name == "dropped" and t:
            ids[0, 0] = -1
            ids[t - 1, K - 1] = E + 1
        x = (torch.randn(t, H, generator=gen)).bfloat16()
        w = torch.rand(t, K, generator=gen)
        inputs.append((x, ids, w))
    return inputs


def split_reference(inputs, w13, w2, rank: int, world: int, max_m: int, dev) -> torch.Tensor:
    """This rank's output through the split path rebuilt on one GPU: every owner's masked
    layout from the reference placement, the same fused_moe_masked call (same shapes, same
    expected_m, so the same kernels) and the same FP32 choice-order sum."""
    import moegemm
    from moegemm.ep import dispatch_placement
    from moegemm.ep.layer import expected_rows

    el = E // world
    place = dispatch_placement([ids for _, ids, _ in inputs], E, max_m)
    returned = {}
    for d in range(world):
        w13_d, w2_d = local_experts(w13, w2, d, world, dev)
        x_recv = torch.zeros(el, max_m, H, dtype=torch.bfloat16, device=dev)
        row_w = torch.zeros(el, max_m, device=dev)
        for le in range(el):
            for row, (s, slot) in enumerate(place.src[d][le].tolist()):
                if s < 0:
                    break
                x_s, _, w_s = inputs[s]
                x_recv[le, row] = x_s[slot // K].to(dev)
                row_w[le, row] = w_s.reshape(-1)[slot]
        masked = place.masked_m[d].int().to(dev)
        expected = expected_rows(TMAX, world, K, E, max_m)  # as EPMoE: from max_tokens_per_rank
        y = moegemm.fused_moe_masked(x_recv, masked, w13_d, w2_d, expected, row_weight=row_w)
        for le in range(el):
            for row, (s, slot) in enumerate(place.src[d][le].tolist()):
                if s == rank:
                    returned[slot] = y[le, row].float()
    t = inputs[rank][0].shape[0]
    acc = torch.zeros(t, H, device=dev)
    for j in range(K):
        for tok in range(t):
            if tok * K + j in returned:
                acc[tok] += returned[tok * K + j]
    return acc.bfloat16()


# -- the ranks' bodies ------------------------------------------------------------------------


def _matches_single_gpu(rank: int, world: int, weight_dtype: str) -> None:
    import torch.distributed as dist

    import moegemm
    from moegemm.ep import EPMoE
    from moegemm.testing import calc_diff

    dev = torch.device("cuda", rank)
    w13, w2 = full_experts(weight_dtype)
    w13_l, w2_l = local_experts(w13, w2, rank, world, dev)
    w13_full = moegemm.prepare_moe_weights(
        tuple(t.to(dev) for t in w13) if isinstance(w13, tuple) else w13.to(dev))  # fmt: skip
    w2_full = tuple(t.to(dev) for t in w2) if isinstance(w2, tuple) else w2.to(dev)
    ep = EPMoE(dist.group.WORLD, E, K, H, I, weight_dtype, TMAX, timeout_s=20.0)
    ep.warmup(w13_l, w2_l)  # no rank compiles inside a forward
    for step, name in enumerate(SCENARIOS * 2):  # twice: later epochs reuse the buffers
        inputs = scenario_inputs(name, world, step)
        x, ids, w = (t.to(dev) for t in inputs[rank])
        out = ep.forward(x, ids, w, w13_l, w2_l).clone()
        ep.check()
        if x.shape[0]:
            ref = moegemm.fused_moe(x, w13_full, w2_full, w, ids)
            diff = calc_diff(out, ref)
            assert diff < 1e-5, f"{name} step {step} rank {rank}: calc_diff {diff}"
        if weight_dtype == "bf16":
            split = split_reference(inputs, w13, w2, rank, world, ep.max_m, dev)
            assert torch.equal(out, split), f"{name} rank {rank}: not bitwise the split path"


def _graph_replay(rank: int, world: int) -> None:
    import torch.distributed as dist

    from moegemm.ep import EPMoE

    dev = torch.device("cuda", rank)
    w13, w2 = full_experts("bf16")
    w13_l, w2_l = local_experts(w13, w2, rank, world, dev)
    ep = EPMoE(dist.group.WORLD, E, K, H, I, "bf16", TMAX, timeout_s=20.0)
    ep.warmup(w13_l, w2_l)
    x = torch.zeros(TMAX, H, dtype=torch.bfloat16, device=dev)
    ids = torch.full((TMAX, K), -1, dtype=torch.int32, device=dev)
    w = torch.zeros(TMAX, K, device=dev)
    static_out = torch.empty(TMAX, H, dtype=torch.bfloat16, device=dev)
    ep.forward(x, ids, w, w13_l, w2_l, out=static_out)  # plans built, kernels loaded
    torch.cuda.synchronize()
    dist.barrier()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        ep.forward(x, ids, w, w13_l, w2_l, out=static_out)
    torch.cuda.current_stream().wait_stream(stream)
    for step, name in enumerate(("uniform", "skewed", "t0_on_last", "uniform")):
        xi, idi, wi = scenario_inputs(name, world, 100 + step)[rank]
        t = xi.shape[0]
        x.zero_(), ids.fill_(-1), w.zero_()  # padding slots dropped
        x[:t], ids[:t], w[:t] = xi.to(dev), idi.to(dev), wi.to(dev)
        graph.replay()
        replayed = static_out.clone()
        torch.cuda.set_sync_debug_mode("error")  # an eager forward must not sync
        eager = ep.forward(x, ids, w, w13_l, w2_l).clone()
        torch.cuda.set_sync_debug_mode("default")
        ep.check()
        assert torch.equal(replayed, eager), f"replay {step} differs from eager"


def _missing_rank(rank: int, world: int, mode: str) -> None:
    import torch.distributed as dist

    from moegemm.ep import EPMoE

    dev = torch.device("cuda", rank)
    w13, w2 = full_experts("bf16")
    w13_l, w2_l = local_experts(w13, w2, rank, world, dev)
    timeout = 2.0
    ep = EPMoE(dist.group.WORLD, E, K, H, I, "bf16", TMAX, timeout_s=timeout)
    ep.warmup(w13_l, w2_l)  # every rank: the missing one goes missing afterwards
    missing = world - 1
    if rank == missing:
        if mode == "dies":
            os._exit(0)
        dist.barrier()  # never calls forward; waits for the others to finish their checks
        return
    x, ids, w = (t.to(dev) for t in scenario_inputs("uniform", world, 0)[rank])
    start = time.monotonic()
    ep.forward(x, ids, w, w13_l, w2_l)
    torch.cuda.synchronize()
    elapsed = time.monotonic() - start
    with pytest.raises(RuntimeError, match=f"rank {missing} never arrived"):
        ep.check()
    # The counts wait times out; every later wait of the forward gives up at once.
    assert elapsed < 2 * timeout + 5, f"took {elapsed:.1f} s"
    if mode != "dies":
        dist.barrier()


# -- the tests --------------------------------------------------------------------------------


@pytest.mark.parametrize("world", world_sizes())
@pytest.mark.parametrize("weight_dtype", ["bf16", "mxfp4"])
def test_matches_single_gpu(world: int, weight_dtype: str, tmp_path: Path) -> None:
    run_ranks(world, "_matches_single_gpu", weight_dtype, tmp_path=tmp_path)


@pytest.mark.parametrize("world", world_sizes())
def test_graph_replay(world: int, tmp_path: Path) -> None:
    run_ranks(world, "_graph_replay", tmp_path=tmp_path)


@pytest.mark.parametrize("mode", ["skips", "dies"])
def test_missing_rank(mode: str, tmp_path: Path) -> None:
    run_ranks(2, "_missing_rank", mode, tmp_path=tmp_path, dies=1 if mode == "dies" else None)
