"""The fused MoE layer against in-run peers on one H200.

For each model of moe_cases.MODELS and T of moe_cases.TOKENS (routing given: distinct experts
per token from a skewed load), the layer's time per call, CUDA-graph timed: each variant is
captured with ROUTINGS different routings (so consecutive calls touch different experts and no
call finds its weights in L2) and replayed; per call = replay time / ROUTINGS.

  ours          moegemm.fused_moe with a workspace (four launches; --weights mxfp4: the same
                experts quantized to MXFP4, five launches, the peers on their dequantized
                BF16 values)
  torch         the same layer from torch ops: argsort, gather, torch._grouped_mm with offs,
                SwiGLU, torch._grouped_mm, routing weight, index_add_
  moegemm comp  that composition with moegemm's grouped GEMMs (m_grouped_..._contiguous, offs)
Ceilings in the run: a 1 GiB device copy by an SM kernel, graph-timed like the rows (touched
experts' weight bytes / time against it; a captured memcpy becomes a copy-engine node, 19% slower
on an H100) and cuBLAS BF16 8192^3 (the layer's real FLOPs / time against it). Every row is
checked once against the FP32 reference of the whole layer (calc_diff < 1e-5) before it is timed.
The workspace size is reported per row. --pdl on (the default, as the library's) launches
moegemm's kernels with programmatic dependent launch, off without; --pdl both times ours each
way, interleaved, and adds a PDL column. --json writes everything, with the GPU, torch, commit and
UTC date of the run (bench_common.run_info, as bench_bf16.py and bench_fp8_fp4.py record them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
from bench_common import run_info
from moe_cases import MODELS, TOKENS, add_metrics, regime_for, targets

import moegemm
from moegemm.testing import calc_diff
from moegemm.testing.moe_reference import fused_moe_reference, fused_moe_reference_fp8, swiglu

ROUTINGS = 4
TOL, TOL_MXFP4 = 1e-5, 1e-4


def time_graph(calls: list, replays: int = 20) -> float:
    """µs per call of `calls` (no-argument callables), captured in one CUDA graph."""
    for call in calls:
        call()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for call in calls:
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / replays / len(calls))
    return sorted(times)[len(times) // 2]


class Layer:
    """One model's weights (source layout for the peers, prepared for ours); with mxfp4 ours
    are MXFP4 and the peers' BF16 weights their dequantized values."""

    def __init__(self, m, weights: str = "bf16") -> None:
        g = torch.Generator(device="cuda").manual_seed(0)
        e, h, i = m.experts, m.hidden, m.intermediate
        self.m, self.mxfp4 = m, weights == "mxfp4"
        self.w13 = (torch.randn(e, 2 * i, h, device="cuda", generator=g) / h**0.5).bfloat16()
        self.w2 = (torch.randn(e, h, i, device="cuda", generator=g) / i**0.5).bfloat16()
        self.b13 = torch.randn(e, 2 * i, device="cuda", generator=g) * 0.1 if m.bias else None
        self.b2 = torch.randn(e, h, device="cuda", generator=g) * 0.1 if m.bias else None
        self.w2_ours = self.w2
        w13_ours = self.w13
        if self.mxfp4:
            from moegemm.quant import dequantize_mxfp4

            w13_ours, w2_raw = quantize_by_expert(self.w13), quantize_by_expert(self.w2)
            # Exact: E2M1 x 2^s fits BF16. Expert by expert, as quantized, to bound temporaries.
            self.w13 = torch.cat([dequantize_mxfp4(b, s).bfloat16()
                                  for b, s in zip(*map(chunks, w13_ours))])  # fmt: skip
            self.w2 = torch.cat([dequantize_mxfp4(b, s).bfloat16()
                                 for b, s in zip(*map(chunks, w2_raw))])  # fmt: skip
            self.w2_ours = moegemm.prepare_mxfp4_weights(*w2_raw)
        self.prepared = moegemm.prepare_moe_weights(
            w13_ours, activation=m.activation, w13_bias=self.b13
        )

    def routing(self, t: int, seed: int):
        g = torch.Generator(device="cuda").manual_seed(seed)
        e, k = self.m.experts, self.m.top_k
        load = 1.0 / torch.arange(1, e + 1, device="cuda", dtype=torch.float32) ** 1.2
        load = load[torch.randperm(e, device="cuda", generator=g)]
        ids = torch.multinomial(load.expand(t, e), k, replacement=False, generator=g)
        w = torch.rand(t, k, device="cuda", generator=g)
        x = torch.randn(t, self.m.hidden, device="cuda", generator=g).bfloat16()
        return x, ids.to(torch.int32).contiguous(), (w / w.sum(-1, keepdim=True)).contiguous()

    def composition(self, x, ids, weights, grouped_mm):
        """The layer from torch glue around `grouped_mm(a, b [E, N, K], offs) -> [rows, N]`."""
        t, k = ids.shape
        e = self.m.experts
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        tokens = order // k
        counts = torch.histc(flat.float(), bins=e, min=0, max=e)
        offs = counts.cumsum(0).to(torch.int32)
        hu = grouped_mm(x[tokens], self.w13, offs)
        if self.b13 is not None:
            hu = hu + self.b13.repeat_interleave(counts.long(), dim=0, output_size=t * k)
        if self.m.activation == "silu":
            gate, up = hu.float().chunk(2, dim=-1)
        else:
            gate, up = hu.float()[:, 0::2], hu.float()[:, 1::2]
        y = grouped_mm(swiglu(gate, up, self.m.activation).bfloat16(), self.w2, offs).float()
        if self.b2 is not None:
            y = y + self.b2.repeat_interleave(counts.long(), dim=0, output_size=t * k)
        y = y * weights.reshape(-1)[order, None]
        out = torch.zeros(t, self.m.hidden, device="cuda", dtype=torch.float32)
        return out.index_add_(0, tokens, y).bfloat16()


