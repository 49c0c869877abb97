"""What the JIT cache says where it cannot help (CPU, no compiler run): a miss in a read-only
cache names the kernel, a damaged entry is called corrupt with the reason, a refused write under
tmp/ is the same one-line error, and the notice of a removed entry prints as one plain line."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
from read_only import refuse_writes_under

from moegemm.jit import KernelSpec, cache, compiler
from moegemm.jit.cache import CacheEntryRemovedWarning, KernelNotCachedError

SOURCE = "__global__ void k(int* p) { p[0] = 1; }\n"


def _corrupt_entry(spec: KernelSpec) -> Path:
    """A published folder for spec whose cubin is shorter than its manifest says (truncated)."""
    key = cache.key_for(spec)
    folder = cache.kernel_folder(spec, key)
    folder.mkdir(parents=True)
    (folder / "kernel.cu").write_text(spec.source)
    whole = b"\x7fELF" + bytes(60)
    (folder / "kernel.cubin").write_bytes(whole[:20])
    manifest = {
        "key": key,
        "cubin_size": len(whole),
        "cubin_sha256": hashlib.sha256(whole).hexdigest(),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.fixture
def no_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compiler that is found but must never run: the failures come before it."""
    monkeypatch.setattr(compiler, "find_nvcc", lambda: Path("/usr/bin/true"))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled")

    monkeypatch.setattr(compiler, "compile_cubin", refuse)


@pytest.fixture
def cache_root(jit_cache_dir: Path) -> Iterator[Path]:
    (jit_cache_dir / "kernels").mkdir(parents=True)
    yield jit_cache_dir


def test_read_only_miss_names_the_kernel(
    cache_root: Path, no_compile: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    refuse_writes_under(monkeypatch, cache_root)
    with pytest.raises(KernelNotCachedError) as info:
        cache.build(KernelSpec("gemm_missing_one", SOURCE))
    message = str(info.value)
    assert "\n" not in message
    assert "kernel gemm_missing_one (sm_90a) is not in the moegemm cache" in message
    assert "not writable (Read-only file system)" in message and "corrupt" not in message


def test_read_only_truncated_entry_is_called_corrupt(
    cache_root: Path, no_compile: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = KernelSpec("gemm_truncated", SOURCE)
    folder = _corrupt_entry(spec)
    refuse_writes_under(monkeypatch, cache_root)
    with pytest.raises(KernelNotCachedError) as info:
        cache.build(spec)
    message = str(info.value)
    assert "\n" not in message and "kernel gemm_truncated (sm_90a) has a corrupt entry" in message
    assert "truncated or modified" in message and "not writable" in message
    assert folder.is_dir()  # nothing removed


def test_corrupt_entry_without_nvcc_is_called_corrupt(
    cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_nvcc() -> Path:
        raise FileNotFoundError("nvcc not found: set MOEGEMM_NVCC or CUDA_HOME")

    monkeypatch.setattr(compiler, "find_nvcc", no_nvcc)
    spec = KernelSpec("gemm_truncated", SOURCE)
    _corrupt_entry(spec)
    with pytest.raises(KernelNotCachedError) as info:
        cache.build(spec)
    message = str(info.value)
    assert "gemm_truncated (sm_90a) has a corrupt entry" in message and "mismatch" in message
    assert message.endswith("pointing at this cache") and "nvcc not found" in message


def test_refused_write_past_the_lock_names_the_kernel(
    cache_root: Path, no_compile: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock can be taken but tmp/ cannot be written (another owner's folder): the same
    one-line error as a refused lock, not an OSError naming a folder."""
    refuse_writes_under(monkeypatch, cache_root / "tmp")
    with pytest.raises(KernelNotCachedError, match="kernel gemm_tmp_refused .*not writable"):
        cache.build(KernelSpec("gemm_tmp_refused", SOURCE))


def test_removal_notice_is_its_own_category_and_one_line(cache_root: Path) -> None:
    spec = KernelSpec("gemm_bad", SOURCE)
    folder = _corrupt_entry(spec)
    with pytest.warns(CacheEntryRemovedWarning, match="gemm_bad.*refused") as record:
        cache.invalidate(spec, "refused")
    assert not folder.exists() and issubclass(CacheEntryRemovedWarning, UserWarning)
    w = record[0]
    text = warnings.formatwarning(w.message, w.category, w.filename, w.lineno)  # type: ignore[arg-type]
    assert text == f"moegemm JIT cache: removing bad kernel folder {folder} (refused); rebuilding\n"
    # Other categories keep the standard format.
    other = warnings.formatwarning("x", UserWarning, "f.py", 3)
    assert other.startswith("f.py:3: UserWarning: x")


CHILD = textwrap.dedent(
    """
    import sys
    from moegemm.jit import KernelSpec, cache
    spec = KernelSpec("gemm_bad", sys.argv[1])
    for reason in ("refused", "refused"):
        cache.kernel_folder(spec).mkdir(parents=True, exist_ok=True)
        cache.invalidate(spec, reason)
    """
)


def test_removal_notice_prints_one_plain_line_once(
    cache_root: Path, subprocess_env: dict[str, str]
) -> None:
    env = {k: v for k, v in subprocess_env.items() if k != "PYTHONWARNINGS"}
    run = subprocess.run(
        [sys.executable, "-c", CHILD, SOURCE],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    folder = cache.kernel_folder(KernelSpec("gemm_bad", SOURCE))
    assert run.stderr == (
        f"moegemm JIT cache: removing bad kernel folder {folder} (refused); rebuilding\n"
    )
