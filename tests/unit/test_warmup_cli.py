"""`python -m moegemm.jit --warmup` as a new user meets it: ninja-driven prebuilds, dry runs, one
line and exit 2 for every bad input, racing warmups that report honestly, Ctrl-C, warm caches
without nvcc or on a read-only mount, and the report of what is built where."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from child_env import no_nvcc_env, read_only_env

from moegemm.jit import KernelSpec
from moegemm.warmup import cli, presets
from moegemm.warmup.specs import warmup_specs

HOOK = "test_warmup_cli:fake_warmup_specs"
KERNELS_ENV = "MOEGEMM_TEST_WARM_KERNELS"  # how many kernels the fake enumeration returns
HOOK_LOG_ENV = "MOEGEMM_TEST_HOOK_LOG"  # where it records the arguments it was given


def fake_warmup_specs(
    shapes: list[dict[str, Any]],
    token_counts: Sequence[int],
    top_k: int,
    arch: str,
    num_sms: int,
    *,
    weights: str,
) -> list[KernelSpec]:
    """Stands in for moegemm.warmup.warmup_specs: $MOEGEMM_TEST_WARM_KERNELS (default 2) tiny
    kernels, plus a duplicate the CLI must drop, whatever the shapes; needs `tiny_include`."""
    log = os.environ.get(HOOK_LOG_ENV)
    if log:
        record = {
            "shapes": shapes,
            "tokens": [token_counts[0], token_counts[-1], len(token_counts)],
            "top_k": top_k,
            "arch": arch,
            "num_sms": num_sms,
            "weights": weights,
        }
        with open(log, "a") as f:
            f.write(json.dumps(record) + "\n")
    specs = [
        KernelSpec(
            f"warm{i}",
            f"#include <moegemm/tiny/top.h>\n"
            f"__global__ void k(int* p) {{ p[0] = top_value() + {i}; }}\n",
            arch=arch,
        )
        for i in range(int(os.environ.get(KERNELS_ENV, "2")))
    ]
    return specs + specs[:1]


@pytest.fixture
def cli_env(
    jit_cache_dir: Path,
    tiny_include: Path,
    subprocess_env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, str]:
    monkeypatch.setenv(cli.SPECS_FN_ENV, HOOK)  # for main() called in this process
    subprocess_env[cli.SPECS_FN_ENV] = HOOK
    subprocess_env["MOEGEMM_LIGHT_IMPORT"] = "1"  # the CLI needs no torch at import
    return subprocess_env


@pytest.fixture
def shapes_file(tmp_path: Path) -> Path:
    path = tmp_path / "shapes.json"
    path.write_text(
        json.dumps(
            [
                {"n": 4096, "k": 7168, "op": "linear1", "num_groups": 32, "top_k": 4},
                {"n": 7168, "k": 2048},
            ]
        )
    )
    return path


def run_cli(
    env: dict[str, str], *args: str, timeout: float = 300, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "moegemm.jit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=cwd,
    )


def summary(proc: subprocess.CompletedProcess[str]) -> str:
    return next(line for line in proc.stdout.splitlines() if line.startswith("warmup"))


def counts(proc: subprocess.CompletedProcess[str]) -> dict[str, int]:
    line = summary(proc)
    fields = ("compiled", "built elsewhere", "already cached", "failed")
    return {f: int(re.search(rf"{f} (\d+)", line).group(1)) for f in fields}  # type: ignore[union-attr]


def assert_one_line_error(rc: int, stdout: str, stderr: str, fragment: str) -> None:
    lines = stderr.strip().splitlines()
    assert rc == 2, (rc, stdout, stderr)
    assert "Traceback" not in stdout + stderr
    assert len(lines) == 1 and fragment in lines[0], stderr


@pytest.mark.nvcc
def test_second_warmup_compiles_nothing(
    cli_env: dict[str, str], shapes_file: Path, jit_cache_dir: Path
) -> None:
    args = ("--warmup", "--shapes", str(shapes_file), "--jobs", "2", "--num-sms", "132")
    first = run_cli(cli_env, *args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert counts(first) == {
        "compiled": 2,
        "built elsewhere": 0,
        "already cached": 0,
        "failed": 0,
    }
    assert re.search(r"^\[2/2\] build warm\d$", first.stdout, re.MULTILINE)  # ninja progress
    assert len(list((jit_cache_dir / "kernels").iterdir())) == 2
    second = run_cli(cli_env, *args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert counts(second)["compiled"] == 0 and counts(second)["already cached"] == 2
    assert list((jit_cache_dir / "tmp").iterdir()) == []


def test_report_names_model_arch_tokens_count_and_cache(
    cli_env: dict[str, str], jit_cache_dir: Path, tmp_path: Path
) -> None:
    """--model reaches the enumeration with the preset's top_k and every token count 1..16384,
    and the first lines say so, with the kernel count and where the kernels go."""
    log = tmp_path / "hook.jsonl"
    env = dict(cli_env, **{HOOK_LOG_ENV: str(log)})
    proc = run_cli(env, "--warmup", "--model", "DeepSeek-V3", "--dry-run", "--num-sms", "132")
    assert proc.returncode == 0, proc.stderr
    header, plan = proc.stdout.splitlines()[:2]
    assert header.startswith("moegemm warmup: model deepseek_v3 (4 shapes, top_k 8), BF16 weights,")
    assert "sm_90a with 132 SMs" in header and header.endswith("tokens 1..16384")
    assert plan == f"2 kernels into {jit_cache_dir / 'kernels'}: 2 to compile, 0 already cached"
    (record,) = [json.loads(line) for line in log.read_text().splitlines()]
    assert record["top_k"] == 8 and record["tokens"] == [1, 16384, 16384]
    assert record["weights"] == "bf16"
    assert {s["num_groups"] for s in record["shapes"]} == {256, 1}
    assert not (jit_cache_dir / "kernels").exists()


def test_shapes_file_top_k_and_token_list(
    cli_env: dict[str, str], shapes_file: Path, tmp_path: Path
) -> None:
    """A shape's own top_k wins, --top-k covers the others; --tokens is an explicit list."""
    log = tmp_path / "hook.jsonl"
    env = dict(cli_env, **{HOOK_LOG_ENV: str(log)})
    args = ("--shapes", str(shapes_file), "--tokens", "64,1,8", "--top-k", "2", "--num-sms", "78")
    proc = run_cli(env, "--warmup", *args, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "top_k 4/2" in proc.stdout and "tokens 1,8,64" in proc.stdout
    assert "note: 1 shape(s) without num_groups are built as one dense GEMM each" in proc.stdout
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["top_k"], [s["n"] for s in r["shapes"]]) for r in records] == [
        (4, [4096]),
        (2, [7168]),
    ]
    assert all(r["tokens"] == [1, 64, 3] and r["num_sms"] == 78 for r in records)


