"""On an SM90 GPU the warmup ends by checking the grouped kernels it built against FP32 and
timing them against torch (moegemm.warmup.run_check), and the check compiles nothing more."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.nvcc]


def test_warmup_checks_the_grouped_kernels(
    jit_cache_dir: Path, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps([{"n": 512, "k": 256, "num_groups": 4, "top_k": 2}]))
    proc = subprocess.run(
        [sys.executable, "-m", "moegemm.jit", "--warmup", "--shapes", str(shapes)]
        + ["--tokens", "1,64"],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SMs of this GPU" in proc.stdout  # --num-sms defaults to the GPU's
    assert "check: the warmed grouped kernels against FP32" in proc.stdout
    compiled = int(re.search(r"compiled (\d+)", proc.stdout).group(1))  # type: ignore[union-attr]
    # The check ran at the warmed token counts: every kernel it used was already built.
    assert len(list((jit_cache_dir / "kernels").iterdir())) == compiled
