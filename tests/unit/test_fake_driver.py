"""Runs tests/helpers/fake_driver/cases.py, the CPU tests of _C's launchers, against a fake libcuda.so.1
built from tests/helpers/fake_driver/libcuda_fake.cpp: _C dlopens the driver by name, so a subprocess
whose LD_LIBRARY_PATH puts the fake first launches into it. Needs a C++ compiler and cuda.h."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_DIR = REPO / "tests" / "helpers" / "fake_driver"


def _cuda_include() -> Path | None:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda.h").exists():
            return Path(root) / "include"
    return None


@pytest.fixture(scope="module")
def fake_driver_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    include = _cuda_include()
    if cxx is None or include is None:
        pytest.skip("needs a C++ compiler and cuda.h")
    out = tmp_path_factory.mktemp("fake_driver")
    cmd = [
        cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
        "-Wl,-soname,libcuda.so.1", f"-I{REPO / 'include'}", "-isystem", str(include),
        "-o", str(out / "libcuda.so.1"), str(FAKE_DIR / "libcuda_fake.cpp"),
    ]  # fmt: skip
    built = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stderr
    return out


@pytest.mark.parametrize("order", ["file", "reversed"])
def test_launchers_against_the_fake_driver(fake_driver_dir: Path, order: str) -> None:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        p for p in (str(fake_driver_dir), env.get("LD_LIBRARY_PATH")) if p
    )
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(FAKE_DIR), env.get("PYTHONPATH")) if p)
    env["MOEGEMM_FAKE_DRIVER_ORDER"] = order
    # The parent run's options (-x, --lf, a plugin's random order) are not the cases' to take.
    env.pop("PYTEST_ADDOPTS", None)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"]
    cmd += ["-p", "no:randomly", "-p", "case_order", str(FAKE_DIR / "cases.py")]
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, check=False)
    output = run.stdout + run.stderr
    assert run.returncode == 0, output
    assert " passed" in output and "skipped" not in output, output
