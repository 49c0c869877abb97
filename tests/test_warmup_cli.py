"""`python -m moegemm.jit --warmup`: presets, ninja-driven prebuilds, dry runs, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from moegemm.jit import KernelSpec, presets

HOOK = "test_warmup_cli:fake_warmup_specs"


def fake_warmup_specs(
    shapes: list[dict[str, Any]], tokens: list[int], arch: str, num_sms: int
) -> list[KernelSpec]:
    """Stands in for moegemm.api.warmup_specs: 2 distinct tiny kernels (plus a duplicate, which
    the CLI must drop) whatever the shapes; needs the `tiny_include` headers."""
    assert shapes and tokens and num_sms > 0
    specs = [
        KernelSpec(
            f"warm{i}",
            f"#include <moegemm/tiny/top.h>\n"
            f"__global__ void k(int* p) {{ p[0] = top_value() + {i}; }}\n",
            arch=arch,
        )
        for i in range(2)
    ]
    return specs + specs[:1]


@pytest.fixture
def cli_env(
    jit_cache_dir: Path, tiny_include: Path, subprocess_env: dict[str, str]
) -> dict[str, str]:
    subprocess_env["MOEGEMM_WARMUP_SPECS_FN"] = HOOK
    return subprocess_env


@pytest.fixture
def shapes_file(tmp_path: Path) -> Path:
    path = tmp_path / "shapes.json"
    path.write_text(
        json.dumps(
            [
                {"n": 4096, "k": 7168, "op": "linear1", "num_groups": 32},
                {"n": 7168, "k": 2048, "tokens": [1, 2]},
            ]
        )
    )
    return path


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moegemm.jit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def summary(proc: subprocess.CompletedProcess[str]) -> str:
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.nvcc
def test_second_warmup_compiles_nothing(
    cli_env: dict[str, str], shapes_file: Path, jit_cache_dir: Path
) -> None:
    args = ("--warmup", "--shapes", str(shapes_file), "--jobs", "2", "--tokens", "1,16")
    first = run_cli(cli_env, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert summary(first).startswith("warmup: 2 kernels, compiled 2, already cached 0, failed 0")
    assert "[2/2]" in first.stdout  # ninja's progress display
    assert len(list((jit_cache_dir / "kernels").iterdir())) == 2
    second = run_cli(cli_env, *args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert summary(second).startswith("warmup: 2 kernels, compiled 0, already cached 2, failed 0")
    assert list((jit_cache_dir / "tmp").iterdir()) == []


def test_dry_run_compiles_nothing(
    cli_env: dict[str, str], shapes_file: Path, jit_cache_dir: Path
) -> None:
    proc = run_cli(cli_env, "--warmup", "--model", "deepseek-v3", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "would compile warm0" in proc.stdout and "would compile warm1" in proc.stdout
    assert "2 kernels, would compile 2, already cached 0" in summary(proc)
    assert not (jit_cache_dir / "kernels").exists()


@pytest.mark.nvcc
def test_cache_dir_option(
    cli_env: dict[str, str], shapes_file: Path, tmp_path: Path, jit_cache_dir: Path
) -> None:
    other = tmp_path / "other-cache"
    proc = run_cli(cli_env, "--warmup", "--shapes", str(shapes_file), "--cache-dir", str(other))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(list((other / "kernels").iterdir())) == 2
    assert not jit_cache_dir.exists()


@pytest.mark.nvcc
def test_failed_kernel_makes_exit_nonzero(
    cli_env: dict[str, str], shapes_file: Path, tiny_include: Path
) -> None:
    (tiny_include / "moegemm/tiny/leaf.h").write_text("#pragma once\nthis does not compile\n")
    proc = run_cli(cli_env, "--warmup", "--shapes", str(shapes_file), "--jobs", "2")
    assert proc.returncode == 1
    assert "compiled 0, already cached 0, failed 2" in summary(proc)


def test_unknown_model_lists_models(cli_env: dict[str, str]) -> None:
    proc = run_cli(cli_env, "--warmup", "--model", "no-such-model")
    assert proc.returncode == 2
    assert "unknown model 'no-such-model'" in proc.stderr
    assert "deepseek_v3" in proc.stderr and "qwen3_30b_a3b" in proc.stderr


def test_bad_shapes_file(cli_env: dict[str, str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"n": 1}]))
    proc = run_cli(cli_env, "--warmup", "--shapes", str(bad))
    assert proc.returncode == 2 and "'n' and 'k'" in proc.stderr


def test_presets_names_and_shapes() -> None:
    assert presets.resolve_model("deepseek-v3") == "deepseek_v3"
    assert presets.resolve_model("DeepSeek-R1") == "deepseek_v3"  # an alias
    shapes = presets.model_shapes("deepseek_v3")
    assert [(s["op"], s["n"], s["k"], s["num_groups"]) for s in shapes] == [
        ("linear1", 4096, 7168, 256),
        ("linear2", 7168, 2048, 256),
        ("shared_linear1", 4096, 7168, 1),
        ("shared_linear2", 7168, 2048, 1),
    ]
    assert [s["op"] for s in presets.model_shapes("qwen3-30b-a3b")] == ["linear1", "linear2"]
    with pytest.raises(ValueError, match="available models: .*mixtral_8x7b"):
        presets.resolve_model("gpt-5")
    decode = presets.suite_shapes("decode", model="deepseek-v3")
    assert {s["op"] for s in decode} == {"linear1", "linear2"}
    assert all(s["tokens"] for s in decode)


def test_hook_must_name_a_function(cli_env: dict[str, str], shapes_file: Path) -> None:
    env = dict(cli_env, MOEGEMM_WARMUP_SPECS_FN="no_colon_here")
    proc = run_cli(env, "--warmup", "--shapes", str(shapes_file), "--dry-run")
    assert proc.returncode == 2 and "module:function" in proc.stderr


@pytest.mark.nvcc
def test_real_preset_warmup_twice(
    jit_cache_dir: Path, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """The real enumeration (moegemm.api.warmup_specs) on a one-shape slice of a model preset:
    real kernels are built, and a second run finds them all cached."""
    shape = presets.model_shapes("qwen3-30b-a3b")[1]  # linear2: n=2048, k=768
    path = tmp_path / "one_shape.json"
    path.write_text(json.dumps([shape]))
    args = ("--warmup", "--shapes", str(path), "--tokens", "1,4096", "--no-check")
    first = run_cli(subprocess_env, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    compiled = int(summary(first).split("compiled ")[1].split(",")[0])
    assert compiled >= 1 and "failed 0" in summary(first)
    names = sorted(p.name for p in (jit_cache_dir / "kernels").iterdir())
    assert len(names) == compiled and all(n.startswith("sm90_bf16_") for n in names)
    second = run_cli(subprocess_env, *args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"compiled 0, already cached {compiled}, failed 0" in summary(second)
