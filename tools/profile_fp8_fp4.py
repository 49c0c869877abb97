"""Runs one FP8 x FP4 grouped GEMM a few times, for a profiler.

    python3 tools/profile_fp8_fp4.py --groups 32 --n 4096 --k 7168 --rows 8 --layout masked

The operands are built as the benchmark builds them (per_token_cast_to_fp8 of random BF16,
quantize_mxfp4 of random BF16 * 0.02, prepared unless --weights raw); the call is checked
against FP32 on the dequantized operands once, then launched --launches times between two
synchronizations. Under Nsight Compute, profile a timed launch only:

    ncu --clock-control none -k regex:sm90_fp8fp4 --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats \\
        python3 tools/profile_fp8_fp4.py --rows 8 --layout masked

(tools/gpu_run.sh LOG_DIR ncu with GPU_RUN_NCU_KERNEL=sm90_fp8fp4 and GPU_RUN_NCU_CMD set to
this script's arguments runs exactly that.) --config forces a kernel config by short name;
--list prints the legal ones (no GPU needed).
"""

from __future__ import annotations

import argparse
import math

from moegemm.heuristics import (
    SM90,
    GemmConfig,
    GemmDesc,
    enumerate_configs,
    is_legal,
    sm90_fp8_fp4_decode,
)

LAYOUTS = {"offs": "m_grouped_offsets", "m_indices": "m_grouped_contiguous"}
LAYOUTS["masked"] = "m_grouped_masked"


def desc_of(args: argparse.Namespace) -> GemmDesc:
    rows = args.groups * args.rows
    if args.layout == "masked":
        m, expected = args.rows, args.rows
    elif args.layout == "m_indices":
        m, expected = args.groups * 128 * math.ceil(args.rows / 128), 0
    else:
        m, expected = rows, args.rows
    return GemmDesc(
        LAYOUTS[args.layout], m, args.n, args.k, args.groups, ab_dtype="fp8_fp4",
        expected_m=expected, weights=args.weights,
    )  # fmt: skip


def legal_configs(desc: GemmDesc) -> dict[str, GemmConfig]:
    """The family's configs and the decode kernel's (which the heuristics may not enumerate)."""
    configs = [*enumerate_configs(desc, SM90), *sm90_fp8_fp4_decode.enumerate_configs(desc, SM90)]
    return {c.short_name(): c for c in configs if is_legal(c, desc, SM90)}


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=32)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--k", type=int, default=7168)
    parser.add_argument("--rows", type=int, default=8, help="rows per group")
    parser.add_argument("--layout", choices=sorted(LAYOUTS), default="masked")
    parser.add_argument("--weights", choices=("raw", "prepared"), default="prepared")
    parser.add_argument("--config", help="a config short name (default: the heuristics' pick)")
    parser.add_argument("--launches", type=int, default=3)
    parser.add_argument("--list", action="store_true", help="print the legal configs and exit")
    args = parser.parse_args(argv)
    if min(args.groups, args.n, args.k, args.rows, args.launches) < 1 or args.k % 32:
        parser.error("groups, n, k, rows and launches must be positive, k a multiple of 32")
    return args


class Problem:
    """The operands of one FP8 x FP4 call, built as the benchmark builds them (GPU), and the
    call with a forced or the heuristics' config; check() compares it with FP32."""

    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        import moegemm
        from moegemm.quant import dequantize_mxfp4, per_token_cast_to_fp8, quantize_mxfp4

        g, n, k, r = args.groups, args.n, args.k, args.rows
        self.layout, self.rows = args.layout, r
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(g, r, k, device="cuda", generator=gen, dtype=torch.bfloat16)
        w = torch.randn(g, n, k, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02
        b, sfb = quantize_mxfp4(w)
        self.weights = (
            moegemm.prepare_mxfp4_weights(b, sfb) if args.weights == "prepared" else (b, sfb)
        )
        self.wf = dequantize_mxfp4(b, sfb)
        if args.layout == "masked":
            self.a, self.sfa = per_token_cast_to_fp8(x)
            self.d = torch.full((g, r, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            self.masked_m = torch.full((g,), r, device="cuda", dtype=torch.int32)
            self.ref_rows = [(gi, slice(None)) for gi in range(g)]
        else:
            pad = 128 * math.ceil(r / 128) if args.layout == "m_indices" else r
            xs = torch.zeros(g, pad, k, device="cuda", dtype=torch.bfloat16)
            xs[:, :r] = x
            self.a, self.sfa = per_token_cast_to_fp8(xs.view(g * pad, k))
            self.d = torch.full((g * pad, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            if args.layout == "m_indices":
                info = torch.arange(g, device="cuda", dtype=torch.int32).repeat_interleave(pad)
                self.kwargs = {"m_indices": info}
            else:
                offs = torch.arange(1, g + 1, device="cuda", dtype=torch.int32) * pad
                self.kwargs = {"offs": offs}
            self.ref_rows = [(gi, slice(gi * pad, gi * pad + r)) for gi in range(g)]

    def call(self, config: GemmConfig | None) -> None:
        import moegemm

        operands = ((self.a, self.sfa), self.weights, self.d)
        if self.layout == "masked":
            moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
                *operands, self.masked_m, self.rows, config=config
            )
        else:
            moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(*operands, config=config, **self.kwargs)

    def check(self, config: GemmConfig | None) -> float:
        """The worst calc_diff over groups of one call (d poisoned first)."""
        import torch

        from moegemm.testing import calc_diff

        self.d.fill_(float("nan"))
        self.call(config)
        k = self.a.shape[-1]
        af = self.a.float() * self.sfa.repeat_interleave(128, dim=-1)[..., :k]
        worst, r = 0.0, self.rows
        for gi, rows in self.ref_rows:
            masked = self.layout == "masked"
            got = self.d[gi] if masked else self.d[rows]
            want = (af[gi] if masked else af[rows]) @ self.wf[gi].t()
            worst = max(worst, calc_diff(got.float()[:r], want[:r]))
        torch.cuda.synchronize()
        return worst


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    desc = desc_of(args)
    legal = legal_configs(desc)
    if args.list:
        print("\n".join(sorted(legal)))
        return 0
    if args.config is not None and args.config not in legal:
        raise SystemExit(f"--config {args.config} is not legal here; --list shows the legal ones")

    import torch

    config = legal[args.config] if args.config else None
    problem = Problem(args)
    worst = problem.check(config)
    print(f"{desc} -> {config.short_name() if config else 'heuristic pick'}: calc_diff {worst:.2e}")
    for _ in range(args.launches):
        problem.call(config)
    torch.cuda.synchronize()
    return 0 if worst < 1e-4 else 1


if __name__ == "__main__":
    raise SystemExit(main())
