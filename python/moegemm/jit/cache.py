"""The on-disk kernel cache: one published folder per key, published atomically.

Layout under the root (`$MOEGEMM_CACHE_DIR` or `~/.cache/moegemm`):
  kernels/<name>.<key[:32]>/{kernel.cu, kernel.cubin, manifest.json}
  locks/<key>.lock      per-key flock so concurrent processes compile a kernel once
  tmp/                  build folders, renamed into kernels/ when complete

A lookup needs no compiler: the key is what the cubin is made of (source, the moegemm headers'
contents, the CUTLASS version, the cubin-deciding flags, the arch), and the compiler that built
it is recorded in the manifest instead. So a runtime image without nvcc uses a cache prebuilt
elsewhere, and a different nvcc on the machine does not rebuild what is cached (the cubin is a
finished sm_90a binary; the warmup reports entries built by another nvcc version, and deleting
the cache folder rebuilds them). A miss that cannot be built here (no nvcc, or a read-only
cache) raises KernelNotCachedError, one line naming the kernel and how to prebuild it."""

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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from . import compiler
from .compiler import CompileError, debug_log, env_flag
from .cubin import count_cubin_kernels
from .include_tree import include_tree_digest, library_include_dir
from .spec import KernelSpec

REQUIRED_FILES = ("kernel.cu", "kernel.cubin", "manifest.json")
TMP_MAX_AGE_S = 3600.0
# Bump to orphan every existing entry after a layout change; 2: compiler and include paths
# left the key (the manifest records the compiler).
_KEY_VERSION = "moegemm-jit-2"
PREBUILD_COMMAND = "python -m moegemm.jit --warmup --model NAME (or --shapes FILE)"

# What build() found: a valid entry on the first look ("cached"), one another process
# published while this one waited for the key's lock ("built_elsewhere"), or a fresh compile.
Outcome = Literal["cached", "built_elsewhere", "compiled"]


class KernelNotCachedError(RuntimeError):
    """A kernel is not in the cache (or its entry is unusable) and this process cannot build
    it: no nvcc, or the cache is not writable. The message is one line naming the kernel, the
    cache, why its entry is unusable where it has one, and the command that prebuilds it."""


class CacheEntryRemovedWarning(UserWarning):
    """A bad cache entry (truncated, modified, refused by the driver) was removed and is being
    rebuilt. Shown as one line: what a user reads in a server's log, not a source location."""


_plain_formatwarning = warnings.formatwarning


def _formatwarning(  # type: ignore[no-untyped-def]
    message, category, filename, lineno, line=None
) -> str:
    # Chained, and only for this module's category: the default format adds the file, line and
    # source text of the warn() call, which tell a user nothing about their cache.
    if isinstance(category, type) and issubclass(category, CacheEntryRemovedWarning):
        return f"{message}\n"
    return _plain_formatwarning(message, category, filename, lineno, line)


warnings.formatwarning = _formatwarning


@dataclass(frozen=True)
class CacheEntry:
    path: Path  # the published kernel.cubin
    data: bytes
    outcome: Outcome


def cache_root() -> Path:
    root = os.environ.get("MOEGEMM_CACHE_DIR")
    return Path(root).expanduser() if root else Path.home() / ".cache" / "moegemm"


def key_for(spec: KernelSpec) -> str:
    """sha256 over everything the cubin is made of; diagnostics-only switches stay out, and so
    do the compiler and the include paths (module docstring), so no lookup looks for nvcc."""
    return hashlib.sha256(json.dumps(_key_fields(spec), sort_keys=True).encode()).hexdigest()


def _key_fields(spec: KernelSpec) -> dict[str, Any]:
    return {
        "version": _KEY_VERSION,
        "name": spec.name,
        "source": spec.source,
        "include_tree": include_tree_digest(spec.source, [library_include_dir()]),
        "cutlass": compiler.cutlass_version(),
        "flags": compiler.cubin_flags(spec.arch, spec.extra_flags),
        "arch": spec.arch,
    }


def _not_cached(
    spec: KernelSpec, root: Path, why: str, corrupt: str | None = None
) -> KernelNotCachedError:
    """corrupt: why the kernel's existing entry is unusable (None: it has none); a damaged entry
    is another repair (the shipped cache is bad) than a kernel never prebuilt."""
    where = (
        f"has a corrupt entry in the moegemm cache {root} ({corrupt}) and cannot be rebuilt here"
        if corrupt
        else f"is not in the moegemm cache {root} and cannot be built here"
    )
    return KernelNotCachedError(
        f"kernel {spec.name} ({spec.arch}) {where}: {why}; prebuild it where nvcc is available "
        f"with `{PREBUILD_COMMAND}` and MOEGEMM_CACHE_DIR (or --cache-dir) pointing at this cache"
    )


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
        CacheEntryRemovedWarning,
        stacklevel=3,
    )
    _remove_folder(folder, root)


