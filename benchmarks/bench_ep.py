"""Expert parallelism over the GPUs of one host: moegemm.ep.EPMoE against NCCL in
the same run. NOT YET RUN: written without a multi-GPU machine.

    python benchmarks/bench_ep.py --ranks 2 [--models deepseek-v3,qwen3-235b]
        [--tokens 1,8,32,128,512,2048,8192] [--weights bf16|mxfp4] [--json out.json]
    python benchmarks/bench_ep.py --ranks 1 ...   # the whole path in one process, one GPU

One process per GPU (torch.multiprocessing; NCCL group; NVLink multicast off in every
process). Per model and T tokens per rank (uniform routing, distinct experts per token), each
rank's layer time, the slowest rank's counted (all_reduce MAX), CUDA events over eager calls:

  ep        EPMoE.forward: dispatch kernel -> fused_moe_masked -> combine kernel (no host sync)
  ep_graph  the same forward replayed from a CUDA graph
  ep_2mb    two half-size micro-batches, two EPMoE on two streams (half the SMs each): the
            split path overlapped
  nccl      all_to_all_single of the counts (a host sync for the splits), of the rows and
            expert ids -> moegemm.fused_moe on the local experts -> all_to_all_single back ->
            the routing-weighted sum (torch)
--ranks 1 has no communication: ep is the EP path on one GPU, nccl is moegemm.fused_moe.
speedup = nccl / min(ep, ep_graph, ep_2mb); targets: >= 1.5 at T <= 256, >= 1.1 at
2048-8192. nvlink_gbps: the bytes a rank sends to other ranks per forward (rows out and
expert rows back) / ep time, beside a plain peer copy's GB/s (pct_p2p). Every row checks EP
against the NCCL path (calc_diff < 1e-5) and EPMoE.check() (no timeout, no overflow).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import traceback

import torch
from ep_cases import MODELS, RANKS, TOKENS, max_m_for, nvlink_bytes, parse_list, verdicts

ITERS, WARMUP = 20, 3
TOL = 1e-5


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, choices=RANKS, default=2)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    ap.add_argument("--weights", choices=("bf16", "mxfp4"), default="bf16")
    ap.add_argument(
        "--capacity",
        type=float,
        default=4.0,
        help="max_m = capacity x the uniform mean rows per expert (0: every token)",
    )
    ap.add_argument("--no-overlap", action="store_true", help="skip the two-micro-batch column")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)  # fmt: skip
    try:
        args.models = parse_list(args.models, tuple(MODELS), str)
        args.tokens = parse_list(args.tokens)
    except ValueError as err:  # one line and exit 2, not a traceback
        ap.error(str(err))
    return args


# -- timing -----------------------------------------------------------------------------------


def time_us(fn, group) -> float:
    """µs per call of fn, the slowest rank's (every rank calls fn the same number of times)."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    _barrier(group)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(ITERS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return _max_over_ranks(start.elapsed_time(end) * 1e3 / ITERS, group)


def _barrier(group) -> None:
    if group is not None:
        import torch.distributed as dist

        dist.barrier(group=group)


def _max_over_ranks(value: float, group) -> float:
    if group is None:
        return value
    import torch.distributed as dist

    t = torch.tensor([value], device="cuda")
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t.item())


def graph_of(fn):
    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    return graph.replay


def p2p_copy_gbps(group, rank: int, world: int, nbytes: int = 1 << 28) -> float:
    """A plain copy of nbytes into the next rank's symmetric buffer (copy engine; a local
    device copy with one rank), GB/s."""
    if group is None:
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        return nbytes / time_us(lambda: dst.copy_(src), None) / 1e3
    import torch.distributed._symmetric_memory as symm_mem

    buf = symm_mem.empty(nbytes, dtype=torch.uint8, device="cuda")
    handle = symm_mem.rendezvous(buf, group)
    peer = handle.get_buffer((rank + 1) % world, (nbytes,), torch.uint8)
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    return nbytes / time_us(lambda: peer.copy_(src), group) / 1e3


# -- inputs and the NCCL path -----------------------------------------------------------------


def local_experts(model, el: int, rank: int, weights: str):
    """This rank's experts (random, scaled), prepared; MXFP4 quantized 16 experts at a time."""
    import moegemm
    from moegemm.quant import quantize_mxfp4

    gen = torch.Generator(device="cuda").manual_seed(rank)
    h, i = model.hidden, model.intermediate
    w13 = torch.randn(el, 2 * i, h, generator=gen, device="cuda").div_(h**0.5).bfloat16()
    w2 = torch.randn(el, h, i, generator=gen, device="cuda").div_(i**0.5).bfloat16()
    if weights == "bf16":
        return moegemm.prepare_moe_weights(w13), w2
    q13 = [quantize_mxfp4(w13[s : s + 16].float()) for s in range(0, el, 16)]
    q2 = [quantize_mxfp4(w2[s : s + 16].float()) for s in range(0, el, 16)]
    w13q = tuple(torch.cat([q[j] for q in q13]) for j in range(2))
    w2q = tuple(torch.cat([q[j] for q in q2]) for j in range(2))
    return moegemm.prepare_moe_weights(w13q), w2q


