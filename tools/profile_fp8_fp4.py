"""Runs one FP8 x FP4 grouped GEMM a few times, for a profiler.

    python3 tools/profile_fp8_fp4.py --groups 32 --n 4096 --k 7168 --rows 8 --layout masked

The operands are built as the benchmark builds them (per_token_cast_to_fp8 of random BF16,
quantize_mxfp4 of random BF16 * 0.02, prepared unless --weights raw); the call is checked
against FP32 on the dequantized operands once, then launched --launches times between two
synchronizations. Under Nsight Compute, profile a timed launch only:

    ncu --clock-control none -k regex:sm90_fp8_fp4_ --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats --section SchedulerStats \\
        python3 tools/profile_fp8_fp4.py --rows 8 --layout masked

(ncu matches -k against the __global__ function's name, sm90_fp8_fp4_grouped_gemm_kernel or
sm90_fp8_fp4_swap_ab_gemm_kernel; the JIT names, sm90_fp8fp4_*, are only in the demangled
template arguments. tools/gpu_run.sh LOG_DIR ncu with GPU_RUN_NCU_FP8 set to this script's
arguments runs it.) --config forces a kernel config by short name; --list prints the legal ones
(no GPU needed).
"""

from __future__ import annotations

import argparse
import math
import random

from moegemm.families import enumerate_configs, is_legal
from moegemm.heuristics import (
    SM90,
    GemmConfig,
    GemmDesc,
    sm90_fp8_fp4_decode,
    sm90_fp8_fp4_table,
)

# Nsight Compute's -k filter: the FP8 x FP4 kernels' __global__ functions (jit/codegen.py).
NCU_KERNEL_REGEX = "sm90_fp8_fp4_"

LAYOUTS = {"offs": "m_grouped_offsets", "m_indices": "m_grouped_contiguous"}
LAYOUTS["masked"] = "m_grouped_masked"


