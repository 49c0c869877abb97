"""Prebuilding every kernel a model needs: `python -m moegemm.jit --warmup --model NAME`.

Kernels are compiled by ninja (parallel, `[i/n]` progress), one `_build_one` process per kernel,
so locking and publishing are exactly those of a normal JIT miss. Needs nvcc, not a GPU."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from . import cache, presets
from .include_tree import library_include_dir
from .spec import SUPPORTED_ARCHS, KernelSpec

DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
DEFAULT_NUM_SMS = {"sm_90a": 132, "sm_100a": 148}
SPECS_FN_ENV = "MOEGEMM_WARMUP_SPECS_FN"

SpecsFn = Callable[[list[dict[str, Any]], list[int], str, int], list[KernelSpec]]


class WarmupError(Exception):
    """A user-facing error: printed without a traceback, exit code 2."""


def spec_to_json(spec: KernelSpec) -> dict[str, Any]:
    return {
        "name": spec.name,
        "source": spec.source,
        "arch": spec.arch,
        "extra_flags": list(spec.extra_flags),
    }


def spec_from_json(obj: dict[str, Any]) -> KernelSpec:
    return KernelSpec(
        name=obj["name"],
        source=obj["source"],
        arch=obj.get("arch", "sm_90a"),
        extra_flags=tuple(obj.get("extra_flags", ())),
    )


def specs_function() -> SpecsFn:
    """`$MOEGEMM_WARMUP_SPECS_FN` (`module:function`) if set, else `moegemm.api.warmup_specs`."""
    hook = os.environ.get(SPECS_FN_ENV)
    if hook:
        module_name, _, attr = hook.partition(":")
        if not attr:
            raise WarmupError(f"{SPECS_FN_ENV} must be module:function, got {hook!r}")
        return getattr(importlib.import_module(module_name), attr)
    try:
        from moegemm.api import warmup_specs
    except ImportError as exc:
        raise WarmupError(f"moegemm.api.warmup_specs is not available: {exc}") from exc
    return warmup_specs


def load_shapes_file(path: str) -> list[dict[str, Any]]:
    try:
        shapes = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise WarmupError(f"cannot read shapes file {path}: {exc}") from exc
    if not isinstance(shapes, list) or not all(
        isinstance(s, dict) and "n" in s and "k" in s for s in shapes
    ):
        raise WarmupError(f"{path}: expected a JSON list of objects with 'n' and 'k'")
    return shapes


def parse_tokens(text: str) -> list[int]:
    try:
        tokens = [int(t) for t in text.split(",") if t.strip()]
    except ValueError as exc:
        raise WarmupError(f"--tokens must be comma-separated integers, got {text!r}") from exc
    if not tokens or min(tokens) <= 0:
        raise WarmupError(f"--tokens must be positive integers, got {text!r}")
    return tokens


def find_ninja() -> str:
    on_path = shutil.which("ninja")
    if on_path:
        return on_path
    try:
        import ninja  # the pip package ships a binary
    except ImportError as exc:
        raise WarmupError("ninja not found: pip install ninja") from exc
    return str(Path(ninja.BIN_DIR) / "ninja")


def _ninja_escape(text: str) -> str:
    return text.replace("$", "$$").replace(" ", "$ ").replace(":", "$:").replace("\n", "$\n")


def write_build_ninja(build_dir: Path, specs: Sequence[KernelSpec]) -> Path:
    """One edge per kernel: `specs/<i>.json` -> `stamps/<i>.ok` via `_build_one`."""
    (build_dir / "specs").mkdir(parents=True, exist_ok=True)
    (build_dir / "stamps").mkdir(exist_ok=True)
    python = shlex.quote(sys.executable)
    lines = [
        "ninja_required_version = 1.3",
        "rule build",
        f"  command = {_ninja_escape(python)} -m moegemm.jit._build_one $in $out",
        "  description = compile $kernel",
        "",
    ]
    for i, spec in enumerate(specs):
        (build_dir / "specs" / f"{i}.json").write_text(json.dumps(spec_to_json(spec)))
        lines += [f"build stamps/{i}.ok: build specs/{i}.json", f"  kernel = {spec.name}"]
    path = build_dir / "build.ninja"
    path.write_text("\n".join(lines) + "\n")
    return path


def _child_env() -> dict[str, str]:
    """Pin what the children must agree with us on: the cache root, our include dir and the
    import path of this very moegemm package."""
    env = dict(os.environ)
    env["MOEGEMM_CACHE_DIR"] = str(cache.cache_root())
    env["MOEGEMM_LIGHT_IMPORT"] = "1"  # a build child needs the JIT, not torch
    env["MOEGEMM_INCLUDE_DIR"] = str(library_include_dir())
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def collect_shapes(args: argparse.Namespace) -> list[dict[str, Any]]:
    try:
        if args.model:
            return presets.model_shapes(args.model)
        if args.suite:
            return presets.suite_shapes(args.suite)
    except ValueError as exc:
        raise WarmupError(str(exc)) from exc
    return load_shapes_file(args.shapes)


def dedupe(specs: Sequence[KernelSpec]) -> list[KernelSpec]:
    return list(dict.fromkeys(specs))


def run_warmup(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    if args.cache_dir:
        os.environ["MOEGEMM_CACHE_DIR"] = str(Path(args.cache_dir).resolve())
    shapes = collect_shapes(args)
    tokens = parse_tokens(args.tokens) if args.tokens else list(DEFAULT_TOKENS)
    num_sms = args.num_sms or DEFAULT_NUM_SMS[args.arch]
    specs = dedupe(specs_function()(shapes, tokens, args.arch, num_sms))
    missing = [s for s in specs if cache.lookup(s) is None]
    cached = len(specs) - len(missing)
    if args.dry_run:
        for spec in missing:
            print(f"would compile {spec.name} ({spec.arch})")
        print(
            f"warmup (dry run): {len(specs)} kernels, would compile {len(missing)}, "
            f"already cached {cached}, {time.perf_counter() - start:.1f} s"
        )
        return 0
    compiled = failed = 0
    if missing:
        root = cache.cache_root()
        build_dir = root / "tmp" / f"warmup-{os.getpid()}"
        shutil.rmtree(build_dir, ignore_errors=True)
        try:
            write_build_ninja(build_dir, missing)
            jobs = args.jobs or os.cpu_count() or 1
            subprocess.run(
                [find_ninja(), "-C", str(build_dir), "-j", str(jobs), "-k", "0"],
                env=_child_env(),
                check=False,
            )
            compiled = sum((build_dir / "stamps" / f"{i}.ok").exists() for i in range(len(missing)))
            failed = len(missing) - compiled
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
    print(
        f"warmup: {len(specs)} kernels, compiled {compiled}, already cached {cached}, "
        f"failed {failed}, {time.perf_counter() - start:.1f} s",
        flush=True,
    )
    if failed:
        return 1
    # The check exercises moegemm's own kernels: meaningless when a hook replaced the specs.
    hooked = bool(os.environ.get(SPECS_FN_ENV))
    if not (args.no_check or hooked) and args.arch == "sm_90a" and _sm90_gpu_present():
        from ..testing.quick_check import run_quick_check

        print("GPU present: checking and timing the warmed kernels", flush=True)
        if not run_quick_check(shapes, tokens):
            return 1
    return 0


def _sm90_gpu_present() -> bool:
    """Only imports torch (slow) when the user did not opt out of the check."""
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m moegemm.jit", description="moegemm JIT tools (needs nvcc, not a GPU)"
    )
    p.add_argument("--warmup", action="store_true", help="prebuild kernels into the cache")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", help="a model preset, e.g. deepseek-v3")
    src.add_argument("--shapes", help="JSON list of {n, k[, op, num_groups, tokens]}")
    src.add_argument("--suite", help="a benchmark suite from moe_shapes.json (all its models)")
    p.add_argument("--arch", default="sm_90a", choices=SUPPORTED_ARCHS)
    p.add_argument("--num-sms", type=int, default=None, help="default: 132 (sm_90a), 148")
    p.add_argument("--jobs", "-j", type=int, default=None, help="default: os.cpu_count()")
    p.add_argument("--tokens", help="comma-separated token counts (default 1..8192, powers of 2)")
    p.add_argument("--cache-dir", help="cache root (default $MOEGEMM_CACHE_DIR, ~/.cache/moegemm)")
    p.add_argument("--dry-run", action="store_true", help="list what would be compiled")
    p.add_argument(
        "--no-check",
        action="store_true",
        help="on an SM90 GPU, skip the check-and-benchmark that follows the build",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.warmup:
        parser.print_help()
        return 2
    if not (args.model or args.shapes or args.suite):
        parser.error("--warmup needs --model, --shapes or --suite")
    try:
        return run_warmup(args)
    except WarmupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
