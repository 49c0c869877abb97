"""The current tree's kernels against a baseline build of another revision, interleaved in ONE
process: "performance must not move".

    python tools/build_twins.py [--baseline REV_OR_DIR] [--json PATH] [--quick] [--cases RX]

The baseline (default: the `.baseline/` folder of the repository if it exists, else git revision
3f8aa66) is staged and built as the package `moegemm_baseline` by tools/baseline_build.py
(its module docstring says how the two are kept apart). Then, for every case of
benchmarks/bf16_cases.py and every layout it runs on (contiguous cases as `offs` and
`m_indices`, masked, k-grouped with C accumulated in place) plus the dense shapes of
bench_bf16_gemm.py, and on request (--layouts fp4_masked,fp4_offs) FP8 x FP4 on prepared MXFP4
weights over the sweep of benchmarks/fp8_fp4_cases.py (masked to 256 rows a group, offsets at 256
and 1024; each package prepares the same checkpoint-layout weights itself):

1. both packages pick their config for the problem (the descs their APIs build): the names are
   reported, and whether they match;
2. both run once on the same inputs into NaN-poisoned outputs: where the picks match the outputs
   must be bitwise equal (on the rows the layout defines), and each is checked against an FP32
   reference (max calc_diff over groups < 1e-5);
3. both are timed through their public API, alternately (new old old new new old ...: `--rounds`
   samples each, in ABBA order so a linear drift of the clocks hits both alike); each sample is
   a CUDA-event median over a ~60 ms budget of launches queued behind a GPU sleep (no host gaps,
   so the host paths do not count), weights rotated when they fit in L2 (as bench_bf16.py).

Per problem: new / old time (median of the samples) and the method's own spread (the larger
max/min - 1 of either side's samples): a ratio within it has not moved. Per layout: the geometric
mean of new / old (target 1.00 +- 0.01). The table per layout is printed last; --json writes
everything.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib
import itertools
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

import torch
from ab_timing import (
    ALL_LAYOUTS,
    FP4_LAYOUTS,
    LAYOUTS,
    ROW_HEADER,
    compare,
    format_row,
    format_summary,
    interleave,
    summarize,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))  # the benchmarks' cases and timer
from bench_common import Timer

DEVICE = "cuda"  # the CPU test runs the whole flow on "cpu" with fake packages
DEFAULT_REV = "3f8aa66"  # the baseline before the skeleton refactor
TOL = 1e-5  # calc_diff against FP32 (BENCHMARKS.md protocol)
L2_BYTES = 60 * 2**20


# ----------------------------------------------------------------------------------------------
# Problems (CPU-only)


@dataclass(frozen=True)
class Problem:
    """One (case, layout): the GemmDesc fields both packages' APIs build for it."""

    case: str
    layout: str
    kind: str
    m: int
    n: int
    k: int
    num_groups: int = 1
    expected_m: int = 0
    d_dtype: str = "bf16"
    with_c: bool = False
    ab_dtype: str = "bf16"
    weights: str = ""  # FP8 x FP4: "prepared"
    windowed: bool = False  # FP8 x FP4: the prepared weights fit the table's window

    @property
    def label(self) -> str:
        return f"{self.case} [{self.layout}]"


def is_fp4(case) -> bool:
    """An FP8 x FP4 case (fp8_fp4_cases.Fp4Case: rows_nominal) rather than a BF16 one."""
    return hasattr(case, "rows_nominal")


