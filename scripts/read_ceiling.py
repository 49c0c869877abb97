"""How fast can weights be read, against the copy ceiling the decode target uses?

The decode target and bench_bf16.py judge weight streaming against a device-to-device copy
(bytes read + written). A decode GEMM only reads. This times, in one process and interleaved:
the copy (1 GiB read + 1 GiB written), read-only reductions over a weight-sized BF16 tensor
(torch.sum and torch.amax, which read every byte once), and the masked decode GEMM of a shape
whose weights dominate (mixtral L1 decode by default: 8 x 28672 x 4096, 3.5 rows per group),
ours and torch._grouped_mm, each as GB/s of bytes read (weights only for the GEMMs).

    python3 scripts/read_ceiling.py [--groups 8 --n 28672 --k 4096 --rows 28] [--rounds 3]
                                    [--sustain-s 3]

--sustain-s S then runs cuBLAS BF16 8192^3 back to back for S seconds (gpu_run.sh stage
`ceiling` samples nvidia-smi's clock, power and clock-event reasons meanwhile).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import moegemm
from moegemm.testing import bench_us, calc_diff


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--n", type=int, default=28672)
    parser.add_argument("--k", type=int, default=4096)
    parser.add_argument("--rows", type=int, default=28, help="valid rows over all groups")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sustain-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("read_ceiling: no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(0)
    g, n, k = args.groups, args.n, args.k
    per_group = [args.rows // g + (1 if i < args.rows % g else 0) for i in range(g)]
    max_m = max(1, max(per_group))
    weights = [torch.randn(g, n, k, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(2)]
    wbytes = weights[0].numel() * 2
    a = torch.randn(g, max_m, k, device="cuda", dtype=torch.bfloat16)
    d = torch.full((g, max_m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    masked_m = torch.tensor(per_group, device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_masked(a, weights[0], d, masked_m, max_m)
    torch.cuda.synchronize()
    worst = 0.0
    for grp, r in enumerate(per_group):
        if r:
            ref = a[grp, :r].float() @ weights[0][grp].float().t()
            worst = max(worst, calc_diff(d[grp, :r], ref))
    print(f"# decode GEMM G{g} N{n} K{k} rows {per_group}: max calc_diff {worst:.1e}")
    if not worst < 1e-5:
        print("read_ceiling: wrong result", file=sys.stderr)
        return 1
    a_packed = torch.cat([a[grp, :r] for grp, r in enumerate(per_group)])
    offs = masked_m.cumsum(0).to(torch.int32)
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    turn = [0]

    def next_weights() -> torch.Tensor:
        turn[0] ^= 1
        return weights[turn[0]]

    candidates = {
        "copy (read + written)": (lambda: dst.copy_(src), 2 * src.numel()),
        "torch.sum over weights (read)": (lambda: next_weights().sum(dtype=torch.float32), wbytes),
        "torch.amax over weights (read)": (lambda: next_weights().amax(), wbytes),
        "ours masked decode (weights)": (
            lambda: moegemm.m_grouped_bf16_gemm_nt_masked(a, next_weights(), d, masked_m, max_m),
            wbytes,
        ),
        "torch._grouped_mm decode (weights)": (
            lambda: torch._grouped_mm(a_packed, next_weights().transpose(-2, -1), offs=offs),
            wbytes,
        ),
    }
    gbps: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(args.rounds):
        for name, (fn, nbytes) in candidates.items():
            us = bench_us(fn, warmup=5, iters=50)
            gbps[name].append(nbytes / us / 1e3)
    copy = statistics.median(gbps["copy (read + written)"])
    print(f"{'candidate':40s} {'GB/s (median)':>14s} {'min':>8s} {'max':>8s} {'/ copy':>7s}")
    for name, vals in gbps.items():
        med = statistics.median(vals)
        print(f"{name:40s} {med:14.0f} {min(vals):8.0f} {max(vals):8.0f} {med / copy:7.3f}")
    if args.sustain_s > 0:
        del weights, src, dst
        x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        out = torch.empty_like(x)
        torch.cuda.synchronize()
        print(f"# sustained cuBLAS 8192^3 from {time.time():.2f} (unix s)", flush=True)
        t0, calls = time.perf_counter(), 0
        while time.perf_counter() - t0 < args.sustain_s:
            for _ in range(20):
                torch.mm(x, x.t(), out=out)
            torch.cuda.synchronize()
            calls += 20
        secs = time.perf_counter() - t0
        print(
            f"# sustained cuBLAS: {calls} calls in {secs:.2f} s, "
            f"{2 * 8192**3 * calls / secs / 1e12:.0f} TFLOP/s; ended {time.time():.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
