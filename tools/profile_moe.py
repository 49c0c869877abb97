"""Where the fused MoE layer's time goes: each launch's GPU time, from the torch profiler.

    python3 tools/profile_moe.py --models deepseek-v3,mixtral-8x7b --tokens 512,8192

For each (model, T), with bench_moe's weights and skewed routing: fused_moe's launches (route
and gather, GEMM1 + SwiGLU, GEMM2 + row scale, combine) and, on the same expert-sorted rows and
offsets, the plain grouped GEMMs (moegemm and torch._grouped_mm) of the same shapes, so an
epilogue's cost shows against its plain GEMM. Each a median over --iters calls; the GEMMs'
configs printed beside. Needs an SM90 GPU.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def kernel_times(fn, iters: int) -> dict[str, float]:
    """Median µs per call of each CUDA kernel `fn` launches, keyed by a short kernel name."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    per_name: dict[str, list[float]] = defaultdict(list)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            per_name[short_kernel_name(ev.name)].append(ev.device_time)
    return {k: statistics.median(v) * len(v) / iters for k, v in per_name.items()}


# The torch profiler names a kernel by its demangled signature, e.g. "void moegemm::sm90::
# sm90_bf16_grouped_gemm_kernel<sm90_bf16_offs_..._swiglu::Config>(moegemm::Bf16GemmParams)":
# a GEMM by the JIT namespace of its Config (the KernelSpec name: layout, config, epilogue), a
# layer kernel (moegemm::moe::moe_route_gather_kernel<512u, ...>) by its function.
GEMM_NAME_RE = re.compile(r"\b(sm90_(?:bf16|fp8fp4)_\w+?)::Config\b")
LAYER_NAME_RE = re.compile(r"\b(moe_\w+?_kernel)\b")


def short_kernel_name(name: str) -> str:
    """moegemm's kernels by their JIT namespace (config and epilogue in it), others cut short."""
    found = GEMM_NAME_RE.search(name) or LAYER_NAME_RE.search(name)
    return found.group(1) if found else name[:60]


def profile_row(layer, t: int, weights: str, iters: int) -> None:
    """Prints one (model, T) row set: the layer's launches, then the plain GEMMs (BF16)."""
    import torch

    import moegemm
    from moegemm.moe.layer import _plans

    m = layer.m
    x, ids, w = layer.routing(t, 0)
    ws = moegemm.MoEWorkspace(t, m.top_k, m.experts, m.hidden, m.intermediate, weights)
    out = torch.empty(t, m.hidden, device="cuda", dtype=torch.bfloat16)
    layer_t = kernel_times(
        lambda: moegemm.fused_moe(x, layer.prepared, layer.w2_ours, w, ids, w2_bias=layer.b2,
                                  out=out, workspace=ws),
        iters,
    )  # fmt: skip
    counts = torch.bincount(ids.flatten().long(), minlength=m.experts)
    rows = int(counts.sum())
    print(f"== {m.name} T={t} rows={rows} max/mean rows per expert "
          f"{int(counts.max())}/{rows / m.experts:.0f}, empty experts {int((counts == 0).sum())}")  # fmt: skip
    for plan in _plans.values():
        if getattr(plan, "configs", None) and plan.gemm1.args[0] == rows:
            print("   configs", [c.short_name() for c in plan.configs])
    for k, v in sorted(layer_t.items(), key=lambda kv: -kv[1]):
        print(f"   layer  {v:9.1f} us  {k}")
    print(f"   layer  {sum(layer_t.values()):9.1f} us  total")
    if weights != "bf16":
        return
    offs = ws.offs.clone()
    a1 = ws.x_sorted[:rows].clone()
    d1 = torch.empty(rows, layer.w13.shape[1], device="cuda", dtype=torch.bfloat16)
    a2 = torch.randn(rows, m.intermediate, device="cuda").bfloat16()
    d2 = torch.empty(rows, m.hidden, device="cuda", dtype=torch.bfloat16)
    peers = {
        "moegemm gemm1": lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(
            a1, layer.w13, d1, offs=offs),
        "moegemm gemm2": lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(
            a2, layer.w2, d2, offs=offs),
        "torch gemm1": lambda: torch._grouped_mm(a1, layer.w13.transpose(-2, -1), offs=offs),
        "torch gemm2": lambda: torch._grouped_mm(a2, layer.w2.transpose(-2, -1), offs=offs),
    }  # fmt: skip
    for label, fn in peers.items():
        print(f"   {label:14} {sum(kernel_times(fn, iters).values()):9.1f} us")
    # The layer again, after its peers: what ordering (clocks, power) changes.
    again = kernel_times(
        lambda: moegemm.fused_moe(x, layer.prepared, layer.w2_ours, w, ids, w2_bias=layer.b2,
                                  out=out, workspace=ws),
        iters,
    )  # fmt: skip
    for k, v in sorted(again.items(), key=lambda kv: -kv[1])[:2]:
        print(f"   again  {v:9.1f} us  {k}")
    print(f"   ideal at 790 TFLOP/s: {m.flops(rows) / 790e6:9.1f} us")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="deepseek-v3,mixtral-8x7b,qwen3-30b-a3b")
    parser.add_argument("--tokens", default="512,8192")
    parser.add_argument("--weights", choices=("bf16", "mxfp4"), default="bf16")
    parser.add_argument("--iters", type=int, default=5)
    args = parser.parse_args(argv)

    import torch
    from bench_moe import Layer
    from moe_cases import MODELS

    import moegemm

    print(f"# PDL {'on' if moegemm.get_pdl() else 'off'}")
    for name in args.models.split(","):
        layer = Layer(MODELS[name], args.weights)
        for t in map(int, args.tokens.split(",")):
            profile_row(layer, t, args.weights, args.iters)
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