def problems_for(case) -> list[Problem]:
    """The problems of a bf16_cases.Case (or a dense case: layout "dense", rows [m]) or of an
    fp8_fp4_cases.Fp4Case (fp4_masked, fp4_offs)."""
    g, n, k, total = case.num_groups, case.n, case.k, sum(case.rows)
    if is_fp4(case):
        # The runners' weights (random normal) fit the window (fp4_runners_for checks): the
        # picks are those of the calls, the convert-ahead kernel among them.
        fp4 = {"ab_dtype": "fp8_fp4", "weights": "prepared", "windowed": True}
        if case.layout == "masked":
            expected = min(case.expected_m, case.max_m)
            return [Problem(case.name, "fp4_masked", "m_grouped_masked", case.max_m, n, k, g,
                            expected, **fp4)]  # fmt: skip
        if case.layout == "contiguous":
            return [Problem(case.name, "fp4_offs", "m_grouped_offsets", total, n, k, g,
                            math.ceil(total / g), **fp4)]  # fmt: skip
        raise ValueError(f"unknown FP8 x FP4 layout {case.layout!r}")
    if case.layout == "dense":
        return [Problem(case.name, "dense", "bf16_gemm_nt", total, n, k)]
    if case.layout == "contiguous":
        from bf16_cases import ALIGN, round_up

        padded = sum(round_up(r, ALIGN) for r in case.rows)
        return [
            Problem(case.name, "offs", "m_grouped_offsets", total, n, k, g, math.ceil(total / g)),
            Problem(case.name, "m_indices", "m_grouped_contiguous", padded, n, k, g),
        ]
    if case.layout == "masked":
        expected = min(case.expected_m, case.max_m)
        return [Problem(case.name, "masked", "m_grouped_masked", case.max_m, n, k, g, expected)]
    if case.layout == "k_grouped":
        per_group = math.ceil(total / g)
        return [Problem(case.name, "k_grouped", "k_grouped", n, k, per_group, g, 0, "fp32", True)]
    raise ValueError(f"unknown layout {case.layout!r}")


def dense_cases() -> list:
    from bf16_cases import DENSE_CASES, Case

    return [Case("dense", i, f"dense:{name}", "dense", 1, n, k, [m]) for i, (name, m, n, k) in
            enumerate(DENSE_CASES)]  # fmt: skip


# ----------------------------------------------------------------------------------------------
# One package's side of the comparison


@dataclass
class Side:
    """A moegemm package (the current `moegemm` or `moegemm_baseline`): its heuristics' pick
    for a problem and the kernel spec that pick compiles to (for parallel precompilation)."""

    label: str
    module: ModuleType

    def sub(self, name: str) -> ModuleType:
        return importlib.import_module(f"{self.module.__name__}.{name}")

    def arch(self, num_sms: int):
        return self.sub("heuristics").arch_for("sm_90a", num_sms)

    def desc(self, p: Problem):
        fp4 = {"ab_dtype": p.ab_dtype, "weights": p.weights} if p.ab_dtype != "bf16" else {}
        if p.windowed:
            fp4["windowed"] = True
        return self.sub("heuristics").GemmDesc(
            kind=p.kind,
            m=p.m,
            n=p.n,
            k=p.k,
            num_groups=p.num_groups,
            d_dtype=p.d_dtype,
            with_c=p.with_c,
            expected_m=p.expected_m,
            **fp4,
        )

    def pick(self, p: Problem, num_sms: int):
        """The package's pick: `families.select_config`, or `heuristics.select_config` where
        the package has no families (a baseline revision before them)."""
        select = getattr(self.sub("heuristics"), "select_config", None)
        if select is None:
            select = self.sub("families").select_config
        return select(self.desc(p), self.arch(num_sms))

    def spec(self, p: Problem, num_sms: int):
        """The KernelSpec of the pick: `families.kernel_spec(desc, config)` where the package
        has the registry, else its plans' kernel_spec, else the pre-refactor codegen
        functions."""
        desc, config = self.desc(p), self.pick(p, num_sms)
        for owner in ("families", "launch.plans", "api.plans"):
            try:
                module = self.sub(owner)
            except ModuleNotFoundError:
                continue
            if hasattr(module, "kernel_spec"):
                return module.kernel_spec(desc, config)
        if p.ab_dtype != "bf16":
            raise NotImplementedError("no kernel_spec for FP8 x FP4 in this package")
        codegen = self.sub("jit.codegen")
        if desc.kind == "k_grouped":
            return codegen.sm90_bf16_k_grouped_spec(config, desc.with_c)
        return codegen.sm90_bf16_gemm_spec(config, desc.d_dtype, desc.with_c, desc.kind)

    def build(self, spec) -> None:
        self.sub("jit.cache").build_or_load(spec)