@contextlib.contextmanager
def _key_lock(root: Path, key: str, on_error: Callable[[OSError], Exception]) -> Iterator[None]:
    """The key's exclusive flock. A cache we cannot write (read-only image, someone else's
    folder) fails here, before anything is compiled: on_error turns that into the caller's
    exception."""
    locks = root / "locks"
    try:
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(locks / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise on_error(exc) from exc
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


def _compile_and_publish(
    spec: KernelSpec,
    key: str,
    folder: Path,
    root: Path,
    on_write_error: Callable[[OSError], Exception],
) -> bytes:
    """on_write_error turns a refused write into the caller's exception (a bare OSError would
    name a path of the cache, not the kernel)."""
    tmp_root = root / "tmp"
    build = tmp_root / f"{key[:32]}.{os.getpid()}.{secrets.token_hex(4)}"
    try:
        tmp_root.mkdir(parents=True, exist_ok=True)
        build.mkdir()
    except OSError as exc:
        raise on_write_error(exc) from exc
    keep = published = False
    try:
        source = build / "kernel.cu"
        source.write_text(spec.source)
        cubin = build / "kernel.cubin"
        result = compiler.compile_cubin(
            source, cubin, compiler.nvcc_flags(spec.arch, spec.extra_flags)
        )
        data = cubin.read_bytes()
        count = count_cubin_kernels(data)
        if count != 1:
            raise CompileError(
                f"kernel {spec.name!r} compiled to {count} entry points; a spec must hold "
                f"exactly one __global__\ncommand: {' '.join(result.command)}"
            )
        fields = _key_fields(spec)
        manifest = {
            "key": key,
            "name": spec.name,
            "arch": spec.arch,
            "flags": fields["flags"],
            "cutlass_version": fields["cutlass"],
            "include_tree": fields["include_tree"],
            "compiler": compiler.compiler_identity(),
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
        try:
            folder.parent.mkdir(parents=True, exist_ok=True)
            os.rename(build, folder)
            published = True
        except OSError as exc:
            # Someone published first (only possible without working flock, e.g. some NFS);
            # theirs is as good as ours.
            if _validate(folder, key)[0] is None:
                raise on_write_error(exc) from exc
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


def _unwritable(
    spec: KernelSpec, root: Path, corrupt: str | None
) -> Callable[[OSError], Exception]:
    """The KernelNotCachedError of a refused write; corrupt: why the kernel's existing entry is
    unusable (None: it has none)."""

    def make(exc: OSError) -> Exception:
        why = f"the cache is not writable ({exc.strerror or type(exc).__name__})"
        return _not_cached(spec, root, why, corrupt)

    return make


def build(spec: KernelSpec) -> CacheEntry:
    """The published cubin for spec, compiling and publishing it if needed; the outcome says
    which (the warmup's report). KernelNotCachedError when it is missing and cannot be built."""
    root = cache_root()
    key = key_for(spec)
    folder = kernel_folder(spec, key, root)
    data, reason = _validate(folder, key)  # fast path: no lock, no compiler on a hit
    if data is not None:
        debug_log(f"hit {folder.name}")
        if env_flag("MOEGEMM_JIT_DUMP_SASS") and not (folder / "kernel.sass").exists():
            _dump_sass_quietly(folder)
        return CacheEntry(folder / "kernel.cubin", data, "cached")
    # The reason found before the lock names a corrupt entry where the lock itself is refused
    # (a read-only cache); under the lock it is looked at again.
    with _key_lock(root, key, _unwritable(spec, root, reason)):
        # Re-check under the lock: another process may have published meanwhile, and a bad
        # folder is only removed by the lock holder so a fresh one is never thrown away.
        data, reason = _validate(folder, key)
        if data is not None:
            debug_log(f"hit {folder.name} (published by another process)")
            return CacheEntry(folder / "kernel.cubin", data, "built_elsewhere")
        try:
            compiler.find_nvcc()
        except FileNotFoundError as exc:
            raise _not_cached(spec, root, str(exc), reason) from None
        on_write_error = _unwritable(spec, root, reason)
        if reason is not None:
            try:
                _discard(folder, root, reason)
            except OSError as exc:
                raise on_write_error(exc) from exc
        debug_log(f"miss {folder.name}")
        clean_stale_tmp(root)
        data = _compile_and_publish(spec, key, folder, root, on_write_error)
        return CacheEntry(folder / "kernel.cubin", data, "compiled")


def _dump_sass_quietly(folder: Path) -> None:
    try:
        compiler.dump_sass(folder / "kernel.cubin", folder / "kernel.sass")
    except OSError as exc:  # a read-only cache: the SASS is a diagnostic, the kernel is fine
        debug_log(f"MOEGEMM_JIT_DUMP_SASS: cannot write beside {folder}: {exc}")


def load_or_build(spec: KernelSpec) -> tuple[Path, bytes]:
    """The published cubin path and its bytes, compiling and publishing it if needed."""
    entry = build(spec)
    return entry.path, entry.data


def build_or_load(spec: KernelSpec) -> Path:
    """Path of the published cubin for spec, compiling it first if it is not cached."""
    return build(spec).path


def lookup(spec: KernelSpec) -> Path | None:
    """Path of the published cubin if it is cached and valid; never compiles, removes or
    looks for a compiler."""
    key = key_for(spec)
    folder = kernel_folder(spec, key)
    return folder / "kernel.cubin" if _validate(folder, key)[0] is not None else None


def read_manifest(spec: KernelSpec) -> dict[str, Any] | None:
    """The manifest of spec's valid cache entry (what built it and how), else None."""
    key = key_for(spec)
    folder = kernel_folder(spec, key)
    if _validate(folder, key)[0] is None:
        return None
    manifest: dict[str, Any] = json.loads((folder / "manifest.json").read_text())
    return manifest


def invalidate(spec: KernelSpec, reason: str) -> None:
    """Warns and removes spec's published folder (e.g. the driver refused to load it)."""
    root = cache_root()
    key = key_for(spec)
    folder = kernel_folder(spec, key, root)
    on_write_error = _unwritable(spec, root, reason)
    with _key_lock(root, key, on_write_error):
        if folder.exists():
            try:
                _discard(folder, root, reason)
            except OSError as exc:
                raise on_write_error(exc) from exc