def routing(model, t: int, seed: int):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    scores = torch.rand(t, model.experts, generator=gen, device="cuda")
    ids = scores.topk(model.top_k, dim=1).indices.int()
    w = torch.rand(t, model.top_k, generator=gen, device="cuda")
    x = torch.randn(t, model.hidden, generator=gen, device="cuda").bfloat16()
    return x, ids, w


def nccl_forward(x, ids, w, w13, w2, group, world: int, el: int):
    """The NCCL reference path for one rank (a host sync for the split sizes)."""
    import torch.distributed as dist

    import moegemm

    t, k = ids.shape
    h = x.shape[1]
    if group is None:
        return moegemm.fused_moe(x, w13, w2, w, ids)
    flat = ids.reshape(-1).long()
    dest = flat // el
    order = torch.argsort(dest, stable=True)
    send = torch.bincount(dest, minlength=world)
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    sc, rc = send.tolist(), recv.tolist()
    send_x = x[order // k]
    recv_x = x.new_empty(sum(rc), h)
    dist.all_to_all_single(recv_x, send_x, rc, sc, group=group)
    send_e = (flat[order] % el).int()
    recv_e = send_e.new_empty(sum(rc))
    dist.all_to_all_single(recv_e, send_e, rc, sc, group=group)
    n = recv_x.shape[0]
    ones = torch.ones(n, 1, device=x.device)
    y = moegemm.fused_moe(recv_x, w13, w2, ones, recv_e[:, None])
    back = torch.empty_like(send_x)
    dist.all_to_all_single(back, y, sc, rc, group=group)
    rows = torch.empty_like(back)
    rows[order] = back
    return (rows.view(t, k, h).float() * w[..., None]).sum(1).bfloat16()


# -- one rank ---------------------------------------------------------------------------------


def run_rank(rank: int, world: int, args: argparse.Namespace, group) -> list[dict]:
    from moegemm.ep import EPMoE

    rows = []
    p2p = p2p_copy_gbps(group, rank, world)
    for name in args.models:
        model = MODELS[name]
        el = model.experts // world
        w13, w2 = local_experts(model, el, rank, args.weights)
        for t in args.tokens:
            row = {"model": name, "ranks": world, "weights": args.weights, "tokens": t,
                   "p2p_gbps": p2p}  # fmt: skip
            try:
                row.update(measure(model, t, world, rank, el, w13, w2, args, group, EPMoE, p2p))
            except (RuntimeError, ValueError) as e:
                if world > 1:  # the other ranks' collectives would wait for this one
                    raise
                row["error"] = f"{type(e).__name__}: {e}"  # one GPU: report it, run the rest
                traceback.print_exc()
            rows.append(row)
            if rank == 0:
                print(format_row(row), flush=True)
    return rows


def measure(model, t, world, rank, el, w13, w2, args, group, ep_class, p2p: float) -> dict:
    from moegemm.testing import calc_diff

    cap = args.capacity or None
    max_m = max_m_for(model, t, world, cap)
    ep = ep_class(group, model.experts, model.top_k, model.hidden, model.intermediate,
                  args.weights, t, activation=model.activation, max_m=max_m)  # fmt: skip
    ep.warmup(w13, w2)
    x, ids, w = routing(model, t, seed=1000 * rank + t)
    out = torch.empty(t, model.hidden, dtype=torch.bfloat16, device="cuda")
    ep.forward(x, ids, w, w13, w2, out=out)
    ref = nccl_forward(x, ids, w, w13, w2, group, world, el)
    ep.check()
    diff = calc_diff(out, ref)
    res = {"max_m": max_m, "ep_mib": ep.nbytes / 2**20, "calc_diff": diff, "ok": diff < TOL}
    res["ep_us"] = time_us(lambda: ep.forward(x, ids, w, w13, w2, out=out), group)
    res["ep_graph_us"] = time_us(graph_of(lambda: ep.forward(x, ids, w, w13, w2, out=out)),
                                 group)  # fmt: skip
    res["ep_2mb_us"] = None
    if not args.no_overlap and t >= 2 and t % 2 == 0:
        res["ep_2mb_us"] = overlapped_us(model, t, ep_class, args, group, max_m, x, ids, w, w13,
                                         w2)  # fmt: skip
    res["nccl_us"] = time_us(lambda: nccl_forward(x, ids, w, w13, w2, group, world, el), group)
    ep.check()
    best = min(v for v in (res["ep_us"], res["ep_graph_us"], res["ep_2mb_us"]) if v)
    res["speedup"] = res["nccl_us"] / best
    owner = ids.long() // el
    out_rows = int((owner != rank).sum())
    back = _rows_returned(ids, el, rank, world, group)
    moved = nvlink_bytes(out_rows, back, model.hidden, args.weights == "mxfp4")
    res["nvlink_gbps"] = moved / res["ep_us"] / 1e3
    res["pct_p2p"] = res["nvlink_gbps"] / p2p if world > 1 else None
    return res


def _rows_returned(ids, el: int, rank: int, world: int, group) -> int:
    """Rows this rank's experts return to other ranks: other ranks' slots routed here."""
    if group is None:
        return 0
    import torch.distributed as dist

    mine = (ids.long() // el) == torch.arange(world, device=ids.device)[:, None, None]
    sent = mine.sum((1, 2))  # slots this rank sends each owner
    got = torch.empty_like(sent)
    dist.all_to_all_single(got, sent, group=group)
    got[rank] = 0
    return int(got.sum())


def overlapped_us(model, t, ep_class, args, group, max_m, x, ids, w, w13, w2) -> float:
    """Two micro-batches of t/2 tokens, each its own EPMoE on its own stream, half the SMs each
    (so neither fills the GPU with CTAs waiting for the other's signals)."""
    from moegemm.launch.device import arch_for_device

    half = t // 2
    budget = max(1, arch_for_device(torch.cuda.current_device()).num_sms // 2)
    eps = [ep_class(group, model.experts, model.top_k, model.hidden, model.intermediate,
                    args.weights, half, activation=model.activation,
                    max_m=max(1, max_m // 2), sm_budget=budget) for _ in range(2)]  # fmt: skip
    for ep in eps:
        ep.warmup(w13, w2)
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]
    outs = [torch.empty(half, model.hidden, dtype=torch.bfloat16, device="cuda") for _ in eps]
    parts = [(x[:half], ids[:half], w[:half]), (x[half:], ids[half:], w[half:])]

    def both() -> None:
        current = torch.cuda.current_stream()
        for ep, stream, (xp, ip, wp), o in zip(eps, streams, parts, outs):
            stream.wait_stream(current)
            with torch.cuda.stream(stream):
                ep.forward(xp.contiguous(), ip.contiguous(), wp.contiguous(), w13, w2, out=o)
        for stream in streams:
            current.wait_stream(stream)

    us = time_us(both, group)
    for ep in eps:
        ep.check()
    return us


def format_row(row: dict) -> str:
    if "error" in row:
        return f"{row['model']:12} T={row['tokens']:5} R={row['ranks']} ERROR {row['error']}"

    def f(v):
        return "-" if v is None else f"{v:8.1f}"

    return (
        f"{row['model']:12} T={row['tokens']:5} R={row['ranks']} {row['weights']:5} "
        f"ep {f(row['ep_us'])} graph {f(row['ep_graph_us'])} 2mb {f(row['ep_2mb_us'])} "
        f"nccl {f(row['nccl_us'])} us  x{row['speedup']:.2f}  nvlink {row['nvlink_gbps']:.0f} "
        f"GB/s (p2p {row['p2p_gbps']:.0f})  diff {row['calc_diff']:.1e}"
    )


# -- processes --------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, args: argparse.Namespace) -> None:
    from moegemm.ep import set_multicast_off

    set_multicast_off()
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, device_id=torch.device("cuda", rank))  # fmt: skip
    try:
        rows = run_rank(rank, world, args, dist.group.WORLD)
        if rank == 0:
            report(rows, args)
    finally:
        dist.destroy_process_group()


def report(rows: list[dict], args: argparse.Namespace) -> None:
    summary = verdicts([r for r in rows if "error" not in r])
    for v in summary:
        print(f"R={v['ranks']} {v['weights']} {v['band']}: geomean x{v['geomean']:.2f}, min "
              f"x{v['min']:.2f} (target x{v['target']}): {'met' if v['met'] else 'MISSED'}")  # fmt: skip
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "verdicts": summary, "args": vars(args)}, fh, indent=1)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_ep: no CUDA GPU visible", file=sys.stderr)
        return 2
    if args.ranks > torch.cuda.device_count():
        print(f"bench_ep: --ranks {args.ranks} needs {args.ranks} GPUs, "
              f"{torch.cuda.device_count()} visible", file=sys.stderr)  # fmt: skip
        return 2
    from moegemm.ep import set_multicast_off

    set_multicast_off()  # inherited by the spawned ranks, and read by this one
    if args.ranks == 1:
        report(run_rank(0, 1, args, None), args)
        return 0
    import torch.multiprocessing as mp

    mp.spawn(_rank_main, args=(args.ranks, _free_port(), args), nprocs=args.ranks, join=True)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
