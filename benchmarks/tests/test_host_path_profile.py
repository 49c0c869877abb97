"""benchmarks/host_path_profile.py --cpu-stub: every public function timed, JSON written."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_cpu_stub_profile_times_every_public_function(tmp_path: Path, subprocess_env) -> None:
    out = tmp_path / "host.json"
    script = REPO / "benchmarks" / "host_path_profile.py"
    subprocess.run(
        [sys.executable, str(script), "--cpu-stub", "--rounds", "2", "--json", str(out)],
        env=subprocess_env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    result = json.loads(out.read_text())
    assert result["mode"] == "cpu-stub"
    assert result["plans"] == 5  # each function stored its plan: the timed calls were hits
    assert result["builds"] == 5  # and no timed call fell back to the full checks
    names = [row["function"] for row in result["rows"]]
    assert names == ["dense", "offs", "m_indices", "masked", "k_grouped"]
    assert all(row["us_per_call"] > 0 for row in result["rows"])


def test_fake_driver_mode_times_the_bound_launches(tmp_path: Path, subprocess_env) -> None:
    cuda_h = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda") / "include" / "cuda.h"
    if not (os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")) or not (
        cuda_h.exists()
    ):
        pytest.skip("needs a C++ compiler and cuda.h")
    out = tmp_path / "host.json"
    script = REPO / "benchmarks" / "host_path_profile.py"
    cmd = [sys.executable, str(script), "--cpu-stub", "--fake-driver", "--rounds", "2"]
    subprocess.run(
        [*cmd, "--json", str(out)], env=subprocess_env, check=True, capture_output=True, timeout=300
    )
    result = json.loads(out.read_text())
    assert result["mode"] == "cpu-stub+fake-driver" and result["plans"] == result["builds"] == 5
    # Five functions, a miss and 2 x 1000 hits each, plus the bound launch timed alone: every
    # call reached the fake driver's cuLaunchKernelEx.
    assert result["fake_launches"] >= 6 * 2 * 1000
    assert all(row["us_per_call"] > result["stub_launch_us"] > 0 for row in result["rows"])
