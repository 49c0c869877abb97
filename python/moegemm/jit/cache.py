"""The on-disk kernel cache: one published folder per key, published atomically.

Layout under the root (`$MOEGEMM_CACHE_DIR` or `~/.cache/moegemm`):
  kernels/<name>.<key[:32]>/{kernel.cu, kernel.cubin, manifest.json}
  locks/<key>.lock      per-key flock so concurrent processes compile a kernel once
  tmp/                  build folders, renamed into kernels/ when complete"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from . import compiler
from .compiler import CompileError, debug_log, env_flag
from .cubin import count_cubin_kernels
from .include_tree import include_tree_digest, library_include_dir
from .spec import KernelSpec

REQUIRED_FILES = ("kernel.cu", "kernel.cubin", "manifest.json")
TMP_MAX_AGE_S = 3600.0
_KEY_VERSION = "moegemm-jit-1"  # bump to orphan every existing entry after a layout change


def cache_root() -> Path:
    root = os.environ.get("MOEGEMM_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "moegemm"


def key_for(spec: KernelSpec) -> str:
    """sha256 over everything the cubin depends on; diagnostics-only switches stay out."""
    flags = compiler.nvcc_flags(spec.arch, spec.extra_flags)
    fields = {
        "version": _KEY_VERSION,
        "name": spec.name,
        "source": spec.source,
        "include_tree": include_tree_digest(spec.source, [library_include_dir()]),
        "cutlass": compiler.cutlass_version(),
        "compiler": compiler.compiler_signature(),
        "flags": flags,
        "arch": spec.arch,
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def kernel_folder(spec: KernelSpec, key: str | None = None, root: Path | None = None) -> Path:
    key = key or key_for(spec)
    return (root or cache_root()) / "kernels" / f"{spec.name}.{key[:32]}"


def _validate(folder: Path, key: str) -> tuple[bytes | None, str | None]:
    """(cubin bytes, None) when the folder is complete and sound, else (None, reason);
    (None, None) when there is no folder at all."""
    if not folder.exists():
        return None, None
    for name in REQUIRED_FILES:
        if not (folder / name).is_file():
            return None, f"missing {name}"
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        data = (folder / "kernel.cubin").read_bytes()
    except (OSError, ValueError) as exc:
        return None, f"unreadable: {exc}"
    if manifest.get("key") != key:
        return None, "manifest key mismatch"
    if len(data) != manifest.get("cubin_size") or (
        hashlib.sha256(data).hexdigest() != manifest.get("cubin_sha256")
    ):
        return None, f"cubin size/sha256 mismatch ({len(data)} bytes; truncated or modified)"
    try:
        count = count_cubin_kernels(data)
    except ValueError as exc:
        return None, f"cubin is not a valid ELF: {exc}"
    if count != 1:
        return None, f"cubin holds {count} kernels, expected exactly 1"
    return data, None


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove_folder(folder: Path, root: Path) -> None:
    """Rename aside first so readers never see a half-deleted folder under kernels/."""
    aside = root / "tmp" / f"trash.{folder.name}.{os.getpid()}.{secrets.token_hex(4)}"
    aside.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(folder, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


def _discard(folder: Path, root: Path, reason: str) -> None:
    warnings.warn(
        f"moegemm JIT cache: removing bad kernel folder {folder} ({reason}); rebuilding",
        stacklevel=3,
    )
    _remove_folder(folder, root)


@contextlib.contextmanager
def _key_lock(root: Path, key: str) -> Iterator[None]:
    locks = root / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # released by the kernel if this process dies
        yield
    finally:
        os.close(fd)


def clean_stale_tmp(root: Path | None = None, max_age_s: float = TMP_MAX_AGE_S) -> None:
    """Removes build folders left by killed processes (older than max_age_s)."""
    tmp = (root or cache_root()) / "tmp"
    now = time.time()
    try:
        entries = list(os.scandir(tmp))
    except FileNotFoundError:
        return
    for entry in entries:
        try:
            if now - entry.stat(follow_symlinks=False).st_mtime > max_age_s:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.unlink(entry.path)
        except OSError:
            pass


def _compile_and_publish(spec: KernelSpec, key: str, folder: Path, root: Path) -> bytes:
    tmp_root = root / "tmp"
    tmp_root.mkdir(parents=True, exist_ok=True)
    build = tmp_root / f"{key[:32]}.{os.getpid()}.{secrets.token_hex(4)}"
    build.mkdir()
    keep = published = False
    try:
        source = build / "kernel.cu"
        source.write_text(spec.source)
        cubin = build / "kernel.cubin"
        flags = compiler.nvcc_flags(spec.arch, spec.extra_flags)
        result = compiler.compile_cubin(source, cubin, flags)
        data = cubin.read_bytes()
        count = count_cubin_kernels(data)
        if count != 1:
            raise CompileError(
                f"kernel {spec.name!r} compiled to {count} entry points; a spec must hold "
                f"exactly one __global__\ncommand: {' '.join(result.command)}"
            )
        manifest = {
            "key": key,
            "name": spec.name,
            "arch": spec.arch,
            "flags": flags,
            "cutlass_version": compiler.cutlass_version(),
            "cubin_sha256": hashlib.sha256(data).hexdigest(),
            "cubin_size": len(data),
            "nvcc_command": result.command,
            "compile_seconds": round(result.seconds, 3),
            "created": time.time(),
        }
        (build / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        if env_flag("MOEGEMM_JIT_DUMP_SASS"):
            compiler.dump_sass(cubin, build / "kernel.sass")
        for name in REQUIRED_FILES:
            _fsync_path(build / name)
        _fsync_path(build)
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(build, folder)
            published = True
        except OSError:
            # Someone published first (only possible without working flock, e.g. some NFS);
            # theirs is as good as ours.
            if _validate(folder, key)[0] is None:
                raise
        _fsync_path(folder.parent)
        return data
    except CompileError:
        keep = compiler.debug_enabled()  # leave the failing source for inspection
        if keep:
            debug_log(f"keeping failed build folder {build}")
        raise
    finally:
        if not published and not keep:
            shutil.rmtree(build, ignore_errors=True)


def load_or_build(spec: KernelSpec) -> tuple[Path, bytes]:
    """The published cubin path and its bytes, compiling and publishing it if needed."""
    root = cache_root()
    key = key_for(spec)
    folder = kernel_folder(spec, key, root)
    data, _ = _validate(folder, key)  # fast path: no lock on a hit
    if data is None:
        with _key_lock(root, key):
            # Re-check under the lock: another process may have published meanwhile, and a bad
            # folder is only removed by the lock holder so a fresh one is never thrown away.
            data, reason = _validate(folder, key)
            if data is None:
                if reason is not None:
                    _discard(folder, root, reason)
                debug_log(f"miss {folder.name}")
                clean_stale_tmp(root)
                data = _compile_and_publish(spec, key, folder, root)
            else:
                debug_log(f"hit {folder.name} (published by another process)")
    else:
        debug_log(f"hit {folder.name}")
        if env_flag("MOEGEMM_JIT_DUMP_SASS") and not (folder / "kernel.sass").exists():
            compiler.dump_sass(folder / "kernel.cubin", folder / "kernel.sass")
    return folder / "kernel.cubin", data


def build_or_load(spec: KernelSpec) -> Path:
    """Path of the published cubin for spec, compiling it first if it is not cached."""
    return load_or_build(spec)[0]


def lookup(spec: KernelSpec) -> Path | None:
    """Path of the published cubin if it is cached and valid; never compiles or removes."""
    key = key_for(spec)
    folder = kernel_folder(spec, key)
    return folder / "kernel.cubin" if _validate(folder, key)[0] is not None else None


def invalidate(spec: KernelSpec, reason: str) -> None:
    """Warns and removes spec's published folder (e.g. the driver refused to load it)."""
    root = cache_root()
    key = key_for(spec)
    folder = kernel_folder(spec, key, root)
    with _key_lock(root, key):
        if folder.exists():
            _discard(folder, root, reason)