def test_dry_run_compiles_nothing(cli_env: dict[str, str], jit_cache_dir: Path) -> None:
    proc = run_cli(cli_env, "--warmup", "--model", "qwen3-30b-a3b", "--dry-run", "--num-sms", "132")
    assert proc.returncode == 0, proc.stderr
    assert "would compile warm0" in proc.stdout and "would compile warm1" in proc.stdout
    assert "2 kernels, would compile 2, already cached 0" in summary(proc)
    assert not (jit_cache_dir / "kernels").exists()


@pytest.mark.nvcc
def test_cache_dir_option(
    cli_env: dict[str, str], shapes_file: Path, tmp_path: Path, jit_cache_dir: Path
) -> None:
    other = tmp_path / "other-cache"
    args = ("--warmup", "--shapes", str(shapes_file), "--cache-dir", str(other), "--no-check")
    proc = run_cli(cli_env, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(list((other / "kernels").iterdir())) == 2
    assert f"into {other / 'kernels'}" in proc.stdout
    assert "check: skipped (--no-check)" in proc.stdout
    assert not jit_cache_dir.exists()


@pytest.mark.nvcc
def test_relative_cache_dir(cli_env: dict[str, str], shapes_file: Path, tmp_path: Path) -> None:
    """A relative root means the caller's folder, also for the build processes (which ninja
    runs in its own folder)."""
    env = dict(cli_env, MOEGEMM_CACHE_DIR="rel-cache")
    proc = run_cli(env, "--warmup", "--shapes", str(shapes_file), "--no-check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert counts(proc)["compiled"] == 2
    assert len(list((tmp_path / "rel-cache" / "kernels").iterdir())) == 2


@pytest.mark.nvcc
def test_failed_kernel_makes_exit_nonzero(
    cli_env: dict[str, str], shapes_file: Path, tiny_include: Path
) -> None:
    (tiny_include / "moegemm/tiny/leaf.h").write_text("#pragma once\nthis does not compile\n")
    proc = run_cli(cli_env, "--warmup", "--shapes", str(shapes_file), "--jobs", "2")
    assert proc.returncode == 1
    assert "compiled 0, built elsewhere 0, already cached 0, failed 2" in summary(proc)
    assert "this does not compile" in proc.stdout  # nvcc's message, relayed by ninja


BAD_SHAPES = [
    ([{"n": 100, "k": 7168}], "entry 0: n must be a positive multiple of 8"),
    ([{"n": 4096, "k": 100}], "entry 0: k must be a positive multiple of 8"),
    ([{"n": 0, "k": 7168}], "n must be a positive multiple of 8 (BF16 rows of 16 bytes"),
    ([{"n": 4096, "k": 64}, {"n": 4096, "k": -8}], "entry 1: k must be a positive multiple"),
    ([{"n": 4096, "k": 7168, "num_groups": 0}], "num_groups must be a positive integer, got 0"),
    ([{"n": 4096, "k": 7168, "num_groups": -2}], "num_groups must be a positive integer"),
    ([{"n": 4096, "k": 7168, "num_groups": 2.5}], "num_groups must be a positive integer"),
    (
        [{"n": 4096.5, "k": 7168}],
        "n must be a positive multiple of 8 (BF16 rows of 16 bytes, for TMA), got 4096.5",
    ),
    ([{"n": "4096", "k": 7168}], "got '4096'"),
    ([{"n": True, "k": 7168}], "for TMA), got True"),
    ([{"n": 4096, "k": 7168, "top_k": 0}], "top_k must be a positive integer"),
    (
        [{"n": 4096, "k": 7168, "num_groups": 8, "top_k": 9}],
        "entry 0: top_k must be at most num_groups 8 (a token picks top_k distinct experts)",
    ),
    (
        [{"n": 4096, "k": 7168, "num_groups": 4097}],
        "entry 0: num_groups must be at most 4096 (the experts of one layer), got 4097",
    ),
    ([{"n": 4096, "k": 7168, "num_experts": 8}], "unknown key 'num_experts' (allowed: n, k"),
    ([{"n": 4096}], "entry 0: missing 'k'"),
    ([4096], "entry 0: expected an object"),
    ([], "expected a non-empty JSON list"),
    ({"n": 4096, "k": 7168}, "expected a non-empty JSON list"),
]


@pytest.mark.parametrize(("shapes", "fragment"), BAD_SHAPES)
def test_bad_shapes_are_one_line(
    cli_env: dict[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    shapes: Any,
    fragment: str,
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(shapes))
    rc = cli.main(["--warmup", "--shapes", str(path), "--dry-run", "--num-sms", "132"])
    out, err = capsys.readouterr()
    assert_one_line_error(rc, out, err, fragment)
    assert err.startswith(f"{cli.PROG}: error: {path}: ")


BAD_ARGS = [
    (["--num-sms", "-5"], "argument --num-sms: must be a positive integer, got '-5'"),
    (["--num-sms", "many"], "argument --num-sms: must be a positive integer"),
    (["--jobs", "-1"], "argument --jobs/-j: must be a positive integer, got '-1'"),
    (["-j", "0"], "argument --jobs/-j: must be a positive integer, got '0'"),
    (["--max-tokens", "0"], "argument --max-tokens: must be a positive integer"),
    (["--max-tokens", "1e4"], "argument --max-tokens: must be a positive integer"),
    (["--tokens", "1,x"], "argument --tokens: must be comma-separated positive integers"),
    (["--tokens", "0,4"], "argument --tokens: must be comma-separated positive integers"),
    (["--tokens", "4", "--max-tokens", "8"], "not allowed with argument --tokens"),
    (["--max-tokens", "16384000"], "argument --max-tokens: must be at most 1048576"),
    (["--top-k", "0"], "argument --top-k: must be a positive integer"),
    (["--num-sms", "100000"], "argument --num-sms: must be at most 144 for sm_90a"),
    (["--num-sms", "161", "--arch", "sm_100a"], "argument --num-sms: must be at most 160 for"),
    (["--arch", "sm_80"], "argument --arch: invalid choice: 'sm_80'"),
    (["--model", "no-such-model"], "unknown model 'no-such-model'"),
    (["--weights", "fp4"], "argument --weights: invalid choice: 'fp4'"),
    (["--weights"], "argument --weights: expected one argument"),
]


@pytest.mark.parametrize(("args", "fragment"), BAD_ARGS)
def test_bad_arguments_are_one_line(
    cli_env: dict[str, str],
    shapes_file: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    fragment: str,
) -> None:
    source = [] if "--model" in args else ["--shapes", str(shapes_file)]
    try:
        rc = cli.main(["--warmup", *source, *args, "--dry-run"])
    except SystemExit as exc:  # argparse's errors leave through sys.exit
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    assert_one_line_error(rc, out, err, fragment)


def test_without_warmup(cli_env: dict[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2 and "--warmup" in capsys.readouterr().out  # the help
    with pytest.raises(SystemExit) as info:
        cli.main(["--model", "deepseek-v3"])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert err.strip().splitlines() == [
        f"{cli.PROG}: error: add --warmup (the only command) to prebuild kernels (see --help)"
    ]


def test_closed_stdout_is_no_traceback(cli_env: dict[str, str], shapes_file: Path) -> None:
    """`... --dry-run | head`: the reader goes away before the output ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "moegemm.jit", "--warmup", "--shapes", str(shapes_file)]
        + ["--dry-run", "--num-sms", "132"],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    err = proc.communicate(timeout=120)[1]
    assert proc.returncode == 128 + signal.SIGPIPE and "Traceback" not in err, err


def test_unknown_model_lists_models(cli_env: dict[str, str]) -> None:
    proc = run_cli(cli_env, "--warmup", "--model", "no-such-model")
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "unknown model")
    assert "deepseek_v3" in proc.stderr and "qwen3_30b_a3b" in proc.stderr


def test_sm100_lists_its_bf16_kernels(cli_env: dict[str, str], shapes_file: Path) -> None:
    """--arch sm_100f plans kernels for sm_100f with B200's SM count (cli_env's specs function
    stands in for the real one, which tests/unit/test_warmup_specs.py and
    tests/compile/test_compile_sm100_fp8_fp4.py cover); MXFP4 weights are no longer refused there."""
    proc = run_cli(
        cli_env, "--warmup", "--shapes", str(shapes_file), "--arch", "sm_100f", "--dry-run"
    )
    assert proc.returncode == 0, proc.stderr
    assert "148 SMs" in proc.stdout
    planned = [line for line in proc.stdout.splitlines() if line.startswith("would compile")]
    assert planned and all(line.endswith("(sm_100f)") for line in planned)
    proc = run_cli(
        cli_env, "--warmup", "--shapes", str(shapes_file), "--arch", "sm_100a", "--weights",
        "mxfp4", "--dry-run",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert any(line.startswith("would compile") for line in proc.stdout.splitlines())


def test_uncreatable_cache_dir(cli_env: dict[str, str], shapes_file: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    args = ("--warmup", "--shapes", str(shapes_file), "--cache-dir", str(blocker / "cache"))
    proc = run_cli(cli_env, *args)
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "cannot create the cache dir")


def test_top_k_above_num_groups_is_refused(
    cli_env: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--top-k for a grouped shape without its own top_k: more choices than experts is an
    error naming the entry; a dense shape (no num_groups) reads no top_k."""
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps([{"n": 4096, "k": 7168}, {"n": 512, "k": 7168, "num_groups": 8}]))
    rc = cli.main(["--warmup", "--shapes", str(path), "--top-k", "9", "--dry-run"])
    out, err = capsys.readouterr()
    assert_one_line_error(
        rc, out, err, f"{path}: entry 1: --top-k must be at most num_groups 8 (a token picks "
        "top_k distinct experts), got 9 (give this entry its own top_k)",
    )  # fmt: skip
    rc = cli.main(["--warmup", "--model", "qwen3-30b-a3b", "--top-k", "129", "--dry-run"])
    out, err = capsys.readouterr()
    assert rc == 0, err  # cli_env's hook stands in for the enumeration, which refuses it:
    with pytest.raises(ValueError, match=r"top_k must be at most num_groups 128 .*got 129$"):
        warmup_specs(presets.model_shapes("qwen3-30b-a3b"), [1], 129, "sm_90a", 132)


@pytest.mark.parametrize("dry_run", [False, True])
def test_cache_dir_that_is_a_file(
    cli_env: dict[str, str], shapes_file: Path, tmp_path: Path, dry_run: bool
) -> None:
    """A regular file as --cache-dir: one line saying so, not mkdir's bare "File exists"."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    args = ("--warmup", "--shapes", str(shapes_file), "--cache-dir", str(blocker))
    proc = run_cli(cli_env, *args, *(["--dry-run"] if dry_run else []))
    assert_one_line_error(
        proc.returncode, proc.stdout, proc.stderr, f"the cache dir {blocker} is a file, not a "
        "directory: point --cache-dir (or $MOEGEMM_CACHE_DIR) at a folder",
    )  # fmt: skip
    assert "File exists" not in proc.stderr


@pytest.mark.parametrize("num_groups", [100_000_000, 4097])
def test_huge_num_groups_is_refused_at_once(
    subprocess_env: dict[str, str], tmp_path: Path, num_groups: int
) -> None:
    """The real enumeration (no hook): the m_indices layout costs a selection per group, so a
    group count past the limit is refused before it starts, not enumerated for minutes."""
    path = tmp_path / "huge.json"
    path.write_text(json.dumps([{"n": 4096, "k": 7168, "num_groups": num_groups}]))
    env = dict(subprocess_env, MOEGEMM_LIGHT_IMPORT="1")
    start = time.monotonic()
    proc = run_cli(
        env, "--warmup", "--shapes", str(path), "--tokens", "1", "--dry-run", "--num-sms", "132",
        timeout=60,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert_one_line_error(
        proc.returncode, proc.stdout, proc.stderr, f"num_groups must be at most 4096 (the experts "
        f"of one layer), got {num_groups}",
    )  # fmt: skip
    assert elapsed < 10, elapsed


def test_largest_num_groups_is_answered_in_seconds(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """At the limit the real enumeration still answers within seconds."""
    path = tmp_path / "wide.json"
    path.write_text(json.dumps([{"n": 4096, "k": 7168, "num_groups": 4096}]))
    env = dict(subprocess_env, MOEGEMM_LIGHT_IMPORT="1")
    start = time.monotonic()
    proc = run_cli(
        env, "--warmup", "--shapes", str(path), "--tokens", "1", "--dry-run", "--num-sms", "132",
        timeout=120,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert elapsed < 30, elapsed  # about 2 s on an idle machine


SLOW_IMPORT = """
import importlib.abc, pathlib, runpy, sys, time

marker, module = sys.argv[1:3]

class Slow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == module:  # a module the warmup imports: wait inside its import
            pathlib.Path(marker).touch()
            time.sleep(60)
        return None

sys.meta_path.insert(0, Slow())
sys.argv = ["moegemm.jit", *sys.argv[3:]]
runpy.run_module("moegemm.jit", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize(
    ("module", "line"),
    [
        # The entry point's own import of the CLI (torch and the heuristics behind it).
        ("moegemm.warmup.cli", "python -m moegemm.jit: interrupted"),
        # A lazy import once main() runs (here: the enumeration named by the test hook).
        ("slow_specs_hook", f"{cli.PROG}: interrupted; kernels built so far stay cached"),
    ],
)
def test_interrupt_while_importing_is_one_line(
    subprocess_env: dict[str, str],
    shapes_file: Path,
    jit_cache_dir: Path,
    tmp_path: Path,
    module: str,
    line: str,
) -> None:
    """Ctrl-C in the first seconds, while the warmup still imports: 130 and one line, no
    KeyboardInterrupt traceback."""
    marker = tmp_path / "importing"
    args = ("--warmup", "--shapes", str(shapes_file), "--dry-run", "--num-sms", "132")
    proc = subprocess.Popen(
        [sys.executable, "-c", SLOW_IMPORT, str(marker), module, *args],
        env=dict(
            subprocess_env, MOEGEMM_LIGHT_IMPORT="1", **{cli.SPECS_FN_ENV: "slow_specs_hook:f"}
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, out + err
    assert "Traceback" not in out + err
    assert err.strip().splitlines() == [line]


def test_python_m_defers_the_api_import(subprocess_env: dict[str, str]) -> None:
    """`python -m moegemm.jit` imports the package before its entry point installs the signal
    handlers: under -m the package defers the API (and torch), so the handlers come first."""
    env = {k: v for k, v in subprocess_env.items() if k != "MOEGEMM_LIGHT_IMPORT"}
    code = (
        "import sys; sys.argv = ['-m']; import moegemm; "
        "print('torch' in sys.modules, 'moegemm.api' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert proc.stdout.split() == ["False", "False"], proc.stdout + proc.stderr
    # And a plain import still loads the API, so a first call pays for no imports.
    code = "import sys, moegemm; print('moegemm.api' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert proc.stdout.strip() == "True", proc.stdout + proc.stderr


def test_hook_must_name_a_function(cli_env: dict[str, str], shapes_file: Path) -> None:
    env = dict(cli_env, MOEGEMM_WARMUP_SPECS_FN="no_colon_here")
    proc = run_cli(env, "--warmup", "--shapes", str(shapes_file), "--dry-run")
    assert_one_line_error(proc.returncode, proc.stdout, proc.stderr, "module:function")


@pytest.mark.nvcc
def test_warm_cache_without_nvcc(
    cli_env: dict[str, str], shapes_file: Path, tmp_path: Path, jit_cache_dir: Path
) -> None:
    """An image without nvcc: a warm cache passes; one missing kernel is one line, exit 2."""
    args = ("--warmup", "--shapes", str(shapes_file), "--num-sms", "132")
    assert run_cli(cli_env, *args).returncode == 0
    env = no_nvcc_env(cli_env, tmp_path)
    warm = run_cli(env, *args)
    assert warm.returncode == 0, warm.stdout + warm.stderr
    assert counts(warm)["already cached"] == 2 and counts(warm)["compiled"] == 0
    env[KERNELS_ENV] = "3"
    miss = run_cli(env, *args)
    assert_one_line_error(
        miss.returncode, miss.stdout, miss.stderr, "cannot compile 1 missing kernel (warm2)"
    )
    assert "): nvcc not found" in miss.stderr  # the kernel named, then the reason
    assert len(list((jit_cache_dir / "kernels").iterdir())) == 2


@pytest.mark.nvcc
def test_read_only_cache(
    cli_env: dict[str, str], shapes_file: Path, tmp_path: Path, jit_cache_dir: Path
) -> None:
    """A read-only mount (EROFS, simulated: see child_env): complete passes, a miss is an error."""
    args = ("--warmup", "--shapes", str(shapes_file), "--num-sms", "132")
    assert run_cli(cli_env, *args).returncode == 0
    env = read_only_env(cli_env, tmp_path, jit_cache_dir)
    complete = run_cli(env, *args)
    assert complete.returncode == 0, complete.stdout + complete.stderr
    assert counts(complete)["already cached"] == 2
    env[KERNELS_ENV] = "3"
    miss = run_cli(env, *args)
    fragment = f"the cache dir {jit_cache_dir} is not writable (Read-only file system)"
    assert_one_line_error(miss.returncode, miss.stdout, miss.stderr, fragment)
    assert "cannot build 1 missing kernel (warm2)" in miss.stderr  # which one


def _slow_nvcc(tmp_path: Path, real_nvcc: str, body: str) -> Path:
    wrapper = tmp_path / "slow-nvcc.sh"
    wrapper.write_text(
        f'#!/bin/sh\ncase " $* " in *" -cubin "*)\n{body}\n;; esac\nexec "{real_nvcc}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


@pytest.mark.nvcc
def test_racing_warmups_report_honestly(
    cli_env: dict[str, str], shapes_file: Path, tmp_path: Path, real_nvcc: str
) -> None:
    """Four warmups at once: each kernel is compiled once, by one of them; the others count it
    as built elsewhere (or already cached), never as compiled."""
    calls = tmp_path / "calls.txt"
    env = dict(
        cli_env, MOEGEMM_NVCC=str(_slow_nvcc(tmp_path, real_nvcc, f'echo x >> "{calls}"; sleep 2'))
    )
    args = ("-m", "moegemm.jit", "--warmup", "--shapes", str(shapes_file), "--num-sms", "132")
    procs = [
        subprocess.Popen(
            [sys.executable, *args, "-j", "2"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    assert all(r.returncode == 0 for r in results), [r.stdout + r.stderr for r in results]
    reports = [counts(r) for r in results]
    assert sum(r["compiled"] for r in reports) == 2, reports
    assert all(r["compiled"] + r["built elsewhere"] + r["already cached"] == 2 for r in reports)
    assert all(r["failed"] == 0 for r in reports)
    assert calls.read_text().count("x") == 2


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("signum", "rc", "word"),
    [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated")],
)
def test_interrupt_is_one_line_and_stops_the_builds(
    cli_env: dict[str, str],
    shapes_file: Path,
    tmp_path: Path,
    real_nvcc: str,
    jit_cache_dir: Path,
    signum: int,
    rc: int,
    word: str,
) -> None:
    """Ctrl-C (SIGINT to the terminal's process group) or SIGTERM mid-build: one line, the
    compiles stopped, nothing half-built left behind."""
    started = tmp_path / "started"
    body = f'echo $$ >> "{started}"; sleep 60'
    env = dict(cli_env, MOEGEMM_NVCC=str(_slow_nvcc(tmp_path, real_nvcc, body)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "moegemm.jit", "--warmup", "--shapes", str(shapes_file), "-j", "2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, which a terminal's Ctrl-C signals
    )
    deadline = time.monotonic() + 120
    while not (started.exists() and len(started.read_text().split()) == 2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.1)
    os.killpg(proc.pid, signum)
    # The CLI stops ninja with SIGTERM and kills it after STOP_TIMEOUT_S (30 s); on a loaded
    # 2-core CI machine the whole stop once took longer than 60 s (not reproduced since).
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == rc, out + err
    assert "Traceback" not in out + err
    assert err.strip().splitlines() == [f"{cli.PROG}: {word}; kernels built so far stay cached"]
    for pid in map(int, started.read_text().split()):  # the compiles were stopped too
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"nvcc wrapper {pid} still runs after the interrupt")
    assert not (jit_cache_dir / "kernels").exists()
    assert list((jit_cache_dir / "tmp").iterdir()) == []  # the builds cleaned up after themselves


@pytest.mark.nvcc
def test_real_warmup_twice(
    jit_cache_dir: Path, subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """The real enumeration on one dense shape at one token count: real kernels are built, a
    second run finds them cached, and without a GPU the check says it was skipped and why."""
    path = tmp_path / "one_shape.json"
    path.write_text(json.dumps([{"n": 2048, "k": 768}]))
    args = ("--warmup", "--shapes", str(path), "--tokens", "1", "--num-sms", "132")
    first = run_cli(subprocess_env, *args, "--no-check", timeout=600)
    assert first.returncode == 0, first.stdout + first.stderr
    compiled = counts(first)["compiled"]
    assert compiled >= 1 and counts(first)["failed"] == 0
    names = sorted(p.name for p in (jit_cache_dir / "kernels").iterdir())
    assert len(names) == compiled and all(n.startswith("sm90_bf16_") for n in names)
    second = run_cli(subprocess_env, *args)
    assert second.returncode == 0, second.stdout + second.stderr
    assert counts(second)["compiled"] == 0 and counts(second)["already cached"] == compiled
    import torch

    if torch.cuda.is_available():  # the check ran, or said why not (another SM count or arch)
        assert re.search(r"^check: ", second.stdout, re.MULTILINE), second.stdout
    else:
        skipped = r"^check: skipped, no CUDA GPU visible \(torch .*\)"
        assert re.search(skipped, second.stdout, re.MULTILINE), second.stdout


@pytest.mark.nvcc
def test_kernels_of_another_nvcc_are_used_and_noted(
    cli_env: dict[str, str], shapes_file: Path, jit_cache_dir: Path
) -> None:
    args = ("--warmup", "--shapes", str(shapes_file), "--num-sms", "132")
    assert run_cli(cli_env, *args).returncode == 0
    old = "Cuda compilation tools, release 12.8, V12.8.93"
    for manifest_path in (jit_cache_dir / "kernels").glob("*/manifest.json"):
        manifest = json.loads(manifest_path.read_text())
        manifest["compiler"]["version"] = old
        manifest_path.write_text(json.dumps(manifest))
    again = run_cli(cli_env, *args)
    assert again.returncode == 0, again.stdout + again.stderr
    assert counts(again)["already cached"] == 2 and counts(again)["compiled"] == 0
    assert f"note: cached kernels built by another nvcc (2 by {old}; this one: " in again.stdout
    assert f"delete {jit_cache_dir / 'kernels'} to rebuild them" in again.stdout


def _checked(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], gpu: cli.GpuProbe, result: bool = True
) -> tuple[int, list[tuple[Any, ...]]]:
    """cli._check with a stand-in GPU probe and run_check: the GPU path's plumbing on a CPU."""
    from moegemm.warmup import check

    calls: list[tuple[Any, ...]] = []

    def fake_run_check(
        shapes: list[dict[str, Any]],
        top_k: int,
        max_tokens: int = 16384,
        *,
        token_counts: Sequence[int] | None = None,
        weights: str = "bf16",
    ) -> bool:
        calls.append((len(shapes), top_k, max_tokens, token_counts, weights))
        return result

    monkeypatch.setattr(check, "run_check", fake_run_check)
    monkeypatch.setattr(cli, "probe_gpu", lambda arch="sm_90a": gpu)
    args = cli.build_parser().parse_args(["--warmup", *argv])
    workload = cli.collect_workload(args)
    return cli._check(args, workload, False, None, args.num_sms or 132), calls


def test_check_runs_the_model_on_an_sm90_gpu(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, calls = _checked(monkeypatch, ["--model", "deepseek-v3"], cli.GpuProbe(132))
    assert rc == 0 and calls == [(4, 8, 16384, None, "bf16")]
    assert "check: the warmed grouped kernels against FP32" in capsys.readouterr().out
    rc, calls = _checked(
        monkeypatch, ["--model", "qwen3-30b-a3b", "--tokens", "64,1"], cli.GpuProbe(132)
    )
    assert rc == 0 and calls == [(2, 8, 64, [1, 64], "bf16")]
    rc, _ = _checked(monkeypatch, ["--model", "qwen3-30b-a3b"], cli.GpuProbe(132), result=False)
    assert rc == 1


def test_check_skips_and_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, calls = _checked(monkeypatch, ["--model", "deepseek-v3"], cli.GpuProbe(114))
    assert rc == 0 and calls == []
    assert "check: skipped, built for 132 SMs and this GPU has 114" in capsys.readouterr().out
    rc, calls = _checked(monkeypatch, ["--model", "deepseek-v3"], cli.GpuProbe(None, "no GPU"))
    assert rc == 0 and calls == []
    assert "check: skipped, no GPU; the kernels are built and cached" in capsys.readouterr().out
    rc, calls = _checked(monkeypatch, ["--model", "deepseek-v3", "--no-check"], cli.GpuProbe(132))
    assert rc == 0 and calls == [] and "check: skipped (--no-check)" in capsys.readouterr().out


def test_sm100_targets_this_gpus_sm_count_where_it_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """--arch sm_100f on a B200/B300 builds for its own SM count; elsewhere for B200's 148."""
    args = cli.build_parser().parse_args(["--warmup", "--arch", "sm_100f"])
    monkeypatch.setattr(cli, "probe_gpu", lambda arch="sm_90a": cli.GpuProbe(160))
    assert cli._target_sms(args)[:2] == (160, "160 SMs of this GPU")
    monkeypatch.setattr(cli, "probe_gpu", lambda arch="sm_90a": cli.GpuProbe(None, "an H200"))
    assert cli._target_sms(args)[0] == 148


def test_probe_refuses_a_gpu_of_another_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = pytest.importorskip("torch")
    props = type(
        "Props", (), {"major": 9, "minor": 0, "name": "H200", "multi_processor_count": 132}
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    assert cli.probe_gpu("sm_90a").num_sms == 132
    refused = cli.probe_gpu("sm_100f")
    assert refused.num_sms is None and "not sm_100f" in refused.why_not
    props.major, props.minor = 10, 3  # B300 runs the sm_100f family's kernels
    assert cli.probe_gpu("sm_100f").num_sms == 132 and cli.probe_gpu("sm_90a").num_sms is None