def precompile(sides: Sequence[Side], problems: Sequence[Problem], num_sms: int, jobs: int):
    """Compiles (or finds cached) every pick of every side in parallel. Returns notes: a side
    whose specs cannot be derived compiles at its first call instead (serially, slower)."""
    notes: list[str] = []
    work = []
    for side in sides:
        specs: dict = {}
        for p in problems:
            try:
                specs[side.spec(p, num_sms)] = None
            except Exception as exc:  # noqa: BLE001 - that problem compiles at its first call
                notes.append(f"{side.label}: no spec for {p.label}: {type(exc).__name__}: {exc}")
        work += [(side, s) for s in specs]
    t0 = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {pool.submit(side.build, spec): (side, spec) for side, spec in work}
        for fut in concurrent.futures.as_completed(futures):
            try:
                fut.result()
            except Exception as exc:  # noqa: BLE001 - the problem reports it when it runs
                side, spec = futures[fut]
                notes.append(f"{side.label}: {spec.name} failed to build: {exc}"[:2000])
    print(f"# precompiled {len(work)} kernels in {time.perf_counter() - t0:.0f} s", flush=True)
    return notes


# ----------------------------------------------------------------------------------------------
# GPU: inputs and checks


@dataclass
class Runner:
    """One problem on the GPU, for either package (`pkg`: moegemm or moegemm_baseline)."""

    new_out: Callable[[], torch.Tensor]  # a NaN-poisoned output
    run_once: Callable[[ModuleType, torch.Tensor], object]  # the checked call
    timed: Callable[[ModuleType, torch.Tensor], Callable[[], object]]  # the timed call
    diffs: Callable[[list[torch.Tensor]], list[float]]  # max calc_diff vs FP32 of each output
    compared: Callable[[torch.Tensor], torch.Tensor] = lambda out: out  # rows that must agree


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def randn_bf16(*shape: int, scale: float = 1.0) -> torch.Tensor:
    t = torch.randn(*shape, device=DEVICE, dtype=torch.bfloat16)
    return t.mul_(scale) if scale != 1.0 else t


