"""Shared fixtures of every test folder (tests/, benchmarks/tests/, tools/tests/): an isolated
JIT cache, a tiny header tree, nvcc/GPU skips."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent
PYTHON_DIR = REPO / "python"
if str(PYTHON_DIR) not in sys.path:  # run from a plain checkout without `pip install -e`
    sys.path.insert(0, str(PYTHON_DIR))
# The test folders by kind (unit, compile-only, GPU) and their shared helpers: tests import
# helpers and, across kinds, each other's cases (a GPU test reuses a compile test's SASS reader).
TEST_DIRS = tuple(REPO / "tests" / kind for kind in ("helpers", "unit", "compile", "gpu"))
for _dir in TEST_DIRS:
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))


# A GPU test that hangs (a producer and its consumers disagreeing on a tile count spin on a
# barrier forever) dumps every thread's stack and ends the run instead of blocking it. Longer
# than the sanitizer tests' own 900 s subprocess timeout, which fails just that test.
GPU_TEST_TIMEOUT_S = float(os.environ.get("MOEGEMM_GPU_TEST_TIMEOUT", "1200"))
# The real stderr, saved before pytest captures it: a dump written to the captured stream
# would be lost when the process exits.
_hang_dump_fd: int | None = None


def _has_nvcc() -> bool:
    from moegemm.jit.compiler import find_nvcc

    try:
        find_nvcc()
    except FileNotFoundError:
        return False
    return True


def pytest_configure(config: pytest.Config) -> None:
    global _hang_dump_fd
    if _hang_dump_fd is None:
        _hang_dump_fd = os.dup(sys.stderr.fileno())
    config.addinivalue_line(
        "markers", "gpu: needs an NVIDIA GPU (SM90, but for the files of ARCH_NEUTRAL_GPU_FILES)"
    )
    config.addinivalue_line("markers", "nvcc: needs nvcc (no GPU)")


# GPU test files that hold no SM90 config or weight layout (public functions only; the SM100
# file gates itself on CC 10.x): they run on any GPU moegemm supports. Every other GPU test is
# Hopper's and skips elsewhere (tools/gpu_run.sh's sm100 stage runs these on Blackwell).
ARCH_NEUTRAL_GPU_FILES = frozenset(
    {"test_sm100_gpu.py", "test_bf16_gemm_gpu.py", "test_quant_gpu.py", "test_torch_compile_gpu.py"}
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items:
        import torch  # only paid when GPU tests were collected

        if not torch.cuda.is_available():
            skip = pytest.mark.skip(reason="no CUDA GPU available")
            for item in gpu_items:
                item.add_marker(skip)
        elif torch.cuda.get_device_capability() != (9, 0):
            name = torch.cuda.get_device_name()
            skip = pytest.mark.skip(reason=f"an SM90 test, and this GPU is {name}")
            for item in gpu_items:
                if item.path.name not in ARCH_NEUTRAL_GPU_FILES:
                    item.add_marker(skip)
    nvcc_items = [item for item in items if "nvcc" in item.keywords]
    if nvcc_items and not _has_nvcc():
        skip = pytest.mark.skip(reason="nvcc not found")
        for item in nvcc_items:
            item.add_marker(skip)


@contextlib.contextmanager
def hang_guard(timeout_s: float, dump_fd: int) -> Iterator[None]:
    """Past `timeout_s` inside the block, dump every thread's stack to `dump_fd` and exit the
    process with status 1 (tests/unit/test_hang_guard.py runs it in a subprocess)."""
    import faulthandler

    faulthandler.dump_traceback_later(timeout_s, exit=True, file=dump_fd)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _gpu_hang_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    if "gpu" not in request.keywords or _hang_dump_fd is None:
        yield
        return
    with hang_guard(GPU_TEST_TIMEOUT_S, _hang_dump_fd):
        yield


@pytest.fixture
def jit_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh `MOEGEMM_CACHE_DIR` for this test."""
    root = tmp_path / "cache"
    monkeypatch.setenv("MOEGEMM_CACHE_DIR", str(root))
    return root


TINY_HEADERS = {
    "moegemm/tiny/top.h": "#pragma once\n#include <moegemm/tiny/mid.h>\n"
    "inline __device__ int top_value() { return mid_value() + 1; }\n",
    "moegemm/tiny/mid.h": '#pragma once\n#include "leaf.h"\n'
    "inline __device__ int mid_value() { return leaf_value() + 1; }\n",
    "moegemm/tiny/leaf.h": "#pragma once\ninline __device__ int leaf_value() { return 1; }\n",
    "moegemm/tiny/unrelated.h": "#pragma once\ninline __device__ int unrelated() { return 7; }\n",
}


def make_tiny_source(value: int = 1, kernels: int = 1) -> str:
    """A trivial source using the tiny header tree (`value` varies the key)."""
    body = "".join(
        f"__global__ void k{i}(int* p) {{ p[{i}] = top_value() + {value}; }}\n"
        for i in range(kernels)
    )
    return "#include <moegemm/tiny/top.h>\n" + body


@pytest.fixture
def tiny_source() -> Callable[..., str]:
    """`tiny_source(value=1, kernels=1)`: see make_tiny_source."""
    return make_tiny_source


@pytest.fixture
def tiny_include(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A tmp include dir holding TINY_HEADERS, installed as `MOEGEMM_INCLUDE_DIR`."""
    root = tmp_path / "include"
    for rel, text in TINY_HEADERS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    monkeypatch.setenv("MOEGEMM_INCLUDE_DIR", str(root))
    return root


@pytest.fixture
def subprocess_env() -> Iterator[dict[str, str]]:
    """os.environ (as the test set it up) plus an import path for moegemm and the test folders."""
    env = dict(os.environ)
    extra = [str(PYTHON_DIR), *(str(d) for d in TEST_DIRS)]
    env["PYTHONPATH"] = os.pathsep.join(
        extra + ([env["PYTHONPATH"]] if "PYTHONPATH" in env else [])
    )
    yield env


@pytest.fixture(scope="session")
def real_nvcc() -> str:
    from moegemm.jit.compiler import find_nvcc

    try:
        return str(find_nvcc())
    except FileNotFoundError:
        pytest.skip("nvcc not found")
    raise AssertionError  # unreachable; pytest.skip raises
