"""The GPU tests' hang guard (conftest.py): a block that outlives its timeout dumps every
thread's stack to the saved stderr descriptor and ends the process with status 1, while a block
that finishes in time leaves the process alone. Run in subprocesses (the guard exits)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from conftest import REPO

SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    sys.path.insert(0, {tests!r})
    from conftest import hang_guard
    fd = os.dup(sys.stderr.fileno())
    with hang_guard({timeout}, fd):
        time.sleep({sleep})
    print("finished")
    """
)


def _run(timeout: float, sleep: float) -> subprocess.CompletedProcess:
    code = SCRIPT.format(tests=str(REPO), timeout=timeout, sleep=sleep)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_hang_dumps_the_stacks_and_exits() -> None:
    proc = _run(timeout=0.5, sleep=30)
    assert proc.returncode == 1
    assert "finished" not in proc.stdout
    assert "Timeout (0:00:00.5" in proc.stderr
    assert 'File "<string>", line 7' in proc.stderr  # the frame asleep inside the guard


def test_a_block_that_ends_in_time_is_left_alone() -> None:
    proc = _run(timeout=30, sleep=0.1)
    assert proc.returncode == 0, proc.stderr
    assert "finished" in proc.stdout and "Timeout" not in proc.stderr