def group_rows(args: argparse.Namespace) -> list[int]:
    """Rows of each group: `rows` each, or with --ragged the protocol's int(rows * U(0.7, 1.3))
    (seed 0, as the benchmarks draw them); with --active A only A groups spread evenly over the
    G hold rows (decode at a small batch: T tokens reach about T x top-k experts)."""
    active = getattr(args, "active", 0) or args.groups
    if not getattr(args, "ragged", False):
        rows = [args.rows] * args.groups
    else:
        rng = random.Random(0)
        rows = [int(args.rows * rng.uniform(0.7, 1.3)) for _ in range(args.groups)]
    hit = {i * args.groups // active for i in range(active)}
    return [r if g in hit else 0 for g, r in enumerate(rows)]


def desc_of(args: argparse.Namespace) -> GemmDesc:
    sizes = group_rows(args)
    if args.layout == "masked":
        m, expected = max(max(sizes), 1), args.rows
    elif args.layout == "m_indices":
        m, expected = sum(128 * math.ceil(s / 128) for s in sizes), 0
    else:  # as the API: the rows per group of the packed layout
        m = sum(sizes)
        expected = math.ceil(m / args.groups)
    # Prepared random weights are windowed (checked where they are made), as the API sees them.
    return GemmDesc(
        LAYOUTS[args.layout], m, args.n, args.k, args.groups, ab_dtype="fp8_fp4",
        expected_m=expected, weights=args.weights, windowed=args.weights == "prepared",
    )  # fmt: skip


def legal_configs(desc: GemmDesc) -> dict[str, GemmConfig]:
    """The family's configs, the decode kernel's (which the heuristics may not enumerate) and
    the table decode kernel's with its last wave split along K."""
    configs = [*enumerate_configs(desc, SM90), *sm90_fp8_fp4_decode.enumerate_configs(desc, SM90)]
    configs += [
        sm90_fp8_fp4_table.with_split_tail(c, parts)
        for c in configs
        if c.layout.swap_ab and not c.layout.split_tail
        for parts in sm90_fp8_fp4_table.SPLIT_TAIL_PARTS
    ]
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
    parser.add_argument(
        "--ragged",
        action="store_true",
        help="rows per group int(rows * U(0.7, 1.3)), the benchmark protocol's spread",
    )
    parser.add_argument(
        "--active", type=int, default=0, help="only this many groups hold rows (0: all)"
    )
    parser.add_argument("--list", action="store_true", help="print the legal configs and exit")
    args = parser.parse_args(argv)
    if min(args.groups, args.n, args.k, args.rows, args.launches) < 1 or args.k % 32:
        parser.error("groups, n, k, rows and launches must be positive, k a multiple of 32")
    if not 0 <= args.active <= args.groups:
        parser.error("active must be 0..groups")
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
        # Group arguments of successive calls (the contiguous layouts), taken in turn.
        self.variants: list[dict] = [{}]
        self.calls = 0
        sizes = group_rows(args)
        cap = max(max(sizes), 1)
        gen = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(g, cap, k, device="cuda", generator=gen, dtype=torch.bfloat16)
        w = torch.randn(g, n, k, device="cuda", generator=gen, dtype=torch.bfloat16) * 0.02
        b, sfb = quantize_mxfp4(w)
        self.weights = (
            moegemm.prepare_mxfp4_weights(b, sfb) if args.weights == "prepared" else (b, sfb)
        )
        assert args.weights != "prepared" or self.weights.windowed, "desc_of says windowed"
        self.wf = dequantize_mxfp4(b, sfb)
        if args.layout == "masked":
            self.a, self.sfa = per_token_cast_to_fp8(x)
            self.d = torch.full((g, cap, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            self.masked_m = torch.tensor(sizes, device="cuda", dtype=torch.int32)
            self.ref_rows = [(gi, slice(0, rows)) for gi, rows in enumerate(sizes) if rows]
        else:
            pads = [128 * math.ceil(s / 128) if args.layout == "m_indices" else s for s in sizes]
            starts = [sum(pads[:gi]) for gi in range(g)]
            xs = torch.zeros(max(sum(pads), 1), k, device="cuda", dtype=torch.bfloat16)
            for gi, rows in enumerate(sizes):
                xs[starts[gi] : starts[gi] + rows] = x[gi, :rows]
            self.a, self.sfa = per_token_cast_to_fp8(xs)
            self.d = torch.full((xs.shape[0], n), float("nan"), device="cuda",
                                dtype=torch.bfloat16)  # fmt: skip
            if args.layout == "m_indices":
                info = torch.full((xs.shape[0],), -1, dtype=torch.int32)
                for gi, rows in enumerate(sizes):
                    info[starts[gi] : starts[gi] + pads[gi]] = gi
                self.variants = [{"m_indices": info.cuda()}]
            else:
                self.variants = [{"offs": self._ends(sizes)}]
                if getattr(args, "active", 0):
                    # Few groups hold rows: later calls move them to other groups (the same
                    # rows), so the weights they read come from HBM, as each layer's do in
                    # decode, not from L2 (the first call, which check() makes, is unmoved).
                    shifts = range(1, min(16, g // args.active))
                    self.variants += [{"offs": self._ends(sizes[-s:] + sizes[:-s])} for s in shifts]
            self.ref_rows = [
                (gi, slice(starts[gi], starts[gi] + rows)) for gi, rows in enumerate(sizes) if rows
            ]

    @staticmethod
    def _ends(sizes: list[int]):
        """The offsets layout's cumulative end rows of groups holding `sizes` rows."""
        import itertools

        import torch

        return torch.tensor(list(itertools.accumulate(sizes)), device="cuda", dtype=torch.int32)

    def call(self, config: GemmConfig | None) -> None:
        import moegemm

        operands = ((self.a, self.sfa), self.weights, self.d)
        if self.layout == "masked":
            moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
                *operands, self.masked_m, self.rows, config=config
            )
            return
        kwargs = self.variants[self.calls % len(self.variants)]
        self.calls += 1
        moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous(*operands, config=config, **kwargs)

    def check(self, config: GemmConfig | None) -> float:
        """The worst calc_diff over groups of one call (d poisoned first)."""
        import torch

        from moegemm.testing import calc_diff

        self.d.fill_(float("nan"))
        self.calls = 0  # the unmoved groups, which ref_rows describe
        self.call(config)
        k = self.a.shape[-1]
        af = self.a.float() * self.sfa.repeat_interleave(128, dim=-1)[..., :k]
        worst = 0.0
        masked = self.layout == "masked"
        for gi, rows in self.ref_rows:  # masked: group gi's rows; else rows of the packed d
            got, a = (self.d[gi][rows], af[gi][rows]) if masked else (self.d[rows], af[rows])
            worst = max(worst, calc_diff(got.float(), a @ self.wf[gi].t()))
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
