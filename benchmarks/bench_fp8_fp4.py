"""FP8 x FP4 (MXFP4 weights) m-grouped GEMMs against in-run peers, on one H200.

Cases (fp8_fp4_cases.py): the 16 m-grouped DeepGEMM anchors, the decode / prefill / masked
suites of moe_shapes.json and a rows-per-group sweep (1 ... 4096) on the DeepSeek-V3, gpt-oss
and Qwen3-30B shapes. A contiguous case runs the `offs` (packed) and `m_indices` (128-row
padded) layouts, a masked case the masked one; each with the checkpoint ("raw") weights and
the prepare_mxfp4_weights ("prepared") ones.

Inputs (protocol of ../shared/BENCHMARKS.md): a = per_token_cast_to_fp8(random bf16) (1 x 128
scales), (b, sfb) = quantize_mxfp4(random bf16 * 0.02). Before timing, every variant writes a
NaN-poisoned d that is compared with an FP32 reference on the dequantized operands
(dequantize_mxfp4, a * sfa per 128 of K): max calc_diff over groups < 1e-4, rows past masked_m
untouched. The error against the unquantized BF16 product is reported as information.

Peers in the same run, on the same real rows:
  torch FP8   torch._scaled_grouped_mm, rowwise: activations cast per token over all of K,
              weights cast per row, packed rows and offs (probed: a torch that refuses the call
              leaves a note and n/a columns)
  BF16        moegemm's BF16 function of the same layout on the unquantized operands
  copy        a 1 GiB device-to-device copy (bytes read + written), at the start, before and
              after every decode case, at the end; a case's printed line takes its share of
              the before/after mean, the summary and the JSON's pct_copy of the median of all
              samples (pct_copy_adjacent keeps the former)
Weight sets smaller than 3 x L2 rotate among copies (bench_common.rotation_count, capped in
memory), so no timed call finds its weights in L2.

Report per (case, layout): ours us (raw, prepared; "ours" = prepared where timed), torch FP8 us,
BF16 us, TFLOP/s (real rows only), FP4 weight + scale bytes of the touched groups / time as a
share of the copy bandwidth, ours speed / torch FP8, / BF16, raw / prepared time, and
"x DG" = (torch FP8 us / ours us) / (DeepGEMM FP8 / torch FP8 speed in the anchor run), where
../shared/BENCHMARKS.md has that case or rows per group (the source is named in the JSON).
Then the sweep as matrices, and last the issue's targets marked met / missed with geometric
means (the table and report maths are CPU logic in fp8_fp4_cases.py). A case that raises or
fails its check keeps its row, with the reason; a wrong result misses every speed target. An
m_indices row at decode (every group padded to 128 rows; DeepGEMM's decode figures are its
unpadded masked kernel's) is reported but not judged for speed.
--json PATH writes everything; nothing is written anywhere else.

Default run (126 cases, 192 rows): estimated 2-4 minutes on the H200 after the kernels'
first compilation (printed separately); --quick runs 8 cases (one per regime and suite).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from bench_common import (
    Timer,
    precompile,
    rotating,
    rotation_count,
    run_info,
    try_time,
    worse,
)
from bf16_cases import ALIGN, ANCHOR_GPU, group_layouts
from fp8_fp4_cases import (
    HEADER,
    LAYOUTS,
    SUITES,
    TOL,
    WEIGHTS,
    Fp4Case,
    add_metrics,
    format_row,
    fp4_bytes,
    kernel_specs,
    load_cases,
    print_report,
    select_cases,
    sm100_weights,
    summarize,
)

import moegemm
from moegemm.testing import calc_diff

ROTATE_MEM_BYTES = 8 << 30  # at most this much per operand kind in rotated copies
CHUNK_ELEMS = 1 << 28  # quantize in pieces of this many elements (the casts' FP32 temporaries)
SCALE_K = 128  # activation scale granularity along K
TORCH_FP8_SUSPECT = 1e-2  # the torch FP8 peer's error vs BF16 above this: a note (wrong call?)
DEVICE = "cuda"  # where the operands live (the CPU test runs run_case on "cpu" with fakes)
# main sets it on a CC 10.x device: SM100 takes weights prepared for it only, and sfa of
# powers of two (per_token_cast_to_fp8(..., ue8m0=True)); None keeps SM90's inputs.
PREPARE_ARCH: str | None = None


# ----------------------------------------------------------------------------------------------
# Arguments


def comma_list(choices: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """argparse type: a comma-separated subset of `choices` (in the order given)."""

    def parse(value: str) -> tuple[str, ...]:
        items = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
        bad = [v for v in items if v not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{value!r}: expected a comma-separated list of {', '.join(choices)}"
            )
        return items

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--json", metavar="PATH", help="write all results to this JSON file")
    p.add_argument(
        "--suite",
        action="append",
        type=comma_list(SUITES),
        help=f"suites to run, comma-separated or repeated ({', '.join(SUITES)}; default all)",
    )
    p.add_argument(
        "--layouts",
        type=comma_list(LAYOUTS),
        default=LAYOUTS,
        help="API layouts to run (default offs,m_indices,masked)",
    )
    p.add_argument(
        "--weights",
        type=comma_list(WEIGHTS),
        default=WEIGHTS,
        help="weight layouts to run (default raw,prepared)",
    )
    p.add_argument("--cases", help="regex: only cases whose name matches")
    p.add_argument("--max-cases", type=int, help="at most this many cases, spread evenly")
    p.add_argument("--quick", action="store_true", help="a smoke run of 8 cases")
    p.add_argument("--budget-ms", type=float, default=60.0, help="GPU time per measurement")
    p.add_argument("--max-iters", type=int, default=100)
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="time raw and prepared alternately this many times (medians)",
    )
    p.add_argument("--jobs", type=int, help="parallel compiles")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="tracebacks of failures")
    return p


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    args = parser.parse_args(argv)
    groups = args.suite or [SUITES]
    args.suites = tuple(dict.fromkeys(s for group in groups for s in group))
    if args.max_cases is not None and args.max_cases < 1:
        parser.error(f"--max-cases must be >= 1, got {args.max_cases}")
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    return args


# ----------------------------------------------------------------------------------------------
# Inputs (GPU)


def api(name: str) -> Callable:
    """The contract's public function, looked up when first needed (the CPU test imports this
    module before the FP8 x FP4 API exists)."""
    try:
        return getattr(moegemm, name)
    except AttributeError:
        return getattr(importlib.import_module("moegemm.api.fp8_fp4"), name)


def chunked(fn: Callable, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """fn over pieces of x's first dimension, outputs concatenated: the casts' FP32 temporaries
    of a whole prefill operand would take several times its size (every cast is per row)."""
    per = x[0].numel()
    step = max(1, CHUNK_ELEMS // max(1, per))
    parts = [fn(x[i : i + step]) for i in range(0, x.shape[0], step)]
    return tuple(torch.cat(p) for p in zip(*parts))


def quantize_weights(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return chunked(moegemm.quant.quantize_mxfp4, w)  # type: ignore[return-value]


def rowwise_fp8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(FP8, float32 scale per row [..., rows]) for torch._scaled_grouped_mm's rowwise mode."""
    cast = moegemm.quant.per_token_cast_to_fp8
    q, s = chunked(lambda p: cast(p, gran_k=p.shape[-1]), x)
    return q, s.squeeze(-1).contiguous()


