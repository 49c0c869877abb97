"""`python -m moegemm.jit --warmup --model NAME`: prebuild every kernel a model can need.

The enumeration is moegemm.warmup.warmup_specs (every config the heuristics pick for token
counts 1..--max-tokens with the model's top_k). --weights picks the family: bf16 builds the BF16
kernels; mxfp4 builds the FP8 x FP4 kernels (FP8 activations x MXFP4 weights, both the raw and
the prepared weight form) of the same shapes instead of the BF16 ones (a preset holds only the
MoE layer's GEMMs: shared experts too are then built as FP8 x FP4). Its default is the
--model preset's own (mxfp4 for gpt-oss-20b/120b, whose checkpoints ship MXFP4 experts), else
bf16 (--shapes, and --suite: a suite spans models and benchmarks run it in either family). Missing kernels are compiled by ninja (parallel,
`[i/n]` progress), one `moegemm.jit._build_one` process per kernel, so locking and publishing
are exactly those of a JIT miss. Needs nvcc only for what is missing, never a GPU; on an SM90
GPU the warmed grouped kernels are then checked and timed (moegemm.warmup.run_check).

Exit status: 0 done, 1 a kernel failed to build or the check failed, 2 bad input or an
environment that cannot do the job (one line on stderr, never a traceback), 130 interrupted
(Ctrl-C; 143 for SIGTERM), 141 stdout closed early."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from ..families import of_arch
from ..heuristics import arch_for, arch_for_compute_capability
from ..jit import cache, compiler
from ..jit.spec import SUPPORTED_ARCHS, KernelSpec
from . import presets
from .ninja_build import BuildReport, WarmupError, run_ninja
from .specs import DEFAULT_MAX_TOKENS, MAX_NUM_GROUPS, WEIGHTS, check_top_k

PROG = "python -m moegemm.jit --warmup"
DEFAULT_NUM_SMS = 132  # H100 / H200 SXM
# The enumeration visits every token count: past this a typo (an extra zero or two) would look
# like a hang rather than an error. Engines batch at most ~10^5 tokens per step.
MAX_MAX_TOKENS = 1 << 20
# The most SMs a GPU of each arch has (the full GH100 and GB100 dies; H100/H200 enable 132,
# B200 148): a larger --num-sms is a typo, and its picks would fit no GPU.
MAX_NUM_SMS = {"sm_90a": 144, "sm_100f": 160}
SPECS_FN_ENV = "MOEGEMM_WARMUP_SPECS_FN"  # tests: replace the enumeration (module:function)
SHAPE_KEYS = ("n", "k", "num_groups", "top_k", "op", "model")
# Rows of 16 bytes: TMA needs 16-byte strides, and BF16 rows of n or k elements.
SHAPE_ALIGN = 8

# (shapes, token_counts, top_k, arch, num_sms, *, weights) -> the kernels
SpecsFn = Callable[..., list[KernelSpec]]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the usage block too: a bad argument is one line here.
        print(f"{PROG}: error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _max_tokens(text: str) -> int:
    value = _positive_int(text)
    if value > MAX_MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_MAX_TOKENS}, got {value}")
    return value


def _token_list(text: str) -> list[int]:
    try:
        tokens = [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        tokens = []
    if not tokens or min(tokens) <= 0:
        raise argparse.ArgumentTypeError(f"must be comma-separated positive integers, got {text!r}")
    return sorted(set(tokens))


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m moegemm.jit",
        description="Prebuild moegemm kernels into the JIT cache (needs nvcc, not a GPU).",
    )
    p.add_argument("--warmup", action="store_true", help="prebuild kernels into the cache")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", metavar="NAME", help="a model preset, e.g. deepseek-v3")
    src.add_argument(
        "--shapes", metavar="FILE", help="JSON list of {n, k[, num_groups, top_k, op, model]}"
    )
    src.add_argument(
        "--suite", metavar="NAME", help="every model of a benchmark suite of moe_shapes.json"
    )
    p.add_argument(
        "--arch",
        default="sm_90a",
        choices=SUPPORTED_ARCHS,
        help="target (default sm_90a); sm_100f (alias sm_100a) builds the SM100 BF16 kernels, "
        "compiled and statically checked, not run on hardware",
    )
    tokens = p.add_mutually_exclusive_group()
    tokens.add_argument(
        "--max-tokens",
        metavar="N",
        type=_max_tokens,
        default=DEFAULT_MAX_TOKENS,
        help=f"cover every token count 1..N (default {DEFAULT_MAX_TOKENS})",
    )
    tokens.add_argument(
        "--tokens",
        metavar="LIST",
        type=_token_list,
        help="only these token counts (comma-separated)",
    )
    p.add_argument(
        "--top-k",
        metavar="K",
        type=_positive_int,
        help="experts per token for shapes without top_k (default: the preset's, else 1)",
    )
    p.add_argument(
        "--weights",
        choices=WEIGHTS,
        help="the experts' weights: bf16 builds the BF16 kernels; mxfp4 builds the FP8 x FP4 "
        "kernels (FP8 activations x MXFP4 weights, raw and prepared forms) for every shape "
        "instead of the BF16 ones (default: the --model preset's own, mxfp4 for "
        "gpt-oss-20b/120b; else bf16)",
    )
    p.add_argument(
        "--num-sms",
        metavar="N",
        type=_positive_int,
        help=f"SMs of the target GPU (default: the SM90 GPU's, else {DEFAULT_NUM_SMS})",
    )
    p.add_argument(
        "--jobs", "-j", metavar="N", type=_positive_int, help="parallel builds (default: CPUs)"
    )
    p.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="cache root (default $MOEGEMM_CACHE_DIR, ~/.cache/moegemm)",
    )
    p.add_argument(
        "--layer",
        action="store_true",
        help="also build the fused MoE layer's kernels (fused_moe, fused_moe_masked) of the "
        "--model preset, for its --weights",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be compiled")
    p.add_argument("--no-check", action="store_true", help="skip the GPU check after the build")
    return p


def _shape_error(where: str, index: int, message: str) -> WarmupError:
    return WarmupError(f"{where}: entry {index}: {message}")


def _check_int(shape: dict[str, Any], key: str, where: str, index: int, align: int) -> None:
    value = shape[key]
    # bool is an int in Python; 4096.0 and "4096" are not integers in a shapes file.
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    if not ok or value % align:
        what = f"a positive multiple of {align}" if align > 1 else "a positive integer"
        why = " (BF16 rows of 16 bytes, for TMA)" if align > 1 else ""
        raise _shape_error(where, index, f"{key} must be {what}{why}, got {value!r}")


def validate_shapes(shapes: Any, where: str) -> list[dict[str, Any]]:
    """The shapes as warmup_specs takes them; WarmupError naming the entry and the key."""
    if not isinstance(shapes, list) or not shapes:
        raise WarmupError(f"{where}: expected a non-empty JSON list of shapes")
    for i, shape in enumerate(shapes):
        if not isinstance(shape, dict):
            raise _shape_error(
                where, i, f'expected an object like {{"n": 4096, "k": 7168}}, got {shape!r}'
            )
        unknown = sorted(set(shape) - set(SHAPE_KEYS))
        if unknown:
            raise _shape_error(
                where,
                i,
                f"unknown key {', '.join(map(repr, unknown))} (allowed: {', '.join(SHAPE_KEYS)})",
            )
        for key in ("n", "k"):
            if key not in shape:
                raise _shape_error(where, i, f"missing {key!r}")
            _check_int(shape, key, where, i, SHAPE_ALIGN)
        for key in ("num_groups", "top_k"):
            if key in shape:
                _check_int(shape, key, where, i, 1)
        if shape.get("num_groups", 1) > MAX_NUM_GROUPS:
            raise _shape_error(
                where,
                i,
                f"num_groups must be at most {MAX_NUM_GROUPS} (the experts of one layer), got "
                f"{shape['num_groups']}",
            )
        if "top_k" in shape:
            try:
                check_top_k(shape["top_k"], shape.get("num_groups", 1))
            except ValueError as exc:
                raise _shape_error(where, i, str(exc)) from None
        for key in ("op", "model"):
            if key in shape and not isinstance(shape[key], str):
                raise _shape_error(where, i, f"{key} must be a string, got {shape[key]!r}")
    return shapes


def load_shapes_file(path: str) -> list[dict[str, Any]]:
    try:
        shapes = json.loads(Path(path).read_text())
    except OSError as exc:
        raise WarmupError(f"cannot read shapes file {path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise WarmupError(f"{path} is not valid JSON: {exc}") from None
    return validate_shapes(shapes, path)


@dataclass
class Workload:
    """What to warm up: a label for the report and the shapes grouped by top_k."""

    label: str
    by_top_k: dict[int, list[dict[str, Any]]]
    weights: str = "bf16"  # specs.WEIGHTS: the family every shape is built in

    @property
    def shapes(self) -> list[dict[str, Any]]:
        return [s for group in self.by_top_k.values() for s in group]


def collect_workload(args: argparse.Namespace) -> Workload:
    try:
        if args.model:
            key = presets.resolve_model(args.model)
            top_k = args.top_k or presets.model_top_k(key)
            weights = args.weights or presets.model_weights(key)
            return Workload(f"model {key}", {top_k: presets.model_shapes(key)}, weights)
        if args.suite:
            by_top_k: dict[int, list[dict[str, Any]]] = {}
            seen: set[tuple[Any, ...]] = set()
            for s in presets.suite_shapes(args.suite):
                # A suite lists a shape once per layout; the enumeration covers every layout.
                shape = {k: s[k] for k in SHAPE_KEYS if k in s}
                ident = tuple(sorted(shape.items()))
                if ident not in seen:
                    seen.add(ident)
                    top_k = args.top_k or presets.model_top_k(s["model"])
                    by_top_k.setdefault(top_k, []).append(shape)
            return Workload(f"suite {args.suite}", by_top_k, args.weights or "bf16")
    except ValueError as exc:
        raise WarmupError(str(exc)) from None
    by_top_k = {}
    for i, shape in enumerate(load_shapes_file(args.shapes)):
        if "top_k" not in shape and args.top_k:
            try:
                check_top_k(args.top_k, shape.get("num_groups", 1), "--top-k")
            except ValueError as exc:
                raise _shape_error(
                    args.shapes, i, f"{exc} (give this entry its own top_k)"
                ) from None
        top_k = shape.pop("top_k", None) or args.top_k or 1
        by_top_k.setdefault(top_k, []).append(shape)
    return Workload(f"shapes file {args.shapes}", by_top_k, args.weights or "bf16")


def specs_function() -> tuple[SpecsFn, bool]:
    """`$MOEGEMM_WARMUP_SPECS_FN` (tests) if set, else moegemm.warmup.warmup_specs; and
    whether the hook replaced it (then the GPU check, which runs moegemm's kernels, is moot)."""
    hook = os.environ.get(SPECS_FN_ENV)
    if hook:
        module_name, _, attr = hook.partition(":")
        if not attr:
            raise WarmupError(f"{SPECS_FN_ENV} must be module:function, got {hook!r}")
        return getattr(importlib.import_module(module_name), attr), True
    from .specs import warmup_specs

    return warmup_specs, False


@dataclass(frozen=True)
class GpuProbe:
    num_sms: int | None  # None: no GPU of the requested arch here
    why_not: str = ""


def probe_gpu(arch: str = "sm_90a") -> GpuProbe:
    """Whether a GPU of `arch` is visible (imports torch; asked only when its answer is used)."""
    try:
        import torch
    except ImportError:
        return GpuProbe(None, "torch is not installed")
    except OSError as exc:  # a torch whose CUDA libraries do not load
        return GpuProbe(None, f"torch does not load ({exc})")
    if not torch.cuda.is_available():
        build = "a CPU build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        return GpuProbe(None, f"no CUDA GPU visible (torch {torch.__version__}, {build})")
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    try:
        device_arch = arch_for_compute_capability(props.major, props.minor)
    except ValueError:
        device_arch = None
    if device_arch != arch_for(arch).name:
        return GpuProbe(None, f"{props.name} is sm_{props.major}{props.minor}, not {arch}")
    return GpuProbe(props.multi_processor_count)


def refuse_file_as_cache_dir(root: Path) -> None:
    """A cache root that is an existing file (mkdir would only say "File exists")."""
    if root.exists() and not root.is_dir():
        raise WarmupError(
            f"the cache dir {root} is a file, not a directory: point --cache-dir (or "
            "$MOEGEMM_CACHE_DIR) at a folder, which is created if missing"
        )


def create_cache_dir(root: Path) -> None:
    """Fails early (before the enumeration) on a cache that cannot exist."""
    refuse_file_as_cache_dir(root)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WarmupError(f"cannot create the cache dir {root}: {exc.strerror or exc}") from None
    if not root.is_dir():
        raise WarmupError(f"the cache dir {root} is not a directory")


def _missing_names(missing: Sequence[KernelSpec]) -> str:
    """'1 missing kernel (name)' or 'N missing kernels (first, second, ...)'."""
    names = ", ".join(spec.name for spec in missing[:3]) + (", ..." if len(missing) > 3 else "")
    return f"{len(missing)} missing kernel{'s' if len(missing) > 1 else ''} ({names})"


def check_writable(root: Path, missing: Sequence[KernelSpec] = ()) -> None:
    """Only asked when something is missing: a shipped read-only cache that holds every kernel
    passes (that is how it is verified); the error names what is missing."""
    probe = root / f".write-test.{os.getpid()}"
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        probe.unlink()
    except OSError as exc:
        what = f"cannot build {_missing_names(missing)}: " if missing else ""
        raise WarmupError(
            f"{what}the cache dir {root} is not writable ({exc.strerror or exc}): "
            "point --cache-dir at a writable folder"
        ) from None


def _token_range(args: argparse.Namespace) -> tuple[Sequence[int], str]:
    if args.tokens:
        return args.tokens, "tokens " + ",".join(map(str, args.tokens))
    return range(1, args.max_tokens + 1), f"tokens 1..{args.max_tokens}"


def _other_compiler_note(cached: Sequence[KernelSpec]) -> str | None:
    """A line when cached kernels were built by another nvcc version than the one here (they
    are used as they are: the compiler is not part of the key; see jit/cache.py)."""
    try:
        here = compiler.compiler_identity()["version"]
    except FileNotFoundError:
        return None
    others: dict[str, int] = {}
    for spec in cached:
        version = ((cache.read_manifest(spec) or {}).get("compiler") or {}).get("version")
        if version and version != here:
            others[version] = others.get(version, 0) + 1
    if not others:
        return None
    which = "; ".join(f"{n} by {v}" for v, n in others.items())
    return (
        f"note: cached kernels built by another nvcc ({which}; this one: {here}) are used as "
        f"they are; delete {cache.cache_root() / 'kernels'} to rebuild them"
    )


def _hardware_checked(arch: str) -> bool:
    """Whether the check runs `arch`'s kernels on its GPU (those of SM100 are compiled and
    statically checked only)."""
    return all(family.hardware_checked for family in of_arch(arch_for(arch)))


def _target_sms(args: argparse.Namespace) -> tuple[int, str, GpuProbe | None]:
    """(num_sms, how the report names it, the GPU probe if one was made)."""
    if args.num_sms is not None:
        return args.num_sms, f"{args.num_sms} SMs", None
    gpu = probe_gpu(args.arch)
    if not _hardware_checked(args.arch):  # SM100: this GPU's SM count if it is one, else B200's
        if gpu.num_sms is not None:
            return gpu.num_sms, f"{gpu.num_sms} SMs of this GPU", None
        sms = arch_for(args.arch).num_sms
        return sms, f"{sms} SMs (B200; --num-sms for another GPU)", None
    if gpu.num_sms is not None:
        return gpu.num_sms, f"{gpu.num_sms} SMs of this GPU", gpu
    return DEFAULT_NUM_SMS, f"{DEFAULT_NUM_SMS} SMs (H100/H200 SXM; --num-sms for another GPU)", gpu


def _announce(args: argparse.Namespace, workload: Workload, sms_label: str, tokens: str) -> None:
    count = len(workload.shapes)
    top_ks = "/".join(map(str, workload.by_top_k))
    if workload.weights == "mxfp4":
        family = "MXFP4 weights (FP8 x FP4 kernels, raw and prepared weights)"
    else:
        family = "BF16 weights"
    print(
        f"moegemm warmup: {workload.label} ({count} shape{'s' if count > 1 else ''}, top_k "
        f"{top_ks}), {family}, {args.arch} with {sms_label}, {tokens}",
        flush=True,
    )
    if args.shapes:
        dense = [s for s in workload.shapes if "num_groups" not in s]
        if dense:
            print(
                f"note: {len(dense)} shape(s) without num_groups are built as one dense GEMM "
                "each; give num_groups (the expert count) for routed experts"
            )
    routed_top_1 = [s for s in workload.by_top_k.get(1, []) if s.get("num_groups", 1) > 1]
    if routed_top_1 and not (args.model or args.suite or args.top_k):
        print(
            f"note: {len(routed_top_1)} grouped shape(s) without top_k are built for one routed "
            "row per token; give --top-k or a top_k field for the model's experts per token"
        )


def _enumerate(
    specs_fn: SpecsFn,
    workload: Workload,
    token_counts: Sequence[int],
    arch: str,
    num_sms: int,
) -> list[KernelSpec]:
    specs: dict[KernelSpec, None] = {}
    weights = workload.weights
    try:
        for top_k, shapes in workload.by_top_k.items():
            for spec in specs_fn(shapes, token_counts, top_k, arch, num_sms, weights=weights):
                specs[spec] = None
    except ValueError as exc:  # warmup_specs's own argument checks
        raise WarmupError(str(exc)) from None
    if not specs:
        raise WarmupError(f"no kernels to build for {workload.label} on {arch}")
    return list(specs)


def _layer(
    args: argparse.Namespace, workload: Workload, token_counts: Sequence[int], num_sms: int
) -> list[KernelSpec]:
    """The fused layer's kernels of `--layer` (layer_specs.py)."""
    if not args.model:
        raise WarmupError("--layer needs --model (the layer's sizes and activation come from it)")
    from .layer_specs import layer_specs

    key = presets.resolve_model(args.model)
    specs = layer_specs(key, token_counts, args.arch, num_sms, weights=workload.weights)
    what = f"{presets.model_activation(key)}, {workload.weights} experts"
    print(f"fused layer ({what}): {len(specs)} kernels", flush=True)
    return specs


def _build_missing(missing: Sequence[KernelSpec], root: Path, jobs: int | None) -> BuildReport:
    if not missing:
        return BuildReport()
    check_writable(root, missing)
    try:
        compiler.find_nvcc()
    except FileNotFoundError as exc:
        raise WarmupError(f"cannot compile {_missing_names(missing)}: {exc}") from None
    return run_ninja(missing, jobs or os.cpu_count() or 1)


def run_warmup(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    if args.cache_dir:
        os.environ["MOEGEMM_CACHE_DIR"] = str(Path(args.cache_dir).expanduser().resolve())
    workload = collect_workload(args)
    root = cache.cache_root().absolute()
    if args.dry_run:
        refuse_file_as_cache_dir(root)  # the real run would refuse it: so does its dry run
    else:
        create_cache_dir(root)
    specs_fn, hooked = specs_function()
    token_counts, token_label = _token_range(args)
    num_sms, sms_label, gpu = _target_sms(args)
    _announce(args, workload, sms_label, token_label)
    specs = _enumerate(specs_fn, workload, token_counts, args.arch, num_sms)
    if args.layer:
        specs = list(dict.fromkeys(specs + _layer(args, workload, token_counts, num_sms)))
    present = {s: cache.lookup(s) is not None for s in specs}
    missing = [s for s in specs if not present[s]]
    cached = [s for s in specs if present[s]]
    print(
        f"{len(specs)} kernels into {root / 'kernels'}: {len(missing)} to compile, "
        f"{len(cached)} already cached",
        flush=True,
    )
    if args.dry_run:
        for spec in missing:
            print(f"would compile {spec.name} ({spec.arch})")
        print(
            f"warmup (dry run): {len(specs)} kernels, would compile {len(missing)}, "
            f"already cached {len(cached)}, {time.perf_counter() - start:.1f} s"
        )
        return 0
    report = _build_missing(missing, root, args.jobs)
    note = _other_compiler_note(cached)
    if note:
        print(note)
    print(
        f"warmup: {len(specs)} kernels, compiled {report.compiled}, built elsewhere "
        f"{report.built_elsewhere}, already cached {len(cached)}, failed {report.failed}, "
        f"{time.perf_counter() - start:.1f} s",
        flush=True,
    )
    if report.failed:
        return 1
    return _check(args, workload, hooked, gpu, num_sms)


def _check(
    args: argparse.Namespace,
    workload: Workload,
    hooked: bool,
    gpu: GpuProbe | None,
    num_sms: int,
) -> int:
    if args.no_check:
        print("check: skipped (--no-check)")
        return 0
    if hooked:
        print(f"check: skipped ({SPECS_FN_ENV} replaced moegemm's kernels)")
        return 0
    if not _hardware_checked(args.arch):
        print(f"check: skipped, {args.arch} kernels are compiled and statically checked only")
        return 0
    gpu = gpu or probe_gpu(args.arch)
    if gpu.num_sms is None:
        print(f"check: skipped, {gpu.why_not}; the kernels are built and cached")
        return 0
    if gpu.num_sms != num_sms:
        print(f"check: skipped, built for {num_sms} SMs and this GPU has {gpu.num_sms}")
        return 0
    from .check import run_check

    weights = workload.weights
    if weights == "mxfp4":
        print(
            "check: the warmed FP8 x FP4 kernels against FP32 on the dequantized operands, "
            "timed against torch FP8 rowwise and torch BF16",
            flush=True,
        )
    else:
        print("check: the warmed grouped kernels against FP32, timed against torch", flush=True)
    ok = True
    for top_k, shapes in workload.by_top_k.items():
        if args.tokens:
            tokens = args.tokens
            ok &= run_check(shapes, top_k, max(tokens), token_counts=tokens, weights=weights)
        else:
            ok &= run_check(shapes, top_k, args.max_tokens, weights=weights)
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    # Ctrl-C anywhere, the argument parsing and the lazy imports (torch, the heuristics)
    # included, raises KeyboardInterrupt into the handler below, whatever handler the entry
    # point (jit/__main__.py) held during its own imports.
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous_term = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        return _parse_and_run(argv)
    except WarmupError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # run_ninja has stopped its builds; what finished is published and stays cached.
        print(f"{PROG}: interrupted; kernels built so far stay cached", file=sys.stderr)
        return 130
    except _Terminated:
        print(f"{PROG}: terminated; kernels built so far stay cached", file=sys.stderr)
        return 128 + signal.SIGTERM
    except BrokenPipeError:
        # stdout closed early (`--dry-run | head`): stop quietly, as Unix tools do, and keep
        # Python's exit-time flush from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
    finally:
        signal.signal(signal.SIGTERM, previous_term)
        signal.signal(signal.SIGINT, previous_int)


def _parse_and_run(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    given = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(given)
    if not args.warmup:
        if not given:
            parser.print_help()
            return 2
        parser.error("add --warmup (the only command) to prebuild kernels")
    if not (args.model or args.shapes or args.suite):
        parser.error("--warmup needs --model, --shapes or --suite")
    max_sms = MAX_NUM_SMS[arch_for(args.arch).name]
    if args.num_sms is not None and args.num_sms > max_sms:
        parser.error(
            f"argument --num-sms: must be at most {max_sms} for {args.arch} (the SMs of its "
            f"largest GPU), got {args.num_sms}"
        )
    return run_warmup(args)


class _Terminated(BaseException):
    """SIGTERM (a service manager stopping us): BaseException, like KeyboardInterrupt, so that
    nothing on the way catches it and run_ninja stops its builds first."""


def _exit_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated
