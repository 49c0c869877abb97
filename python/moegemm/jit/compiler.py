"""Finding nvcc and CUTLASS, building the nvcc command line and running it."""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .include_tree import library_include_dir

# 177: declared but never referenced, 550: set but never used, 20012: __device__ on defaulted
# functions; all three are noise from CUTLASS/CuTe headers.
_DIAG_SUPPRESS = "--diag-suppress=177,550,20012"
_GENCODE = {
    "sm_90a": "-gencode=arch=compute_90a,code=sm_90a",
    "sm_100a": "-gencode=arch=compute_100a,code=sm_100a",
    # The family target: runs on every SM10x part; nvcc knows it from 12.9 on.
    "sm_100f": "-gencode=arch=compute_100f,code=sm_100f",
}
# The oldest nvcc that compiles each family target (arch -> (major, minor)).
_MIN_NVCC = {"sm_100f": (12, 9)}
_RELEASE_RE = re.compile(r"release (\d+)\.(\d+)")
_PTXAS_PROPS_RE = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)


class CompileError(RuntimeError):
    """nvcc failed, or its output broke a check (`MOEGEMM_JIT_PTXAS_CHECK`, kernel count)."""


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def debug_enabled() -> bool:
    return env_flag("MOEGEMM_JIT_DEBUG")


def debug_log(message: str) -> None:
    if debug_enabled():
        print(f"[moegemm.jit] {message}", file=sys.stderr, flush=True)


def find_nvcc() -> Path:
    """`$MOEGEMM_NVCC`, `$CUDA_HOME/bin/nvcc`, `/usr/local/cuda/bin/nvcc`, then `PATH`."""
    return _find_nvcc(os.environ.get("MOEGEMM_NVCC"), os.environ.get("CUDA_HOME"))


@functools.cache
def _find_nvcc(override: str | None, cuda_home: str | None) -> Path:
    if override:
        if not os.access(override, os.X_OK):
            raise FileNotFoundError(f"MOEGEMM_NVCC={override} is not an executable")
        return Path(override).absolute()
    candidates = [Path(cuda_home) / "bin" / "nvcc"] if cuda_home else []
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return candidate
    on_path = shutil.which("nvcc")
    if on_path:
        return Path(on_path).absolute()
    raise FileNotFoundError("nvcc not found: set MOEGEMM_NVCC or CUDA_HOME, or put nvcc on PATH")


def compiler_identity() -> dict[str, str]:
    """Which nvcc builds kernels, for the manifest: its path and its `--version` release line.
    Only asked when a kernel is compiled (the answer is kept), never on a cache lookup."""
    return dict(_compiler_identity(find_nvcc()))


@functools.cache
def _compiler_identity(nvcc: Path) -> tuple[tuple[str, str], ...]:
    proc = subprocess.run(
        [str(nvcc), "--version"],
        check=False,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
    )
    release = [line.strip() for line in proc.stdout.splitlines() if "release" in line]
    version = release[-1] if release else f"unknown (nvcc --version exit {proc.returncode})"
    return (("nvcc", str(nvcc)), ("version", version))


def find_cutlass_include() -> Path | None:
    """`$MOEGEMM_CUTLASS_INCLUDE`, else the `nvidia-cutlass` wheel's headers (found without
    importing `cutlass_library`, whose import is slow)."""
    override = os.environ.get("MOEGEMM_CUTLASS_INCLUDE")
    return _find_cutlass_include(override)


@functools.cache
def _find_cutlass_include(override: str | None) -> Path | None:
    if override:
        return Path(override).resolve()
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    candidate = Path(next(iter(spec.submodule_search_locations))) / "source" / "include"
    return candidate if (candidate / "cutlass").is_dir() else None


def cutlass_version() -> str:
    include = find_cutlass_include()
    return _cutlass_version(include) if include else "none"


@functools.cache
def _cutlass_version(include: Path) -> str:
    try:
        text = (include / "cutlass" / "version.h").read_text()
    except OSError:
        return "unknown"
    fields = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"#define\s+CUTLASS_{part}\s+(\d+)", text)
        fields.append(m.group(1) if m else "?")
    return ".".join(fields)


def find_cuobjdump() -> Path | None:
    try:  # a prebuilt cache may be read where no nvcc is installed
        beside: Path | None = find_nvcc().resolve().parent / "cuobjdump"
    except FileNotFoundError:
        beside = None
    if beside is not None and os.access(beside, os.X_OK):
        return beside
    on_path = shutil.which("cuobjdump")
    if on_path:
        return Path(on_path)
    # The nvidia-cuda-cuobjdump wheel (the test extra) installs it under nvidia/cu*/bin.
    spec = importlib.util.find_spec("nvidia")
    for root in spec.submodule_search_locations if spec else ():
        for candidate in sorted(Path(root).glob("cu*/bin/cuobjdump"), reverse=True):
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def cubin_flags(arch: str, extra_flags: Sequence[str] = ()) -> list[str]:
    """The nvcc flags that decide the cubin, without the include paths: all of them enter the
    cache key. Include *paths* stay out of the key (the headers' contents are in it as the
    include-tree digest and the CUTLASS version), so a cache built in one image is valid in
    another that installs moegemm elsewhere. The ptxas report switches are in here too, so
    turning one on recompiles and the report is seen."""
    if arch not in _GENCODE:
        raise ValueError(f"unsupported arch {arch!r}; expected one of {sorted(_GENCODE)}")
    flags = ["-std=c++17", "-O3", "--expt-relaxed-constexpr", "-cubin", _GENCODE[arch]]
    flags += [_DIAG_SUPPRESS, "-Xptxas=--warn-on-spills"]
    if env_flag("MOEGEMM_JIT_LINEINFO"):
        flags.append("-lineinfo")
    if env_flag("MOEGEMM_JIT_PTXAS_CHECK"):
        flags.append("-Xptxas=-v,--warn-on-local-memory-usage")
    elif env_flag("MOEGEMM_JIT_PTXAS_VERBOSE"):
        flags.append("-Xptxas=-v")
    return flags + list(extra_flags)


