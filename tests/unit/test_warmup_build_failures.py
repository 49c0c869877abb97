"""A compiler that fails every kernel alike is reported once: the first failed kernel's command
and error in full, then one line for each other failed kernel naming it; the exit status still
counts every failure."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from moegemm.jit import KernelSpec
from moegemm.warmup.ninja_build import FailureFilter, run_ninja

ERROR = "nvcc fatal   : Unsupported gpu architecture 'compute_90a'"


def _failed_edge(i: int, name: str, error: str = ERROR) -> list[str]:
    """What ninja prints for a failed `_build_one` edge, as it does."""
    return [
        f"[{i + 1}/3] build {name}\n",
        f"FAILED: [code=1] stamps/{i}.ok \n",
        f"/usr/bin/python3 -m moegemm.jit._build_one specs/{i}.json stamps/{i}.ok\n",
        f"moegemm: failed to compile {name}:\n",
        "nvcc failed with exit code 1 after 0.0 s\n",
        "command: /opt/cuda/bin/nvcc -cubin kernel.cu -o kernel.cubin\n",
        "cwd: /cache/tmp/abc\n",
        f"{error}\n",
        "\n",
    ]


def test_first_failure_in_full_then_one_line_each() -> None:
    out = io.StringIO()
    shown = FailureFilter(["k0", "k1", "k2"], out)
    lines = _failed_edge(1, "k1") + _failed_edge(0, "k0") + _failed_edge(2, "k2", "other error")
    for line in [*lines, "ninja: build stopped: subcommand failed.\n"]:
        shown.feed(line)
    shown.close()
    text = out.getvalue()
    assert shown.failures == 3
    assert text.count("command: /opt/cuda/bin/nvcc") == 1 and text.count(ERROR) == 2
    assert "FAILED: k1\n" in text  # the first, named, then its output as it came
    assert f"FAILED: k0: {ERROR} (as above)\n" in text
    assert "FAILED: k2: other error\n" in text
    assert text.endswith("ninja: build stopped: subcommand failed.\n")
    assert len(text.splitlines()) == 9 + 2 * 2 + 1


def test_a_later_failure_without_output_is_still_named() -> None:
    out = io.StringIO()
    shown = FailureFilter(["k0", "k1"], out)
    for line in [*_failed_edge(0, "k0"), "[2/2] build k1\n", "FAILED: stamps/1.ok\n"]:
        shown.feed(line)
    shown.close()
    assert out.getvalue().endswith("FAILED: k1: no output\n")


@pytest.mark.nvcc
def test_a_failing_compiler_is_reported_once(
    jit_cache_dir: Path,
    tmp_path: Path,
    real_nvcc: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = tmp_path / "broken-nvcc.sh"
    broken.write_text(
        f'#!/bin/sh\ncase " $* " in *" -cubin "*) echo "{ERROR}"; exit 1;; esac\n'
        f'exec "{real_nvcc}" "$@"\n'
    )
    broken.chmod(0o755)
    monkeypatch.setenv("MOEGEMM_NVCC", str(broken))
    src = "__global__ void k(int* p) {{ p[0] = {}; }}\n"
    specs = [KernelSpec(f"warm{i}", src.format(i)) for i in range(6)]
    report = run_ninja(specs, 2)
    out = capsys.readouterr().out
    assert report.failed == 6 and report.compiled == 0
    assert out.count("command: ") == 1 and out.count(f"{ERROR} (as above)") == 5
    for spec in specs:
        assert sum(line.startswith(f"FAILED: {spec.name}") for line in out.splitlines()) == 1
    assert sys.executable not in out.replace(f"{sys.executable} -m moegemm.jit._build_one", "", 1)