def nan_tensor(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.full(shape, float("nan"), device=DEVICE, dtype=dtype)


def rotation_count(set_bytes: int) -> int:
    """Operand sets to rotate among so that together they exceed 3x the L2 (at most 16)."""
    if set_bytes <= 0 or set_bytes >= 3 * L2_BYTES:
        return 1
    return max(2, min(16, math.ceil(3 * L2_BYTES / set_bytes)))


def worse(a: float, b: float) -> float:
    """max() that keeps NaN (a NaN diff is a failure)."""
    return float("nan") if math.isnan(a) or math.isnan(b) else max(a, b)


def bit_view(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


def _cycling(fn: Callable, items: list) -> Callable[[], object]:
    cycle = itertools.cycle(items)
    return lambda: fn(next(cycle))


def runners_for(case) -> dict[str, Runner]:
    """The GPU inputs of a case (random normal, weights x 0.02, shared by both packages) and a
    Runner per layout it runs on."""
    from bf16_cases import ALIGN, group_layouts

    from moegemm.testing import calc_diff

    if is_fp4(case):
        return fp4_runners_for(case)
    g, n, k, rows = case.num_groups, case.n, case.k, case.rows
    total = sum(rows)
    if case.layout == "dense":
        count = rotation_count((total + n) * k * 2)
        sets = [(randn_bf16(total, k), randn_bf16(n, k, scale=0.02)) for _ in range(count)]

        def dense_diffs(outs):
            ref = sets[0][0].float() @ sets[0][1].float().t()
            return [calc_diff(o, ref) for o in outs]

        return {
            "dense": Runner(
                new_out=lambda: nan_tensor(total, n),
                run_once=lambda pkg, out: pkg.bf16_gemm_nt(*sets[0], out),
                timed=lambda pkg, out: _cycling(lambda ab: pkg.bf16_gemm_nt(*ab, out), sets),
                diffs=dense_diffs,
            )
        }
    if case.layout == "k_grouped":
        a, b = randn_bf16(total, n), randn_bf16(total, k)
        lay = group_layouts(rows, device=DEVICE)
        offs, starts = lay["offs"], lay["starts"]
        c = torch.randn(g, n, k, device=DEVICE)

        def kg_diffs(outs):
            worst = [0.0] * len(outs)
            for grp, (r, s) in enumerate(zip(rows, starts)):
                ref = a[s : s + r].float().t() @ b[s : s + r].float() + c[grp]
                worst = [worse(w, calc_diff(o[grp], ref)) for w, o in zip(worst, outs)]
            return worst

        def kg_timed(pkg, out):
            out.normal_()  # accumulated in place, as DeepGEMM's k-grouped test does
            api = pkg.k_grouped_bf16_gemm_tn_contiguous
            return lambda: api(a, b, out, offs, out)

        return {
            "k_grouped": Runner(
                new_out=lambda: nan_tensor(g, n, k, dtype=torch.float32),
                run_once=lambda pkg, out: pkg.k_grouped_bf16_gemm_tn_contiguous(a, b, out, offs, c),
                timed=kg_timed,
                diffs=kg_diffs,
            )
        }
    bs = [
        randn_bf16(g, n, k, scale=0.02)
        for _ in range(rotation_count(sum(1 for r in rows if r) * n * k * 2))
    ]
    if case.layout == "masked":
        max_m, expected = case.max_m, case.expected_m
        a = randn_bf16(g, max_m, k)
        masked_m = torch.tensor(rows, device=DEVICE, dtype=torch.int32)

        def masked_diffs(outs):
            worst = [0.0] * len(outs)
            for grp, r in enumerate(rows):
                if r:
                    ref = a[grp, :r].float() @ bs[0][grp].float().t()
                    worst = [worse(w, calc_diff(o[grp, :r], ref)) for w, o in zip(worst, outs)]
            return worst

        def masked_call(pkg, out, b):
            return pkg.m_grouped_bf16_gemm_nt_masked(a, b, out, masked_m, expected)

        return {
            "masked": Runner(
                new_out=lambda: nan_tensor(g, max_m, n),
                run_once=lambda pkg, out: masked_call(pkg, out, bs[0]),
                timed=lambda pkg, out: _cycling(lambda b: masked_call(pkg, out, b), bs),
                diffs=masked_diffs,
            )
        }
    lay = group_layouts(rows, ALIGN, device=DEVICE)
    a = randn_bf16(total, k)
    a_pad = randn_bf16(lay["padded_total"], k)  # padding rows stay random (never zeros)
    a_pad[lay["real_rows"]] = a
    offs, m_indices, real_rows = lay["offs"], lay["m_indices"], lay["real_rows"]

    def contiguous_diffs(outs, padded):
        worst = [0.0] * len(outs)
        for grp, (r, s, ps) in enumerate(zip(rows, lay["starts"], lay["padded_starts"])):
            if r:
                ref = a[s : s + r].float() @ bs[0][grp].float().t()
                lo = ps if padded else s
                worst = [worse(w, calc_diff(o[lo : lo + r], ref)) for w, o in zip(worst, outs)]
        return worst

    def offs_call(pkg, out, b):
        return pkg.m_grouped_bf16_gemm_nt_contiguous(a, b, out, offs=offs)

    def idx_call(pkg, out, b):
        return pkg.m_grouped_bf16_gemm_nt_contiguous(a_pad, b, out, m_indices)

    return {
        "offs": Runner(
            new_out=lambda: nan_tensor(total, n),
            run_once=lambda pkg, out: offs_call(pkg, out, bs[0]),
            timed=lambda pkg, out: _cycling(lambda b: offs_call(pkg, out, b), bs),
            diffs=lambda outs: contiguous_diffs(outs, False),
        ),
        "m_indices": Runner(
            new_out=lambda: nan_tensor(lay["padded_total"], n),
            run_once=lambda pkg, out: idx_call(pkg, out, bs[0]),
            timed=lambda pkg, out: _cycling(lambda b: idx_call(pkg, out, b), bs),
            diffs=lambda outs: contiguous_diffs(outs, True),
            compared=lambda out: out[real_rows],  # padding rows are unspecified
        ),
    }


def fp4_runners_for(case) -> dict[str, Runner]:
    """An FP8 x FP4 case: FP8 activations with 1 x 128 scales (per_token_cast_to_fp8 of random
    normal data), MXFP4 weights quantize_mxfp4(random normal x 0.02) in the checkpoint layout,
    prepared by each package's own prepare_mxfp4_weights (a revision may lay them out another
    way). The reference: FP32 on the dequantized operands."""
    from moegemm.quant import dequantize_mxfp4, per_token_cast_to_fp8, quantize_mxfp4
    from moegemm.testing import calc_diff

    g, n, k, rows = case.num_groups, case.n, case.k, case.rows
    b, sfb = quantize_mxfp4(randn_bf16(g, n, k, scale=0.02))
    count = rotation_count(sum(1 for r in rows if r) * n * k // 2)
    raw = [(b, sfb)] + [(b.clone(), sfb.clone()) for _ in range(count - 1)]
    prepared: dict[str, list] = {}  # per package, prepared on first use

    def weights(pkg) -> list:
        if pkg.__name__ not in prepared:
            prepared[pkg.__name__] = [pkg.prepare_mxfp4_weights(*w) for w in raw]
            if not all(getattr(w, "windowed", True) for w in prepared[pkg.__name__]):
                raise RuntimeError(f"{case.name}: weights outside the window (picks would differ)")
        return prepared[pkg.__name__]

    def cast(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a8, sfa = per_token_cast_to_fp8(x.reshape(-1, k))
        return a8.view(*x.shape), sfa.view(*x.shape[:-1], sfa.shape[-1])

    def dequant(a8: torch.Tensor, sfa: torch.Tensor) -> torch.Tensor:
        return a8.float() * sfa.repeat_interleave(128, dim=-1)[..., :k]

    def group_ref(grp: int, a_rows: torch.Tensor, s_rows: torch.Tensor) -> torch.Tensor:
        return dequant(a_rows, s_rows) @ dequantize_mxfp4(b[grp], sfb[grp]).float().t()

    def runner(new_out, call, diffs) -> Runner:
        return Runner(
            new_out=new_out,
            run_once=lambda pkg, out: call(pkg, out, weights(pkg)[0]),
            timed=lambda pkg, out: _cycling(lambda w: call(pkg, out, w), weights(pkg)),
            diffs=diffs,
        )

    if case.layout == "masked":
        max_m, expected = case.max_m, min(case.expected_m, case.max_m)
        a8, sfa = cast(randn_bf16(g, max_m, k))
        masked_m = torch.tensor(rows, device=DEVICE, dtype=torch.int32)

        def masked_diffs(outs):
            worst = [0.0] * len(outs)
            for grp, r in enumerate(rows):
                if r:
                    ref = group_ref(grp, a8[grp, :r], sfa[grp, :r])
                    worst = [worse(w, calc_diff(o[grp, :r], ref)) for w, o in zip(worst, outs)]
            return worst

        def masked_call(pkg, out, w):
            return pkg.m_grouped_fp8_fp4_gemm_nt_masked((a8, sfa), w, out, masked_m, expected)

        return {"fp4_masked": runner(lambda: nan_tensor(g, max_m, n), masked_call, masked_diffs)}
    total = sum(rows)
    a8, sfa = cast(randn_bf16(total, k))
    ends = list(itertools.accumulate(rows))
    offs = torch.tensor(ends, device=DEVICE, dtype=torch.int32)

    def offs_diffs(outs):
        worst = [0.0] * len(outs)
        for grp, (r, end) in enumerate(zip(rows, ends)):
            if r:
                ref = group_ref(grp, a8[end - r : end], sfa[end - r : end])
                worst = [worse(w, calc_diff(o[end - r : end], ref)) for w, o in zip(worst, outs)]
        return worst

    def offs_call(pkg, out, w):
        return pkg.m_grouped_fp8_fp4_gemm_nt_contiguous((a8, sfa), w, out, offs=offs)

    return {"fp4_offs": runner(lambda: nan_tensor(total, n), offs_call, offs_diffs)}


def run_problem(
    p: Problem, runner: Runner, new: Side, old: Side, timer, rounds: int, num_sms: int
) -> dict:
    """Picks, checks (bitwise where the picks match, FP32 reference always), then the
    interleaved timing of one problem; a failure is recorded in the row, never raised."""
    row: dict = {"problem": p.label, "case": p.case, "layout": p.layout, "errors": {}}
    for side in (new, old):
        try:
            row[f"{side.label}_pick"] = side.pick(p, num_sms).short_name()
        except Exception as exc:  # noqa: BLE001 - the API still picks for itself
            row["errors"][f"{side.label}_pick"] = f"{type(exc).__name__}: {exc}"[:200]
    row["same_pick"] = row.get("new_pick") is not None and row.get("new_pick") == row.get(
        "old_pick"
    )
    try:
        outs = {side.label: runner.new_out() for side in (new, old)}
        for side in (new, old):
            runner.run_once(side.module, outs[side.label])
        sync()
        diff_new, diff_old = runner.diffs([outs["new"], outs["old"]])
        row["calc_diff_new"], row["calc_diff_old"] = diff_new, diff_old
        if not (diff_new < TOL and diff_old < TOL):
            row["errors"]["check"] = f"calc_diff new {diff_new:.2e} old {diff_old:.2e}"
        if row["same_pick"]:
            row["bitwise"] = bool(
                torch.equal(
                    bit_view(runner.compared(outs["new"])), bit_view(runner.compared(outs["old"]))
                )
            )
            if not row["bitwise"]:
                row["errors"]["bitwise"] = "same config, outputs differ"
        fns = {side.label: runner.timed(side.module, outs[side.label]) for side in (new, old)}
        samples = interleave(timer, fns, rounds)
        row.update(compare(samples["new"], samples["old"]))
    except Exception as exc:  # noqa: BLE001 - one failing problem must not end the table
        row["errors"]["exception"] = f"{type(exc).__name__}: {exc}"[:500]
        with contextlib.suppress(Exception):
            sync()
    return row


def _echo(line: str) -> None:
    print(line, flush=True)


def run_all(problems, new, old, timer, rounds: int, num_sms: int, echo=_echo) -> list[dict]:
    """run_problem for every (case, problem), a case's inputs made once for all its layouts and
    freed after them; one line per problem goes to echo as it finishes."""
    rows: list[dict] = []
    for _, group in itertools.groupby(problems, key=lambda cp: id(cp[0])):
        group = list(group)
        try:
            runners, err = runners_for(group[0][0]), ""
        except Exception as exc:  # noqa: BLE001 - e.g. out of memory: the case fails alone
            runners, err = {}, f"inputs: {type(exc).__name__}: {exc}"[:300]
        for _, p in group:
            if p.layout in runners:
                row = run_problem(p, runners[p.layout], new, old, timer, rounds, num_sms)
            else:
                row = {"problem": p.label, "case": p.case, "layout": p.layout,
                       "errors": {"exception": err or "no runner"}}  # fmt: skip
            rows.append(row)
            echo(format_row(row))
        del runners
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    return rows


# ----------------------------------------------------------------------------------------------
# Main


def _git_head() -> str:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        )
        return out.stdout.strip()
    return "working tree (no git)"


def baseline_source(spec: str | None) -> dict:
    """stage() arguments for --baseline: a directory (a checkout or an extracted `git archive`;
    default .baseline/ of the repository when present) or a git revision (default 3f8aa66)."""
    if spec is None:
        spec = str(REPO / ".baseline") if (REPO / ".baseline").is_dir() else DEFAULT_REV
    if Path(spec).is_dir():
        return {"source_dir": Path(spec)}
    return {"rev": spec, "repo": REPO}


def fp4_cases(quick: bool, offs_rows: Sequence[int] = (256, 1024)) -> list:
    """The FP8 x FP4 sweep's cases (benchmarks/fp8_fp4_cases.py): masked to 256 rows a group,
    offsets at `offs_rows` rows a group (default 256 and 1024; 4096 costs a minute of inputs and
    checks a shape)."""
    from fp8_fp4_cases import load_cases as load_fp4_cases

    return [c for c in load_fp4_cases(("sweep",), quick=quick)
            if c.layout == "masked" or c.rows_nominal in offs_rows]  # fmt: skip


def select_cases(args) -> list:
    from bf16_cases import filter_cases, load_cases

    cases = load_cases(quick=args.quick) if set(args.layouts) & set(LAYOUTS) else []
    if "dense" in args.layouts:
        cases = dense_cases()[:: 2 if args.quick else 1] + cases
    if set(args.layouts) & set(FP4_LAYOUTS):
        cases += fp4_cases(args.quick, args.fp4_rows)
    return filter_cases(cases, args.cases)


def baseline_label(source: dict, pkg) -> str:
    """The baseline's name: a REVISION file beside the sources (written when .baseline/ is made
    from `git archive`), else the revision or folder it was staged from."""
    revision = source.get("source_dir", pkg.root) / "REVISION"
    return revision.read_text().strip() if revision.is_file() else pkg.label


def compare_picks(new: Side, old: Side, problems: Sequence[Problem], num_sms: int) -> list[dict]:
    """Each side's pick per problem (CPU only: the heuristics need no GPU and no _C)."""
    rows = []
    for p in problems:
        row = {"problem": p.label, "layout": p.layout}
        for side in (new, old):
            try:
                row[side.label] = side.pick(p, num_sms).short_name()
            except Exception as exc:  # noqa: BLE001 - reported in the row
                row[side.label] = f"error: {type(exc).__name__}: {exc}"[:120]
        row["same"] = row["new"] == row["old"]
        rows.append(row)
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", help="git revision or source dir (default: see above)")
    parser.add_argument("--work-dir", default="/tmp/moegemm_baseline", help="staging and cache")
    parser.add_argument("--json", help="write all results here")
    parser.add_argument("--quick", action="store_true", help="a few cases per suite")
    parser.add_argument("--cases", help="regex: only cases whose name matches")
    parser.add_argument("--layouts", default=",".join(LAYOUTS),
                        help=f"comma-separated, of {','.join(ALL_LAYOUTS)} (default: the BF16 ones)")  # fmt: skip
    parser.add_argument("--fp4-rows", default="256,1024",
                        help="FP8 x FP4 offsets: rows a group of the sweep (of 256,1024,4096)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=4, help="timed samples of each side")
    parser.add_argument("--budget-ms", type=float, default=60.0, help="GPU time per sample")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 8, help="parallel builds")
    parser.add_argument("--list", action="store_true", help="list the problems and exit")
    parser.add_argument(
        "--picks",
        action="store_true",
        help="CPU only: stage the baseline (no _C), print both sides' picks at --num-sms, exit",
    )
    parser.add_argument("--num-sms", type=int, default=132, help="SMs for --picks")
    parser.add_argument(
        "--new-label", help="the current tree's name in the report (default: git HEAD, if any)"
    )
    parser.add_argument("--allow-env", action="store_true", help="run with MOEGEMM_* switches set")
    args = parser.parse_args(argv)
    args.layouts = tuple(x for x in args.layouts.split(",") if x)
    args.fp4_rows = tuple(int(x) for x in args.fp4_rows.split(",") if x)
    if unknown := set(args.layouts) - set(ALL_LAYOUTS):
        parser.error(f"unknown layouts {sorted(unknown)}; known: {ALL_LAYOUTS}")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import baseline_build

    problems = [
        (case, p) for case in select_cases(args) for p in problems_for(case) if p.layout in args.layouts
    ]  # fmt: skip
    if args.list:
        for _, p in problems:
            print(f"{p.label:76s} {p.kind} m{p.m} n{p.n} k{p.k} g{p.num_groups} e{p.expected_m}")
        return 0
    if (switches := baseline_build.foreign_switches()) and not args.allow_env:
        print(f"build_twins: {switches} set; they could change one side only", file=sys.stderr)
        return 2
    source = baseline_source(args.baseline)
    if args.picks:
        pkg, baseline = baseline_build.prepare(Path(args.work_dir), build=False, **source)
        import moegemm

        rows = compare_picks(Side("new", moegemm), Side("old", baseline), [p for _, p in problems],
                             args.num_sms)  # fmt: skip
        for r in rows:
            print(
                f"{r['problem'][:76]:76s} {r['new']:28s} {'==' if r['same'] else '!='} {r['old']}"
            )
        same = sum(r["same"] for r in rows)
        print(
            f"# {same} of {len(rows)} picks match ({baseline_label(source, pkg)}, {args.num_sms} SMs)"
        )
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1))
        return 0 if same == len(rows) else 1
    if not torch.cuda.is_available():
        print("build_twins: no CUDA device", file=sys.stderr)
        return 1
    t_start = time.perf_counter()
    pkg, baseline = baseline_build.prepare(Path(args.work_dir), jobs=args.jobs, **source)
    old_label = baseline_label(source, pkg)
    import moegemm

    new, old = Side("new", moegemm), Side("old", baseline)
    for side in (new, old):
        with contextlib.suppress(AttributeError):
            side.module.set_pdl(False)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    torch.manual_seed(0)
    notes = precompile((new, old), [p for _, p in problems], num_sms, args.jobs)
    for note in notes:
        print(f"# {note}"[:400])
    new_label = args.new_label or _git_head()
    print(
        f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; new {new_label} "
        f"({Path(moegemm.__file__).parent}) vs old {old_label} ({pkg.package_dir}); "
        f"{args.rounds} samples each, ABBA order",
        flush=True,
    )
    print(ROW_HEADER, flush=True)
    rows = run_all(problems, new, old, Timer(budget_ms=args.budget_ms), args.rounds, num_sms)
    summary = summarize(rows)
    elapsed = time.perf_counter() - t_start
    print(f"\n# {len(rows)} problems in {elapsed:.0f} s; new {new_label} vs old {old_label}")
    print(format_summary(summary))
    if args.json:
        out = {
            "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "new": new_label,
            "old": old_label,
            "rounds": args.rounds,
            "budget_ms": args.budget_ms,
            "notes": notes,
            "summary": summary,
            "rows": rows,
            "problems": [asdict(p) for _, p in problems],
            "elapsed_s": elapsed,
        }
        Path(args.json).write_text(json.dumps(out, indent=1, default=str))
    failed = any(s["check_failed"] for s in summary.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
