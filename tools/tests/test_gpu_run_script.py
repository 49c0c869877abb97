"""tools/gpu_run.sh on the CPU: it parses, refuses an unknown stage before doing anything, and
its sm100 stage (the first Blackwell machine's one command) names files and arguments that
exist here; tests/gpu/test_sm100_gpu.py collects and skips without a CC 10.x GPU."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "gpu_run.sh"
sys.path.insert(0, str(REPO / "benchmarks"))


def test_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_unknown_stage_is_refused_before_anything_runs(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    res = subprocess.run(
        ["bash", str(SCRIPT), str(logs), "tests,sm101"], check=False, capture_output=True, text=True
    )
    assert res.returncode == 2
    assert "unknown stage 'sm101'" in res.stdout and " sm100 " in res.stdout + " "
    assert not logs.exists(), "nothing may run (not even the log dir) for a bad stage list"


def test_sm100_stage_is_documented_and_known() -> None:
    text = SCRIPT.read_text()
    assert re.search(r"^known=\(.* sm100\)$", text, re.MULTILINE)
    assert re.search(r"^#   sm100 ", text, re.MULTILINE), "the header documents the stage"
    assert "tools/gpu_run.sh LOG_DIR sm100" in (REPO / "README.md").read_text()


def test_sm100_stage_names_existing_tests() -> None:
    text = SCRIPT.read_text()
    listed = re.search(r"SM100_TESTS=\(([^)]*)\)", text, re.DOTALL)
    assert listed
    files = listed.group(1).split()
    assert "tests/gpu/test_sm100_gpu.py" in files
    for f in files:
        assert (REPO / f).is_file(), f


def test_sm100_benchmark_arguments_parse(capsys: pytest.CaptureFixture[str]) -> None:
    import bench_bf16
    import bench_fp8_fp4
    from moe_cases import MODELS

    text = SCRIPT.read_text()
    assert bench_bf16.main(["--quick", "--list"]) == 0
    assert "contiguous" in capsys.readouterr().out
    args = bench_fp8_fp4.parse_args(["--quick", "--weights", "prepared"])
    assert args.quick and args.weights == ("prepared",)
    models = re.search(r"bench_moe\.py --models (\S+) --tokens (\S+)", text)
    assert models
    assert all(m in MODELS for m in models.group(1).split(","))
    assert all(int(t) > 0 for t in models.group(2).split(","))


def test_sm100_gpu_tests_collect_and_skip_without_blackwell() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         str(REPO / "tests" / "gpu" / "test_sm100_gpu.py")],
        check=False, capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    import torch

    if torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 10:
        pytest.skip("a Blackwell GPU is present: the file runs instead")
    assert res.returncode == 0, res.stdout[-2000:]
    tail = res.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+ skipped in [\d.]+s", tail), tail
    assert int(tail.split()[0]) > 100


def test_the_sm100_stage_runs_exactly_the_arch_neutral_gpu_files() -> None:
    """conftest skips every other GPU test off Hopper; the stage must not name one of them."""
    from conftest import ARCH_NEUTRAL_GPU_FILES

    text = (Path(__file__).resolve().parents[1] / "gpu_run.sh").read_text()
    listed = re.search(r"SM100_TESTS=\(([^)]*)\)", text)
    assert listed is not None
    names = {Path(word).name for word in listed.group(1).split()}
    assert names == ARCH_NEUTRAL_GPU_FILES


def test_fp8_stage_builds_deepgemm_beside_when_given_a_tree() -> None:
    """The FP8 x FP4 benchmark's peer: GPU_RUN_DEEPGEMM_DIR starts a background build before
    the tests, and the fp8 stage waits for it and puts it on PYTHONPATH (or says it failed)."""
    text = SCRIPT.read_text()
    start = text.index("GPU_RUN_DEEPGEMM_DIR:-")
    assert text.index("dg_pid=$!") > start
    fp8 = text.index("run_stage fp8 ")
    assert start < text.index('wait "$dg_pid"') < fp8
    assert text.index('export PYTHONPATH="$dg_dir:$PYTHONPATH"') < fp8
    assert text.index("run_stage tests ") > text.index("dg_pid=$!")  # built while tests run


@pytest.mark.parametrize("state", ["clean", "modified", "given"])
def test_the_tree_label_never_claims_a_commit_the_files_are_not(tmp_path: Path, state: str) -> None:
    """Without TREE_COMMIT the reports name HEAD, with "+modified" where the files differ from
    it (the device's git metadata can be older than its copy of the tree)."""
    text = SCRIPT.read_text()
    start = text.index("commit=${TREE_COMMIT:-}")
    snippet = text[start : text.index("\nfi\n", start) + 4]
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f.txt").write_text("a\n")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    if state == "modified":
        (tmp_path / "f.txt").write_text("b\n")
    env_prefix = "TREE_COMMIT=abc123 " if state == "given" else "TREE_COMMIT= "
    res = subprocess.run(["bash", "-c", f"{env_prefix}; set -u\n{snippet}echo \"$commit\""],
                         cwd=tmp_path, check=True, capture_output=True, text=True)  # fmt: skip
    expected = {"clean": head, "modified": f"{head}+modified", "given": "abc123"}[state]
    assert res.stdout.strip() == expected