def randn_bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
    t = torch.randn(*shape, device=DEVICE, dtype=torch.bfloat16)
    return t.mul_(scale) if scale != 1.0 else t


def nan_tensor(*shape: int) -> torch.Tensor:
    return torch.full(shape, float("nan"), device=DEVICE, dtype=torch.bfloat16)


def sync() -> None:
    if torch.device(DEVICE).type == "cuda":
        torch.cuda.synchronize()


def dequant_a(a8: torch.Tensor, sfa: torch.Tensor) -> torch.Tensor:
    k = a8.shape[-1]
    return a8.float() * sfa.repeat_interleave(SCALE_K, dim=-1)[..., :k]


def copies(first: object, count: int, clone: Callable) -> list:
    return [first] + [clone(first) for _ in range(count - 1)]


def rotation(touched_bytes: int, full_bytes: int) -> int:
    """rotation_count, capped so the copies of one operand kind stay within ROTATE_MEM_BYTES."""
    return max(1, min(rotation_count(touched_bytes), ROTATE_MEM_BYTES // max(1, full_bytes)))


class CopyMeter:
    """The device-to-device copy ceiling (GB/s, bytes read + written), with its samples."""

    BYTES = 1 << 30

    def __init__(self, timer: Timer) -> None:
        self.timer = timer
        self.src = torch.empty(self.BYTES, dtype=torch.uint8, device="cuda").random_(0, 255)
        self.dst = torch.empty_like(self.src)
        self.samples: list[float] = []

    def measure(self, keep: bool = True) -> float:
        gbps = 2 * self.BYTES / self.timer(lambda: self.dst.copy_(self.src)) / 1e3
        if keep:
            self.samples.append(gbps)
        return gbps


# ----------------------------------------------------------------------------------------------
# One case (GPU)


@dataclass
class LayoutIO:
    """One API layout of a case: its output shape, our call and the BF16 peer's (each takes
    the weights and d), and where group i's real rows sit in d."""

    d_shape: tuple[int, ...]
    call: Callable[[object, torch.Tensor], object]
    bf16: Callable[[torch.Tensor, torch.Tensor], object]
    group_rows: Callable[[torch.Tensor, int], torch.Tensor]
    # DeepGEMM FP8's call of this layout on its own weights (b8, sfb8) and d, or None (offs:
    # DeepGEMM has no packed layout).
    deepgemm: Callable[[tuple, torch.Tensor], object] | None = None


@dataclass
class CaseInputs:
    """A case's operands: activations (BF16 and FP8 with 1 x 128 scales), the weights (BF16,
    MXFP4 raw and prepared, FP8 rowwise), each with its rotated copies, and the row layouts."""

    case: Fp4Case
    a16: torch.Tensor  # [rows, K] packed real rows, or [G, max_m, K] (masked)
    a16_packed: torch.Tensor
    a8: torch.Tensor
    sfa: torch.Tensor
    w16: torch.Tensor
    b: torch.Tensor
    sfb: torch.Tensor
    sets: dict[str, list]  # "raw" / "prepared" / "bf16" / "fp8": rotated weight sets
    lay: dict


def fp8_cast() -> Callable:
    """per_token_cast_to_fp8 as the device's kernels take it (power-of-two scales on SM100)."""
    return functools.partial(moegemm.quant.per_token_cast_to_fp8, ue8m0=PREPARE_ARCH is not None)


def make_inputs(case: Fp4Case, weights: tuple[str, ...]) -> CaseInputs:
    g, n, k, rows = case.num_groups, case.n, case.k, case.rows
    touched = sum(1 for r in rows if r)
    cast = fp8_cast()
    w16 = randn_bf16(g, n, k, scale=0.02)
    b, sfb = quantize_weights(w16)
    nfp4 = rotation(touched * fp4_bytes(n, k), g * fp4_bytes(n, k))
    sets: dict[str, list] = {"raw": copies((b, sfb), nfp4, lambda s: (s[0].clone(), s[1].clone()))}
    if "prepared" in weights:
        prepare = api("prepare_mxfp4_weights")
        arch = {"arch": PREPARE_ARCH} if PREPARE_ARCH else {}
        sets["prepared"] = [prepare(*s, **arch) for s in sets["raw"]]
    sets["bf16"] = copies(w16, rotation(touched * n * k * 2, g * n * k * 2), torch.clone)
    w8 = rowwise_fp8(w16)
    sets["fp8"] = copies(
        w8, rotation(touched * n * k, g * n * k), lambda s: (s[0].clone(), s[1].clone())
    )
    if case.layout == "masked":
        a16 = randn_bf16(g, case.max_m, k)
        a16_packed = torch.cat([a16[i, :r] for i, r in enumerate(rows)])
    else:
        a16 = a16_packed = randn_bf16(case.total_rows, k)
    a8, sfa = chunked(cast, a16)
    lay = group_layouts(rows, ALIGN, device=DEVICE)
    return CaseInputs(case, a16, a16_packed, a8, sfa, w16, b, sfb, sets, lay)


def layout_io(x: CaseInputs, layout: str) -> LayoutIO:
    """Our call and the BF16 peer's on `layout` (the m_indices one gets its padded A here)."""
    case, lay, a8, sfa, a16 = x.case, x.lay, x.a8, x.sfa, x.a16
    rows, starts, offs, n = case.rows, lay["starts"], lay["offs"], case.n
    bf16_contiguous = moegemm.m_grouped_bf16_gemm_nt_contiguous
    if layout == "masked":
        ours, bf16_masked = (
            api("m_grouped_fp8_fp4_gemm_nt_masked"),
            moegemm.m_grouped_bf16_gemm_nt_masked,
        )
        masked_m = torch.tensor(rows, device=DEVICE, dtype=torch.int32)
        exp_m = case.expected_m
        dg = deep_gemm()
        sfa_dg = dg.get_mn_major_tma_aligned_tensor(sfa) if dg else None
        return LayoutIO(
            (case.num_groups, case.max_m, n),
            lambda w, d: ours((a8, sfa), w, d, masked_m, exp_m),
            lambda w, d: bf16_masked(a16, w, d, masked_m, exp_m),
            lambda d, i: d[i, : rows[i]],
            (lambda w, d: dg.m_grouped_fp8_gemm_nt_masked((a8, sfa_dg), w, d, masked_m, exp_m))
            if dg
            else None,
        )
    ours = api("m_grouped_fp8_fp4_gemm_nt_contiguous")
    if layout == "offs":
        return LayoutIO(
            (case.total_rows, n),
            lambda w, d: ours((a8, sfa), w, d, offs=offs),
            lambda w, d: bf16_contiguous(a16, w, d, offs=offs),
            lambda d, i: d[starts[i] : starts[i] + rows[i]],
        )
    a16_pad = randn_bf16(lay["padded_total"], case.k)  # padding rows random, never zeros
    a16_pad[lay["real_rows"]] = a16
    a8_pad, sfa_pad = chunked(fp8_cast(), a16_pad)  # real rows: a8's
    m_idx, pstarts = lay["m_indices"], lay["padded_starts"]
    dg = deep_gemm()
    sfa_dg = dg.get_mn_major_tma_aligned_tensor(sfa_pad) if dg else None
    return LayoutIO(
        (lay["padded_total"], n),
        lambda w, d: ours((a8_pad, sfa_pad), w, d, m_idx),
        lambda w, d: bf16_contiguous(a16_pad, w, d, m_idx),
        lambda d, i: d[pstarts[i] : pstarts[i] + rows[i]],
        (lambda w, d: dg.m_grouped_fp8_gemm_nt_contiguous((a8_pad, sfa_dg), w, d, m_idx))
        if dg
        else None,
    )


@functools.cache
def deep_gemm() -> object | None:
    """DeepGEMM where it is importable (a build of its own beside this run), else None: its FP8
    grouped GEMMs (1 x 128 activation scales, 128 x 128 weight blocks) are then timed in the
    same process, the issue's peer."""
    try:
        return importlib.import_module("deep_gemm")
    except Exception as exc:  # noqa: BLE001 - absent or broken: the anchor ratio stays
        absent = isinstance(exc, ModuleNotFoundError) and exc.name == "deep_gemm"
        if not absent:  # there, but it or one of its imports fails: said once
            print(f"# DeepGEMM not importable: {type(exc).__name__}: {exc}", flush=True)
        return None


def deepgemm_weights(w16: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """w16 [G, N, K] as DeepGEMM FP8 weights: E4M3 with one FP32 scale per 128 x 128 block."""
    from deep_gemm.utils.math import per_block_cast_to_fp8

    pairs = [per_block_cast_to_fp8(w, use_ue8m0=False) for w in w16]
    return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])


def add_check(res: dict, what: str) -> None:
    res["errors"]["check"] = (res["errors"].get("check", "") + " " + what).strip()


def check_case(
    x: CaseInputs,
    ios: dict[str, LayoutIO],
    weights: tuple[str, ...],
    results: dict[str, dict],
    torch_fp8: Callable[[tuple], torch.Tensor] | None,
) -> None:
    """Every variant into a NaN-poisoned d, each group against one FP32 reference on the
    dequantized operands (max calc_diff over groups); masked rows past masked_m untouched. For
    information: the error against the unquantized BF16 product and the torch FP8 peer's error
    (first group that has rows), and whether raw and prepared wrote the same bits."""
    case, rows, starts = x.case, x.case.rows, x.lay["starts"]
    masked = case.layout == "masked"
    outs: dict[tuple[str, str], torch.Tensor] = {}
    for layout, io in ios.items():
        for wl in weights:
            d = nan_tensor(*io.d_shape)
            try:
                io.call(x.sets[wl][0], d)
                outs[(layout, wl)] = d
            except Exception as exc:  # noqa: BLE001 - reported in the row, no timing
                results[layout]["errors"][f"{wl}_call"] = f"{type(exc).__name__}: {exc}"[:300]
    torch_out = torch_fp8(x.sets["fp8"][0]) if torch_fp8 else None
    sync()
    diffs = dict.fromkeys(outs, 0.0)
    first = next(i for i, r in enumerate(rows) if r)
    for i, r in enumerate(rows):
        if not r:
            continue
        a_rows, s_rows = (
            (x.a8[i, :r], x.sfa[i, :r])
            if masked
            else (x.a8[starts[i] : starts[i] + r], x.sfa[starts[i] : starts[i] + r])
        )
        ref = dequant_a(a_rows, s_rows) @ moegemm.quant.dequantize_mxfp4(x.b[i], x.sfb[i]).t()
        for (layout, wl), d in outs.items():
            diffs[(layout, wl)] = worse(
                diffs[(layout, wl)], calc_diff(ios[layout].group_rows(d, i), ref)
            )
        if i == first:
            packed = slice(starts[i], starts[i] + r)
            ref16 = x.a16_packed[packed].float() @ x.w16[i].float().t()
            if torch_out is not None:  # FP8 rowwise: ~1e-3 from the BF16 product when right
                t8 = calc_diff(torch_out[packed], ref16)
                for res in results.values():
                    res["torch_fp8_calc_diff_vs_bf16"] = t8
                    if not t8 < TORCH_FP8_SUSPECT:
                        res["notes"]["torch_fp8_suspect"] = f"calc_diff vs BF16 {t8:.2e}"
            for (layout, wl), d in outs.items():
                results[layout][f"calc_diff_vs_bf16_{wl}"] = calc_diff(
                    ios[layout].group_rows(d, i), ref16
                )
    for (layout, wl), diff in diffs.items():
        res = results[layout]
        res[f"calc_diff_{wl}"] = diff
        res["calc_diff"] = worse(res.get("calc_diff", 0.0), diff)
        if not diff < TOL:
            add_check(res, f"{wl} calc_diff {diff:.2e}")
        if masked:
            d = outs[(layout, wl)]
            res[f"untouched_ok_{wl}"] = all(
                bool(d[i, r:].isnan().all()) for i, r in enumerate(rows)
            )
            if not res[f"untouched_ok_{wl}"]:
                add_check(res, f"{wl} wrote rows past masked_m")
    for layout, res in results.items():
        raw, prep = outs.get((layout, "raw")), outs.get((layout, "prepared"))
        if raw is not None and prep is not None:
            res["raw_prepared_bitwise"] = bool(
                torch.equal(raw.view(torch.int16), prep.view(torch.int16))
            )


def run_case(case: Fp4Case, args: argparse.Namespace, timer: Timer) -> list[dict]:
    """Checks, then timings, of every selected (layout, weights) variant of `case` and of its
    peers; one row per layout (the torch FP8 peer, on the packed rows, is shared by them)."""
    x = make_inputs(case, args.weights)
    layouts = case.layouts(args.layouts)
    ios = {layout: layout_io(x, layout) for layout in layouts}
    results = {layout: {"errors": {}, "notes": {}} for layout in layouts}
    a8r, sar = rowwise_fp8(x.a16_packed)
    offs = x.lay["offs"]

    def torch_fp8(ws: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return torch._scaled_grouped_mm(
            a8r, ws[0].transpose(-2, -1), sar, ws[1], offs=offs, out_dtype=torch.bfloat16
        )

    probe: Callable | None = torch_fp8
    try:  # does this torch take the call?
        torch_fp8(x.sets["fp8"][0])
        sync()
    except Exception as exc:  # noqa: BLE001 - a note, and n/a columns
        probe = None
        for res in results.values():
            res["notes"]["torch_fp8"] = f"{type(exc).__name__}: {exc}"[:300]
    check_case(x, ios, args.weights, results, probe)
    for layout, io in ios.items():  # ours (raw / prepared alternately, --rounds), BF16 peer
        res = results[layout]
        d = nan_tensor(*io.d_shape)
        timed = [wl for wl in args.weights if f"{wl}_call" not in res["errors"]]
        times: dict[str, list[float]] = {wl: [] for wl in timed}
        for _ in range(args.rounds):
            for wl in timed:
                times[wl].append(timer(rotating(functools.partial(io.call, d=d), x.sets[wl])))
        for wl, ts in times.items():
            res[f"{wl}_us"] = statistics.median(ts)
        d16 = nan_tensor(*io.d_shape)
        bf16 = rotating(functools.partial(io.bf16, d=d16), x.sets["bf16"])
        res["bf16_us"] = try_time(timer, bf16, "bf16", res["errors"])
        del d, d16
    if deep_gemm() is not None:
        w8 = deepgemm_weights(x.w16)
        n8 = rotation(sum(1 for r in case.rows if r) * case.n * case.k, w8[0].numel())
        dg_sets = copies(w8, n8, lambda s: (s[0].clone(), s[1].clone()))
        for layout, io in ios.items():
            if io.deepgemm is None:
                continue
            res = results[layout]
            d8 = nan_tensor(*io.d_shape)
            fn = rotating(functools.partial(io.deepgemm, d=d8), dg_sets)
            res["deepgemm_us"] = try_time(timer, fn, "deepgemm", res["errors"])
            if res.get("deepgemm_us") and res.get("prepared_us"):
                res["x_dg_inrun"] = res["deepgemm_us"] / res["prepared_us"]
            if res.get("deepgemm_us") and res.get("raw_us"):
                res["x_dg_inrun_raw"] = res["deepgemm_us"] / res["raw_us"]
            del d8
        del dg_sets, w8
    t8_us = None
    if probe is not None:
        t8_errors: dict[str, str] = {}
        t8_us = try_time(timer, rotating(torch_fp8, x.sets["fp8"]), "torch_fp8", t8_errors)
        for res in results.values():
            res["notes"].update(t8_errors)
    rotate = {kind: len(s) for kind, s in x.sets.items()}
    return [
        {"layout": layout, **res, "torch_fp8_us": t8_us, "rotate": rotate}
        for layout, res in results.items()
    ]


def case_row(case: Fp4Case) -> dict:
    """The columns every row of `case` starts from (also a failed one's)."""
    return {
        "case": case.name,
        "suite": case.suite,
        "index": case.index,
        "regime": case.regime,
        "rows_nominal": case.rows_nominal,
        "num_groups": case.num_groups,
        "n": case.n,
        "k": case.k,
        "total_rows": case.total_rows,
        "touched_groups": sum(1 for r in case.rows if r),
        "max_m": case.max_m,
        "expected_m": case.expected_m,
        "dg_fp8": case.dg_fp8,
        "mxfp4_engine": case.mxfp4_engine,
        "sweep_shape": case.anchor.get("sweep_shape"),
        "sweep_rows": case.anchor.get("sweep_rows"),
    }


def run_case_rows(
    case: Fp4Case, args: argparse.Namespace, timer: Timer, meter: CopyMeter
) -> list[dict]:
    """run_case with its copy ceilings beside it (decode cases), or the exception that stopped
    it as one row per layout (one failing case must not kill the table)."""
    base = case_row(case)
    try:
        before = meter.measure() if case.regime == "decode" else None
        rows = run_case(case, args, timer)
        if before is not None:
            adjacent = (before + meter.measure()) / 2
            for r in rows:
                r["copy_gbps_adjacent"] = adjacent
    except Exception as exc:  # noqa: BLE001
        if args.verbose:
            traceback.print_exc()
        err = {"exception": f"{type(exc).__name__}: {exc}"[:500]}
        rows = [{"layout": lay, "errors": dict(err)} for lay in case.layouts(args.layouts)]
        with contextlib.suppress(Exception):  # a sticky CUDA error: later cases report it
            torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return [{**base, **r} for r in rows]


def precompile_cases(cases: list[Fp4Case], args: argparse.Namespace) -> None:
    """Compile every kernel the cases run, in parallel, before timing (a kernel left out is
    compiled by its first call, in the check before any timing)."""
    from moegemm.launch.device import arch_for_device

    specs, failures = kernel_specs(
        cases, args.layouts, args.weights, arch_for_device(torch.cuda.current_device())
    )
    for f in sorted(failures)[:5]:
        print(f"# not precompiled: {f}")
    precompile(specs, args.jobs)


def finish(rows: list[dict], meter: CopyMeter, ceilings: dict) -> dict:
    """End of run: copy ceiling at the end and the median of all samples, every row's metrics
    against that median (its own before/after mean kept as pct_copy_adjacent), the summary."""
    with contextlib.suppress(Exception):
        ceilings["copy_gbps_end"] = meter.measure()
    ceilings["copy_gbps_median"] = statistics.median(meter.samples) if meter.samples else None
    for r in rows:
        add_metrics(r, ceilings["copy_gbps_median"])
        if r.get("gbps_fp4") and r.get("copy_gbps_adjacent"):
            r["pct_copy_adjacent"] = r["gbps_fp4"] / r["copy_gbps_adjacent"]
    return summarize(rows)


def print_deepgemm_report(rows: list[dict]) -> None:
    """Ours (prepared, and raw) against DeepGEMM FP8 timed in this run, by rows per group:
    geometric mean and minimum of DeepGEMM us / ours us per regime."""
    timed = [r for r in rows if r.get("x_dg_inrun")]
    if not timed:
        why = (
            "not importable here"
            if deep_gemm() is None
            else "no case ran a layout it has (m_indices, masked; offs has none)"
        )
        print(f"\n# DeepGEMM FP8 in-run: {why}, no in-run ratio")
        return
    print("\n# x DeepGEMM FP8 in-run (DeepGEMM us / ours us): prepared weights [raw]")
    regimes = (("decode <= 32", 0, 32), ("64-256", 33, 256), ("512", 257, 1023),
               ("1024+", 1024, 1 << 30))  # fmt: skip
    for label, lo, hi in regimes:
        sel = [r for r in timed if lo <= (r.get("rows_nominal") or 0) <= hi]
        if not sel:
            continue
        for key in ("x_dg_inrun", "x_dg_inrun_raw"):
            vals = [r[key] for r in sel if r.get(key)]
            if not vals:
                continue
            geo = statistics.geometric_mean(vals)
            worst = min(sel, key=lambda r: r.get(key) or 1e9)
            print(
                f"  {label:13s} {key:15s} n={len(vals):3d} geomean {geo:5.2f} min "
                f"{min(vals):5.2f} ({worst.get('case', '?')} {worst.get('layout', '')})"
            )
    for r in timed:
        print(
            f"  {r.get('case', '?')[:52]:52s} {r.get('layout', ''):9s} "
            f"ours {r.get('prepared_us', 0):8.1f} us  DG {r['deepgemm_us']:8.1f} us  "
            f"x {r['x_dg_inrun']:5.2f}  copy {100 * (r.get('pct_copy') or 0):4.0f}%"
        )


def main(argv: list[str] | None = None) -> int:
    global PREPARE_ARCH
    args = parse_args(argv)
    cases = select_cases(
        load_cases(args.suites, args.quick), args.cases, args.layouts, args.max_cases
    )
    if args.list:
        for c in cases:
            print(
                f"{c.name:56s} {','.join(c.layouts(args.layouts)):16s} {c.regime:7s} "
                f"rows {c.total_rows} max_m {c.max_m}"
            )
        print(f"# {len(cases)} cases")
        return 0
    if not torch.cuda.is_available():
        print("bench_fp8_fp4: no CUDA device", file=sys.stderr)
        return 1
    if moegemm.get_mk_alignment_for_contiguous_layout() != ALIGN:
        print(f"bench_fp8_fp4: the m_indices alignment is not {ALIGN}", file=sys.stderr)
        return 1
    sm100_note = None
    if torch.cuda.get_device_capability()[0] == 10:
        PREPARE_ARCH, (args.weights, sm100_note) = "sm_100f", sm100_weights(args.weights)
        if not args.weights:
            print(f"bench_fp8_fp4: {sm100_note}", file=sys.stderr)
            return 2
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference is FP32
    torch.manual_seed(0)
    t_start = time.perf_counter()
    precompile_cases(cases, args)
    t_compiled = time.perf_counter()
    timer = Timer(queued=True, budget_ms=args.budget_ms, max_iters=args.max_iters)
    meter = CopyMeter(timer)
    ceilings = {"copy_gbps": meter.measure()}
    info = run_info()
    notes = {"sm100": sm100_note} if sm100_note else {}
    if not hasattr(torch, "_scaled_grouped_mm"):
        notes["torch_fp8"] = "this torch has no torch._scaled_grouped_mm: torch FP8 columns n/a"
    if ANCHOR_GPU not in info["gpu"]:  # DeepGEMM only as timed in this run (--deepgemm)
        for case in cases:
            case.dg_fp8.pop("dg_x_torch", None)
        notes["deepgemm"] = f"DeepGEMM anchors were timed on an {ANCHOR_GPU}: estimates n/a"
        print(f"# {notes['deepgemm']}", flush=True)
    print(
        f"# {info['gpu']}, torch {info['torch']}, commit {info['commit']}, {info['date_utc']} "
        f"UTC; {len(cases)} cases, layouts {','.join(args.layouts)}, weights "
        f"{','.join(args.weights)}; copy {ceilings['copy_gbps']:.0f} GB/s at the start",
        flush=True,
    )
    print(HEADER, flush=True)
    rows: list[dict] = []
    for case in cases:
        for r in run_case_rows(case, args, timer, meter):
            add_metrics(r, r.get("copy_gbps_adjacent") or ceilings["copy_gbps"])  # provisional
            rows.append(r)
            print(format_row(r), flush=True)
    summary = finish(rows, meter, ceilings)
    elapsed = time.perf_counter() - t_start
    print(
        f"\n# {len(rows)} rows of {len(cases)} cases in {elapsed:.0f} s "
        f"({t_compiled - t_start:.0f} s compiling)"
    )
    print_report(rows, summary, ceilings)
    print_deepgemm_report(rows)  # the targets last
    if args.json:
        out = {
            **info,
            "args": {k: v for k, v in vars(args).items() if k != "suite"},
            "notes": notes,
            "ceilings": ceilings,
            "rows": rows,
            **summary,
            "elapsed_s": elapsed,
            "compile_s": t_compiled - t_start,
            "case_defs": [asdict(c) for c in cases],
        }
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
