"""A cache prebuilt where nvcc is installed serves an image without it: lookups never look for
or run a compiler, the key survives another install path and another nvcc, and a miss that
cannot be built (no nvcc, read-only cache) is one line naming the kernel and the prebuild."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from child_env import no_nvcc_env
from read_only import refuse_writes_under

from moegemm.jit import KernelSpec, build_or_load, cache, compiler, key_for, lookup
from moegemm.jit.cache import KernelNotCachedError

pytestmark = pytest.mark.nvcc

# Loads every spec of argv[1] through the cache and through runtime.load_kernel (with a stand-in
# for the CUDA extension, whose module load needs a driver), then misses one kernel on purpose.
NO_NVCC_CHILD = textwrap.dedent(
    """
    import hashlib, json, sys, types
    import moegemm
    from moegemm.jit import KernelSpec, cache, compiler, runtime

    try:
        compiler.find_nvcc()
    except FileNotFoundError:
        pass
    else:
        raise SystemExit("nvcc is still reachable")
    fake = types.SimpleNamespace(Kernel=lambda data: ("kernel", data))
    sys.modules["moegemm._C"] = fake
    moegemm._C = fake
    report = {}
    for obj in json.load(open(sys.argv[1])):
        spec = KernelSpec.from_json(obj)
        entry = cache.build(spec)
        assert entry.outcome == "cached", entry.outcome
        assert cache.lookup(spec) == entry.path
        assert runtime.load_kernel(spec) == ("kernel", entry.data)
        report[spec.name] = hashlib.sha256(entry.data).hexdigest()
    missing = KernelSpec("never_built", obj["source"] + "// not prebuilt\\n")
    try:
        cache.build(missing)
    except cache.KernelNotCachedError as exc:
        report["miss"] = str(exc)
    print(json.dumps(report))
    """
)


def _specs(tiny_source: Callable[..., str]) -> list[KernelSpec]:
    return [KernelSpec(f"pre{i}", tiny_source(i)) for i in range(3)]


def test_prebuilt_cache_loads_without_nvcc(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    subprocess_env: dict[str, str],
    tmp_path: Path,
) -> None:
    specs = _specs(tiny_source)
    built = {s.name: hashlib.sha256(build_or_load(s).read_bytes()).hexdigest() for s in specs}
    specs_json = tmp_path / "specs.json"
    specs_json.write_text(json.dumps([s.to_json() for s in specs]))
    env = no_nvcc_env(subprocess_env, tmp_path, no_subprocess=True)
    proc = subprocess.run(
        [sys.executable, "-c", NO_NVCC_CHILD, str(specs_json)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    miss = report.pop("miss")
    assert report == built
    assert "\n" not in miss and "never_built" in miss and "nvcc not found" in miss
    assert "python -m moegemm.jit --warmup" in miss and str(jit_cache_dir) in miss
    assert not any(p.name.startswith("never_built") for p in (jit_cache_dir / "kernels").iterdir())


def test_manifest_records_the_compiler(
    jit_cache_dir: Path, tiny_include: Path, tiny_source: Callable[..., str], real_nvcc: str
) -> None:
    spec = KernelSpec("tiny", tiny_source())
    build_or_load(spec)
    manifest = cache.read_manifest(spec)
    assert manifest is not None
    assert manifest["compiler"]["nvcc"] == str(compiler.find_nvcc())
    assert manifest["compiler"]["version"].startswith("Cuda compilation tools, release ")
    assert cache.read_manifest(KernelSpec("tiny", tiny_source(2))) is None


def test_another_nvcc_uses_the_cached_kernel(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    real_nvcc: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The documented choice: the compiler is not part of the key, so a cached kernel is used
    whichever nvcc (if any) the machine has; only a miss runs the nvcc found now."""
    spec = KernelSpec("tiny", tiny_source())
    path = build_or_load(spec)
    key = key_for(spec)
    calls = tmp_path / "calls.txt"
    other = tmp_path / "other-nvcc.sh"
    other.write_text(f'#!/bin/sh\necho "$@" >> "{calls}"\nexec "{real_nvcc}" "$@"\n')
    other.chmod(0o755)
    monkeypatch.setenv("MOEGEMM_NVCC", str(other))
    assert key_for(spec) == key
    entry = cache.build(spec)
    assert entry.outcome == "cached" and entry.path == path
    assert not calls.exists()
    fresh = cache.build(KernelSpec("tiny", tiny_source(3)))
    assert fresh.outcome == "compiled" and "-cubin" in calls.read_text()


def test_key_survives_another_install_path(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = KernelSpec("tiny", tiny_source())
    key = key_for(spec)
    moved = tmp_path / "elsewhere" / "include"
    shutil.copytree(tiny_include, moved)
    monkeypatch.setenv("MOEGEMM_INCLUDE_DIR", str(moved))
    assert key_for(spec) == key  # same headers, another path: same kernel
    leaf = moved / "moegemm/tiny/leaf.h"
    leaf.write_text(leaf.read_text() + "// edited\n")
    assert key_for(spec) != key  # other contents: another kernel


def test_miss_without_nvcc_raises_one_line(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_nvcc(override: str | None, cuda_home: str | None) -> Path:
        raise FileNotFoundError("nvcc not found: set MOEGEMM_NVCC or CUDA_HOME")

    monkeypatch.setattr(compiler, "_find_nvcc", no_nvcc)
    spec = KernelSpec("absent", tiny_source())
    with pytest.raises(KernelNotCachedError) as info:
        build_or_load(spec)
    message = str(info.value)
    assert "\n" not in message and "absent (sm_90a)" in message and "nvcc not found" in message
    assert "python -m moegemm.jit --warmup" in message
    assert lookup(spec) is None and not (jit_cache_dir / "kernels").exists()


def test_read_only_cache_hits_and_reports_a_miss(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A read-only mount (EROFS; chmod does not stop root, so the refusal is simulated for every
    path under the cache): hits are served, a miss is one line, nothing is compiled."""
    present = KernelSpec("present", tiny_source())
    build_or_load(present)

    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("compiled on a read-only cache")

    refuse_writes_under(monkeypatch, jit_cache_dir)
    monkeypatch.setattr(compiler, "compile_cubin", no_compile)
    assert cache.build(present).outcome == "cached"
    with pytest.raises(KernelNotCachedError) as info:
        cache.build(KernelSpec("missing", tiny_source(4)))
    message = str(info.value)
    assert "\n" not in message and "missing (sm_90a)" in message
    assert "not writable (Read-only file system)" in message
    assert "python -m moegemm.jit --warmup" in message
