"""The JIT cache: keys, atomic publication, cross-process locking, validation, rebuilds."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Callable
from pathlib import Path

import pytest

from moegemm.jit import CompileError, KernelSpec, build_or_load, cache, key_for, lookup, runtime
from moegemm.jit.compiler import check_ptxas_report
from moegemm.jit.cubin import count_cubin_kernels, cubin_kernel_names

pytestmark = pytest.mark.nvcc

TWO_KERNELS_AND_A_CALL = """
__device__ __noinline__ int helper(int x) { return x * 3 + 1; }
__global__ void first(int* p) { p[0] = helper(p[1]); }
__global__ void second(int* p) { p[0] = 2; }
"""
ONE_KERNEL_AND_A_CALL = """
__device__ __noinline__ int helper(int x) { return x * 3 + 1; }
__global__ void only(int* p) { p[0] = helper(p[1]); }
"""


def _nvcc_cubin(nvcc: str, tmp_path: Path, source: str, name: str) -> bytes:
    src = tmp_path / f"{name}.cu"
    src.write_text(source)
    out = tmp_path / f"{name}.cubin"
    subprocess.run(
        [nvcc, "-cubin", "-O3", "-gencode=arch=compute_90a,code=sm_90a", str(src), "-o", str(out)],
        check=True,
        cwd=tmp_path,
    )
    return out.read_bytes()


def _write_wrapper(tmp_path: Path, real_nvcc: str, body: str) -> Path:
    """An nvcc that runs `body` before each compile (not before `nvcc --version`, which the
    cache asks once per process for the manifest)."""
    wrapper = tmp_path / "nvcc-wrapper.sh"
    wrapper.write_text(
        f'#!/bin/sh\ncase " $* " in *" -cubin "*)\n{body}\n;; esac\nexec "{real_nvcc}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def _published(root: Path) -> list[Path]:
    kernels = root / "kernels"
    return sorted(kernels.iterdir()) if kernels.exists() else []


def _leftover_tmp(root: Path) -> list[Path]:
    tmp = root / "tmp"
    return sorted(tmp.iterdir()) if tmp.exists() else []


def test_cubin_kernel_count(real_nvcc: str, tmp_path: Path) -> None:
    two = _nvcc_cubin(real_nvcc, tmp_path, TWO_KERNELS_AND_A_CALL, "two")
    one = _nvcc_cubin(real_nvcc, tmp_path, ONE_KERNEL_AND_A_CALL, "one")
    assert sorted(cubin_kernel_names(two)) == ["_Z5firstPi", "_Z6secondPi"]
    assert count_cubin_kernels(one) == 1  # the non-inlined __device__ function is not counted
    for bad in (one[:100], one[: len(one) // 2], b"not an elf at all", b""):
        with pytest.raises(ValueError):
            count_cubin_kernels(bad)


def test_build_publishes_and_hits(
    jit_cache_dir: Path, tiny_include: Path, tiny_source: Callable[..., str]
) -> None:
    spec = KernelSpec("tiny", tiny_source())
    assert lookup(spec) is None
    path = build_or_load(spec)
    assert path == lookup(spec) == build_or_load(spec)
    folder = path.parent
    assert folder.name == f"tiny.{key_for(spec)[:32]}"
    assert sorted(p.name for p in folder.iterdir()) == [
        "kernel.cu",
        "kernel.cubin",
        "manifest.json",
    ]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["key"] == key_for(spec) and manifest["cubin_size"] == path.stat().st_size
    assert "-gencode=arch=compute_90a,code=sm_90a" in manifest["nvcc_command"]
    assert _leftover_tmp(jit_cache_dir) == []


def test_key_tracks_headers_and_cubin_flags_only(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spec = KernelSpec("tiny", tiny_source())
    key = key_for(spec)
    monkeypatch.setenv("MOEGEMM_JIT_DEBUG", "1")
    assert key_for(spec) == key  # diagnostics only
    monkeypatch.setenv("MOEGEMM_JIT_LINEINFO", "1")
    assert key_for(spec) != key  # changes the cubin
    monkeypatch.delenv("MOEGEMM_JIT_LINEINFO")
    assert key_for(KernelSpec("tiny", spec.source, arch="sm_100a")) != key
    assert key_for(KernelSpec("tiny", spec.source, extra_flags=("-DX=1",))) != key
    leaf = tiny_include / "moegemm/tiny/leaf.h"
    leaf.write_text(leaf.read_text() + "// edited two levels down\n")
    assert key_for(spec) != key


def test_concurrent_processes_compile_once(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    real_nvcc: str,
    tmp_path: Path,
    subprocess_env: dict[str, str],
) -> None:
    calls = tmp_path / "calls.txt"
    wrapper = _write_wrapper(tmp_path, real_nvcc, f'echo x >> "{calls}"\nsleep 1')
    subprocess_env["MOEGEMM_NVCC"] = str(wrapper)
    subprocess_env["MOEGEMM_LIGHT_IMPORT"] = "1"  # the JIT alone, not the API (torch)
    (tmp_path / "spec.json").write_text(json.dumps({"name": "race", "source": tiny_source(5)}))
    code = textwrap.dedent(f"""
        import json
        from moegemm.jit import KernelSpec, cache
        spec = KernelSpec(**json.load(open({str(tmp_path / "spec.json")!r})))
        entry = cache.build(spec)
        print(entry.path, entry.outcome)
    """)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code],
            env=subprocess_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    results = [p.communicate(timeout=120) + (p.returncode,) for p in procs]
    assert all(rc == 0 for _, _, rc in results), [err for _, err, _ in results]
    paths, outcomes = zip(*(out.split() for out, _, _ in results))
    assert len(set(paths)) == 1
    # One compiled it; the others found it published, mostly after waiting on its lock.
    assert sorted(set(outcomes) - {"built_elsewhere", "cached"}) == ["compiled"]
    assert outcomes.count("compiled") == 1
    assert len(_published(jit_cache_dir)) == 1
    assert _leftover_tmp(jit_cache_dir) == []
    assert calls.read_text().count("x") == 1


def test_truncated_cubin_is_rebuilt(
    jit_cache_dir: Path, tiny_include: Path, tiny_source: Callable[..., str]
) -> None:
    spec = KernelSpec("tiny", tiny_source())
    path = build_or_load(spec)
    good = path.read_bytes()
    path.write_bytes(good[: len(good) // 2])
    assert lookup(spec) is None
    with pytest.warns(UserWarning, match=f"{path.parent.name}.*mismatch"):
        assert build_or_load(spec) == path
    assert path.read_bytes() == good
    assert _leftover_tmp(jit_cache_dir) == []


def test_folder_missing_a_file_is_rebuilt(
    jit_cache_dir: Path, tiny_include: Path, tiny_source: Callable[..., str]
) -> None:
    spec = KernelSpec("tiny", tiny_source())
    folder = build_or_load(spec).parent
    (folder / "manifest.json").unlink()
    with pytest.warns(UserWarning, match="missing manifest.json"):
        build_or_load(spec)
    assert (folder / "manifest.json").is_file()


def test_cubin_with_two_kernels_is_rebuilt(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    real_nvcc: str,
    tmp_path: Path,
) -> None:
    import hashlib

    spec = KernelSpec("tiny", tiny_source())
    path = build_or_load(spec)
    two = _nvcc_cubin(real_nvcc, tmp_path, TWO_KERNELS_AND_A_CALL, "two")
    path.write_bytes(two)  # consistent manifest, wrong content
    manifest_path = path.parent / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest.update(cubin_size=len(two), cubin_sha256=hashlib.sha256(two).hexdigest())
    manifest_path.write_text(json.dumps(manifest))
    with pytest.warns(UserWarning, match="2 kernels, expected exactly 1"):
        build_or_load(spec)
    assert count_cubin_kernels(path.read_bytes()) == 1


def test_spec_with_two_kernels_is_refused(
    jit_cache_dir: Path, tiny_include: Path, tiny_source: Callable[..., str]
) -> None:
    with pytest.raises(CompileError, match="2 entry points"):
        build_or_load(KernelSpec("two", tiny_source(kernels=2)))
    assert _published(jit_cache_dir) == [] and _leftover_tmp(jit_cache_dir) == []


def test_compile_error_shows_command_and_message(jit_cache_dir: Path, tiny_include: Path) -> None:
    spec = KernelSpec(
        "broken", "#include <moegemm/tiny/top.h>\n__global__ void k(int* p) { p[0] = nope; }\n"
    )
    with pytest.raises(CompileError) as info:
        build_or_load(spec)
    message = str(info.value)
    assert "command:" in message and "nvcc" in message and "-cubin" in message
    assert 'identifier "nope" is undefined' in message
    assert isinstance(info.value, RuntimeError)
    assert _published(jit_cache_dir) == [] and _leftover_tmp(jit_cache_dir) == []


def test_killed_mid_compile_leaves_nothing_published(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    real_nvcc: str,
    tmp_path: Path,
    subprocess_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker, started = tmp_path / "sleep-marker", tmp_path / "started"
    marker.touch()
    wrapper = _write_wrapper(
        tmp_path, real_nvcc, f'if [ -e "{marker}" ]; then touch "{started}"; sleep 60; fi'
    )
    monkeypatch.setenv("MOEGEMM_NVCC", str(wrapper))
    subprocess_env["MOEGEMM_NVCC"] = str(wrapper)
    subprocess_env["MOEGEMM_LIGHT_IMPORT"] = "1"  # the JIT alone, not the API (torch)
    spec = KernelSpec("killed", tiny_source(9))
    code = (
        "from moegemm.jit import KernelSpec, build_or_load\n"
        f"build_or_load(KernelSpec('killed', {spec.source!r}))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], env=subprocess_env, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not started.exists():
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the build process and its nvcc wrapper
    proc.wait()
    assert _published(jit_cache_dir) == []
    stale = _leftover_tmp(jit_cache_dir)
    assert len(stale) == 1  # the killed build's folder, left for the stale-tmp sweep
    old = time.time() - 2 * cache.TMP_MAX_AGE_S
    os.utime(stale[0], (old, old))
    marker.unlink()
    path = build_or_load(spec)  # the dead process's lock is gone with it
    assert lookup(spec) == path
    assert _leftover_tmp(jit_cache_dir) == []


def test_ptxas_check_report() -> None:
    clean = "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    assert check_ptxas_report(clean) == []
    spilled = "    1024 bytes stack frame, 8 bytes spill stores, 0 bytes spill loads\n"
    assert check_ptxas_report(spilled)
    assert check_ptxas_report("ptxas warning : Local memory used for function 'k'\n")


def test_ptxas_check_fails_on_local_memory(
    jit_cache_dir: Path, tiny_include: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOEGEMM_JIT_PTXAS_CHECK", "1")
    source = (
        "__global__ void k(int* p, int i) { int a[256];\n"
        "  for (int j = 0; j < 256; j++) a[j] = p[j];\n  a[i] = 3; p[0] = a[p[1]]; }\n"
    )
    with pytest.raises(CompileError, match="stack frame"):
        build_or_load(KernelSpec("local", source))
    assert _published(jit_cache_dir) == []


def test_runtime_memoises_and_rebuilds_unloadable_cubin(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loads: list[bytes] = []

    class FakeKernel:
        def __init__(self, data: bytes) -> None:
            loads.append(data)
            if len(loads) == 1:
                raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")

    monkeypatch.setitem(sys.modules, "moegemm._C", types.SimpleNamespace(Kernel=FakeKernel))
    import moegemm

    monkeypatch.setattr(moegemm, "_C", sys.modules["moegemm._C"], raising=False)
    runtime.clear_loaded()
    spec = KernelSpec("tiny", tiny_source())
    with pytest.warns(UserWarning, match="failed to load"):
        kernel = runtime.load_kernel(spec)
    assert isinstance(kernel, FakeKernel) and len(loads) == 2
    assert runtime.load_kernel(spec) is kernel and len(loads) == 2
    assert lookup(spec) is not None
    runtime.clear_loaded()


def test_runtime_keeps_the_cache_on_a_failure_of_the_process(
    jit_cache_dir: Path,
    tiny_include: Path,
    tiny_source: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Out of memory (or a broken context) says nothing about the cubin: the error propagates
    and the cached kernel stays for the next process."""
    loads: list[bytes] = []

    class FailingKernel:
        def __init__(self, data: bytes) -> None:
            loads.append(data)
            raise RuntimeError("cuLibraryLoadData failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)")

    monkeypatch.setitem(sys.modules, "moegemm._C", types.SimpleNamespace(Kernel=FailingKernel))
    import moegemm

    monkeypatch.setattr(moegemm, "_C", sys.modules["moegemm._C"], raising=False)
    runtime.clear_loaded()
    spec = KernelSpec("tiny", tiny_source())
    with pytest.raises(RuntimeError, match="OUT_OF_MEMORY"):
        runtime.load_kernel(spec)
    assert len(loads) == 1 and lookup(spec) is not None
    runtime.clear_loaded()
