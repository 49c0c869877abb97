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


def test_warmup_checks_the_fp8_fp4_kernels(
    jit_cache_dir: Path, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """--weights mxfp4: only FP8 x FP4 kernels are built (a routed shape and a dense one, K not
    a multiple of 128), then checked in every layout and both weight forms against FP32 on the
    dequantized operands, compiling nothing more."""
    shapes = tmp_path / "shapes.json"
    routed = {"n": 512, "k": 288, "num_groups": 4, "top_k": 2, "op": "routed"}
    shapes.write_text(json.dumps([routed, {"n": 256, "k": 160, "op": "dense"}]))
    proc = subprocess.run(
        [sys.executable, "-m", "moegemm.jit", "--warmup", "--shapes", str(shapes)]
        + ["--tokens", "1,64", "--weights", "mxfp4"],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MXFP4 weights (FP8 x FP4 kernels" in proc.stdout
    assert "check: the warmed FP8 x FP4 kernels against FP32 on the dequantized" in proc.stdout
    assert re.search(r"^check: all passed", proc.stdout, re.MULTILINE), proc.stdout
    for layout, count in (("offs", 2), ("m_indices", 2), ("masked", 2), ("dense", 2)):
        for form in ("raw", "prep"):
            found = re.findall(rf"^{layout}/{form} ", proc.stdout, re.MULTILINE)
            assert len(found) == count, (layout, form, proc.stdout)
    compiled = int(re.search(r"compiled (\d+)", proc.stdout).group(1))  # type: ignore[union-attr]
    names = [p.name for p in (jit_cache_dir / "kernels").iterdir()]
    assert len(names) == compiled, names  # the check used only warmed kernels
    assert all(name.startswith("sm90_fp8fp4_") for name in names), names


def test_run_check_fp8_fp4_on_gpt_oss() -> None:
    """run_check with weights="mxfp4" on gpt-oss-20b's linear2 (32 experts, N = K = 2880, K not
    a multiple of 128) at a decode and a mid token count; empty groups occur at 5 tokens."""
    import io

    from moegemm.warmup import presets
    from moegemm.warmup.check import run_check

    out = io.StringIO()
    shapes = presets.model_shapes("gpt-oss-20b")[1:]
    ok = run_check(shapes, 4, token_counts=[5, 300], out=out, weights="mxfp4")
    text = out.getvalue()
    assert ok, text
    assert re.search(r"^check: [0-9.]+ x torch BF16 \(geomean\)", text, re.MULTILINE), text
    for layout in ("offs", "m_indices", "masked"):
        for form in ("raw", "prep"):
            assert text.count(f"\n{layout}/{form} ") == 2, (layout, form, text)
    assert "all passed" in text and "FAILED" not in text