def include_flags() -> list[str]:
    """`-I` for our headers and CUTLASS's (found without nvcc)."""
    flags = [f"-I{library_include_dir()}"]
    cutlass = find_cutlass_include()
    if cutlass is not None:
        flags.append(f"-I{cutlass}")
    return flags


def nvcc_flags(arch: str, extra_flags: Sequence[str] = ()) -> list[str]:
    """Every nvcc flag except the input and output (our include paths before the extra flags',
    so a spec cannot shadow our headers by accident)."""
    return cubin_flags(arch) + include_flags() + list(extra_flags)


@dataclass(frozen=True)
class CompileResult:
    command: list[str]
    output: str
    seconds: float


def check_ptxas_report(output: str) -> list[str]:
    """Problems in a `-Xptxas=-v` report: spills, a stack frame, local memory use."""
    problems = [line.strip() for line in output.splitlines() if "Local memory used" in line]
    for m in _PTXAS_PROPS_RE.finditer(output):
        if any(int(v) for v in m.groups()):
            problems.append(m.group(0))
    return problems


def nvcc_release(version_line: str) -> tuple[int, int] | None:
    """(major, minor) of an `nvcc --version` release line, None when it has none."""
    m = _RELEASE_RE.search(version_line)
    return (int(m.group(1)), int(m.group(2))) if m else None


def check_nvcc_for(flags: Sequence[str]) -> None:
    """CompileError when the flags target an arch this nvcc is too old for (sm_100f needs
    12.9). Asked only before a compile, never on a cache lookup."""
    for arch, oldest in _MIN_NVCC.items():
        if _GENCODE[arch] not in flags:
            continue
        version = compiler_identity()["version"]
        release = nvcc_release(version)
        if release is None or release < oldest:
            raise CompileError(
                f"{arch} needs nvcc >= {oldest[0]}.{oldest[1]}; {find_nvcc()} is {version!r}. "
                "Install a newer CUDA toolkit or point MOEGEMM_NVCC at one."
            )


def compile_cubin(source_path: Path, cubin_path: Path, flags: Sequence[str]) -> CompileResult:
    """Runs nvcc in the source's folder (so stray headers in the caller's cwd cannot shadow
    system headers); raises CompileError carrying the command and nvcc's output."""
    check_nvcc_for(flags)
    command = [str(find_nvcc()), *flags, str(source_path), "-o", str(cubin_path)]
    debug_log(f"compile: {shlex.join(command)}")
    start = time.perf_counter()
    proc = subprocess.run(
        command,
        check=False,
        cwd=source_path.parent,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
    )
    seconds = time.perf_counter() - start
    output = proc.stdout
    if proc.returncode != 0:
        raise CompileError(
            f"nvcc failed with exit code {proc.returncode} after {seconds:.1f} s\n"
            f"command: {shlex.join(command)}\ncwd: {source_path.parent}\n{output}"
        )
    debug_log(f"compiled {source_path.parent.name} in {seconds:.2f} s")
    if env_flag("MOEGEMM_JIT_PTXAS_VERBOSE") and output:
        print(output, file=sys.stderr, end="" if output.endswith("\n") else "\n", flush=True)
    if env_flag("MOEGEMM_JIT_PTXAS_CHECK"):
        problems = check_ptxas_report(output)
        if problems:
            raise CompileError(
                "MOEGEMM_JIT_PTXAS_CHECK: local memory / spills in "
                f"{source_path}: {'; '.join(problems)}\ncommand: {shlex.join(command)}\n{output}"
            )
    return CompileResult(command=command, output=output, seconds=seconds)


def dump_sass(cubin_path: Path, sass_path: Path) -> Path | None:
    """`cuobjdump --dump-sass` into sass_path (written atomically); None if cuobjdump is absent."""
    tool = find_cuobjdump()
    if tool is None:
        print("[moegemm.jit] MOEGEMM_JIT_DUMP_SASS: cuobjdump not found", file=sys.stderr)
        return None
    proc = subprocess.run(
        [str(tool), "--dump-sass", str(cubin_path)], check=False, capture_output=True, text=True
    )
    if proc.returncode != 0:
        print(f"[moegemm.jit] cuobjdump failed: {proc.stderr.strip()}", file=sys.stderr)
        return None
    tmp = sass_path.with_name(f".{sass_path.name}.{os.getpid()}")
    tmp.write_text(proc.stdout)
    os.replace(tmp, sass_path)
    print(f"[moegemm.jit] SASS: {sass_path}", file=sys.stderr, flush=True)
    return sass_path
