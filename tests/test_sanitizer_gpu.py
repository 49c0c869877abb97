"""compute-sanitizer memcheck and racecheck over one small case of each layout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sanitize_small.py"


def sanitizer() -> str:
    found = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.access(found, os.X_OK):
        pytest.skip("compute-sanitizer not found")
    return found


@pytest.fixture(scope="module")
def warm_cache() -> None:
    """Compile outside the sanitizer, so it watches the kernels, not nvcc."""
    subprocess.run([sys.executable, str(SCRIPT)], check=True, timeout=600)


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_sanitizer_clean(tool: str, warm_cache: None) -> None:
    proc = subprocess.run(
        [sanitizer(), "--tool", tool, "--error-exitcode", "3", sys.executable, str(SCRIPT)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    if "Device not supported" in out or "device is not supported" in out.lower():
        pytest.skip(f"compute-sanitizer cannot attach to this GPU runtime: {out[-300:]}")
    assert proc.returncode == 0, out[-4000:]
    assert "ERROR SUMMARY: 0 errors" in out or "RACECHECK SUMMARY: 0 hazards" in out, out[-2000:]