QUANT_CHUNK = 16  # experts quantized at a time: DeepSeek-V3's whole w13 needs ~90 GB of temporaries


def chunks(t: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return torch.split(t, QUANT_CHUNK)


def quantize_by_expert(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_mxfp4 of [E, N, K] weights, QUANT_CHUNK experts at a time."""
    from moegemm.quant import quantize_mxfp4

    parts = [quantize_mxfp4(c) for c in chunks(w)]
    return torch.cat([b for b, _ in parts]), torch.cat([s for _, s in parts])


def torch_grouped_mm(a, b, offs):
    return torch._grouped_mm(a, b.transpose(-2, -1), offs=offs)


def moegemm_grouped_mm(a, b, offs):
    d = torch.empty(a.shape[0], b.shape[1], device="cuda", dtype=torch.bfloat16)
    return moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)


def run_row(layer: Layer, t: int, pdl: str = "on") -> dict:
    """One row; pdl "both" times ours with programmatic dependent launch off and on (the
    switch is read when a graph captures the launches), "on"/"off" leave the switch as set."""
    m = layer.m
    row = {
        "model": m.name,
        "tokens": t,
        "regime": regime_for(t),
        "weights": "mxfp4" if layer.mxfp4 else "bf16",
    }
    sets = [layer.routing(t, seed) for seed in range(ROUTINGS)]
    dtype = "mxfp4" if layer.mxfp4 else "bf16"
    ws = moegemm.MoEWorkspace(t, m.top_k, m.experts, m.hidden, m.intermediate, dtype)
    row["workspace_bytes"] = ws.nbytes
    outs = [torch.empty(t, m.hidden, device="cuda", dtype=torch.bfloat16) for _ in sets]

    def ours(i: int):
        x, ids, w = sets[i]
        return lambda: moegemm.fused_moe(x, layer.prepared, layer.w2_ours, w, ids,
                                         w2_bias=layer.b2, out=outs[i], workspace=ws)  # fmt: skip

    x, ids, w = sets[0]
    outs[0].fill_(float("nan"))
    ours(0)()
    reference = fused_moe_reference_fp8 if layer.mxfp4 else fused_moe_reference
    want = reference(x, layer.w13, layer.w2, w, ids, m.activation, layer.b13, layer.b2)
    diff = calc_diff(outs[0].float(), want)
    row["calc_diff"] = diff
    if not diff < (TOL_MXFP4 if layer.mxfp4 else TOL):
        row["error"] = f"calc_diff {diff:.2e}"
        return row
    if pdl == "both":  # each captured with its own switch, interleaved: off, on, off, on
        times: dict[bool, list[float]] = {False: [], True: []}
        for enabled in (False, True, False, True):
            moegemm.set_pdl(enabled)
            times[enabled].append(time_graph([ours(i) for i in range(ROUTINGS)]))
        moegemm.set_pdl(True)  # the library's default, for the peers' compositions
        row["ours_us"] = sum(times[False]) / 2
        row["ours_pdl_us"] = sum(times[True]) / 2
        # The last replays ran with PDL: routing 0's output checked again.
        pdl_diff = calc_diff(outs[0].float(), want)
        row["calc_diff_pdl"] = pdl_diff
        if not pdl_diff < (TOL_MXFP4 if layer.mxfp4 else TOL):
            row["error"] = f"with PDL calc_diff {pdl_diff:.2e}"
    else:
        row["ours_us"] = time_graph([ours(i) for i in range(ROUTINGS)])
    touched = [int(torch.unique(s[1]).numel()) for s in sets]  # outside timing
    row["touched_bytes"] = sum(touched) / len(touched) * m.expert_bytes(dtype)
    row["flops"] = m.flops(t * m.top_k)
    for name, mm in (("torch_us", torch_grouped_mm), ("moegemm_comp_us", moegemm_grouped_mm)):
        try:
            calls = [(lambda s=s, mm=mm: layer.composition(*s, mm)) for s in sets]
            row[name] = time_graph(calls)
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run leaves a note
            row.setdefault("notes", {})[name] = f"{type(exc).__name__}: {exc}"[:300]
    return row


def ceilings() -> tuple[float, float]:
    """(copy GB/s read + written, cuBLAS TFLOP/s). The copy is an elementwise kernel on 8-byte
    words: captured, dst.copy_(src) becomes a memcpy node run by a copy engine (H100, 2026-12-06:
    2432 GB/s against 2991 for the kernel, which runs as fast as an eager memcpy, 3012)."""
    src = torch.empty(1 << 27, dtype=torch.int64, device="cuda").random_()
    dst = torch.empty_like(src)
    copy_us = time_graph([lambda: torch.bitwise_or(src, 0, out=dst)], replays=10)
    a = torch.randn(8192, 8192, device="cuda").bfloat16()
    out = torch.empty_like(a)
    mm_us = time_graph([lambda: torch.mm(a, a.t(), out=out)], replays=10)
    return 2 * (1 << 30) / copy_us / 1e3, 2 * 8192**3 / mm_us / 1e6


def cell(row: dict, key: str, spec: str = "9.1f") -> str:
    v = row.get(key)
    return format(v, spec) if isinstance(v, float) else format("-", ">" + spec.split(".")[0])


def format_row(row: dict) -> str:
    pdl = ""
    if "ours_pdl_us" in row:
        pdl = f"{row['ours_pdl_us']:9.1f} {row['ours_us'] / row['ours_pdl_us']:6.3f} "
    return (
        f"{row['model']:14} {row['tokens']:5d} {cell(row, 'ours_us')} {pdl}{cell(row, 'torch_us')} "
        f"{cell(row, 'moegemm_comp_us')} {cell(row, 'x_torch', '6.2f')} "
        f"{cell(row, 'x_moegemm_comp', '6.2f')} {cell(row, 'pct_copy', '6.2f')} "
        f"{cell(row, 'pct_cublas', '6.2f')} {row.get('workspace_bytes', 0) / 2**20:8.1f} "
        f"{row.get('calc_diff', float('nan')):.1e} {row.get('error', '')}"
    )


def result(info: dict, copy_gbps: float, cublas_tflops: float, rows: list, summary: list) -> dict:
    """The --json file: the run's GPU, torch, commit and date_utc (what plot.py titles a figure
    with), the ceilings, every row and the targets."""
    return {**info, "copy_gbps": copy_gbps, "cublas_tflops": cublas_tflops, "rows": rows,
            "targets": summary}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--weights", choices=("bf16", "mxfp4"), default="bf16")
    parser.add_argument(
        "--pdl",
        choices=("off", "on", "both"),
        default="on",
        help="moegemm's launches with programmatic dependent launch (moegemm.set_pdl; on: the "
        "library's default); both: ours timed each way, interleaved, with a PDL column and "
        "their ratio",
    )
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    moegemm.set_pdl(args.pdl == "on")
    models = [MODELS[name] for name in args.models.split(",")]
    tokens = [int(t) for t in args.tokens.split(",")]
    t0 = time.perf_counter()
    copy_gbps, cublas_tflops = ceilings()
    info = run_info()
    print(
        f"# {info['gpu']}, torch {info['torch']}, commit {info['commit']}, {info['date_utc']} "
        f"UTC; copy {copy_gbps:.0f} GB/s, cuBLAS {cublas_tflops:.0f} TFLOP/s; PDL {args.pdl}",
        flush=True,
    )
    rows = []
    pdl_head = f"{'pdl us':>9} {'xpdl':>6} " if args.pdl == "both" else ""
    head = f"{'model':14} {'T':>5} {'ours us':>9} {pdl_head}{'torch':>9} {'comp':>9} {'xtorch':>6} "
    print(head + f"{'xcomp':>6} {'%copy':>6} {'%cuBL':>6} {'ws MiB':>8} diff", flush=True)
    for m in models:
        layer = Layer(m, args.weights)
        for t in tokens:
            try:
                row = run_row(layer, t, args.pdl)
            except Exception as exc:  # noqa: BLE001 - the row keeps the reason
                row = {"model": m.name, "tokens": t, "error": f"{type(exc).__name__}: {exc}"}
            row["weights"] = args.weights
            add_metrics(row, copy_gbps, cublas_tflops)
            rows.append(row)
            print(format_row(row), flush=True)
        del layer
        torch.cuda.empty_cache()
    summary = targets(rows)
    print()
    for tgt in summary:
        print(f"{tgt['target']:45} {tgt['status']:7} judged {tgt['judged']:3} missed "
              f"{len(tgt['missed']):3} geomean {tgt.get('geomean') or 0:.3f}")  # fmt: skip
        for miss in tgt["missed"][:4]:
            print(f"    missed: {miss}")
    print(f"# {len(rows)} rows in {time.perf_counter() - t0:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            data = {**result(info, copy_gbps, cublas_tflops, rows, summary), "pdl": args.pdl}
            json.dump(data, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
