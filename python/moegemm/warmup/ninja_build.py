"""Builds many kernels in parallel for the warmup: a `build.ninja` with one edge per kernel, each
a `python -m moegemm.jit._build_one` process (the JIT's own locked, atomic publication).

The ninja folder holds only specs and stamps (the builds happen in the cache's tmp/), so it
lives in the system temp dir: the cache's stale-tmp sweep must not remove it during a warmup
that runs for hours. Each stamp says what its edge did (`compiled` or `built_elsewhere`)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from ..jit import cache
from ..jit.include_tree import library_include_dir
from ..jit.spec import KernelSpec

STOP_TIMEOUT_S = 30.0


class WarmupError(Exception):
    """A user-facing warmup error: one line on stderr, exit status 2."""


@dataclass(frozen=True)
class BuildReport:
    compiled: int = 0
    built_elsewhere: int = 0  # published by another process (a racing warmup or JIT miss)
    failed: int = 0


def find_ninja() -> str:
    on_path = shutil.which("ninja")
    if on_path:
        return on_path
    try:
        import ninja  # the pip package ships a binary
    except ImportError:
        raise WarmupError("ninja not found: pip install ninja") from None
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
        "  description = build $kernel",
        "",
    ]
    for i, spec in enumerate(specs):
        (build_dir / "specs" / f"{i}.json").write_text(json.dumps(spec.to_json()))
        lines += [f"build stamps/{i}.ok: build specs/{i}.json", f"  kernel = {spec.name}"]
    path = build_dir / "build.ninja"
    path.write_text("\n".join(lines) + "\n")
    return path


def _child_env() -> dict[str, str]:
    """Pin what the children must agree with us on: the cache root, our include dir and the
    import path of this very moegemm package."""
    env = dict(os.environ)
    # Absolute: ninja runs its edges in its own folder (-C), where a relative root would differ.
    env["MOEGEMM_CACHE_DIR"] = str(cache.cache_root().absolute())
    env["MOEGEMM_LIGHT_IMPORT"] = "1"  # a build child needs the JIT, not torch
    env["MOEGEMM_INCLUDE_DIR"] = str(library_include_dir())
    package_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_parent, env.get("PYTHONPATH")) if p)
    return env


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to ninja, which passes it to its edges' process groups (each `_build_one` then
    cleans its build folder); SIGKILL if it does not end in time."""
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _read_stamps(build_dir: Path, count: int) -> BuildReport:
    compiled = elsewhere = 0
    for i in range(count):
        try:
            outcome = (build_dir / "stamps" / f"{i}.ok").read_text().strip()
        except FileNotFoundError:
            continue
        compiled += outcome == "compiled"
        elsewhere += outcome == "built_elsewhere"
    return BuildReport(compiled, elsewhere, count - compiled - elsewhere)


_PROGRESS = re.compile(r"\[\d+/\d+\] ")
_FAILED_EDGE = re.compile(r"FAILED: .*?stamps/(\d+)\.ok")
# The framing _build_one and compiler.compile_cubin put around the compiler's own words.
_FRAMING = ("moegemm: failed to compile ", "nvcc failed with exit code ", "command: ", "cwd: ")


class FailureFilter:
    """Ninja's output as the warmup shows it. A broken compiler or header fails every kernel
    alike, and ninja would repeat the command and error for each: the first failed kernel's
    output passes in full, each later one becomes one line naming the kernel and the first line
    of its error (the line its own output would have led with)."""

    def __init__(self, names: Sequence[str], out: TextIO) -> None:
        self._names = names  # kernel name by edge index (stamps/<i>.ok)
        self._out = out
        self._held: list[str] | None = None  # a later failure's output, being read
        self._held_name = ""
        self._first_error: str | None = None
        self.failures = 0

    def feed(self, line: str) -> None:
        failed = _FAILED_EDGE.match(line)
        if failed or _PROGRESS.match(line) or line.startswith("ninja: "):
            self._flush()  # a failure's output ends where ninja speaks again
        if failed:
            self.failures += 1
            name = self._names[int(failed.group(1))]
            if self.failures == 1:
                self._write(f"FAILED: {name}\n")
            else:
                self._held, self._held_name = [], name
            return
        if self._held is not None:
            self._held.append(line)
            return
        if self.failures == 1 and self._first_error is None and _is_error_line(line):
            self._first_error = line.strip()
        self._write(line)

    def close(self) -> None:
        self._flush()

    def _flush(self) -> None:
        if self._held is None:
            return
        error = next((x.strip() for x in self._held if _is_error_line(x)), "no output")
        same = " (as above)" if error == self._first_error else ""
        self._write(f"FAILED: {self._held_name}: {error[:300]}{same}\n")
        self._held = None

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()


def _is_error_line(line: str) -> bool:
    """Whether a line of a failed edge's output is the compiler's (or the cache's) own words
    rather than ninja's command line or the framing around them."""
    text = line.strip()
    return bool(text) and "moegemm.jit._build_one" not in text and not text.startswith(_FRAMING)


def run_ninja(specs: Sequence[KernelSpec], jobs: int) -> BuildReport:
    """Builds specs with `jobs` parallel edges, echoing ninja's progress and the failures
    (FailureFilter: the first in full, one line for each other). On
    KeyboardInterrupt (or any BaseException: the CLI turns SIGTERM into one) the builds are
    stopped first."""
    ninja = find_ninja()
    with tempfile.TemporaryDirectory(prefix="moegemm-warmup-") as tmp:
        build_dir = Path(tmp)
        write_build_ninja(build_dir, specs)
        # Its own session: a Ctrl-C reaches only us, and we stop ninja in order (_stop).
        proc = subprocess.Popen(
            [ninja, "-C", str(build_dir), "-j", str(jobs), "-k", "0"],
            env=_child_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        shown = FailureFilter([spec.name for spec in specs], sys.stdout)
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not line.startswith("ninja: Entering directory"):
                    shown.feed(line)
            shown.close()
            proc.wait()
        except BaseException:
            _stop(proc)
            raise
        return _read_stamps(build_dir, len(specs))
