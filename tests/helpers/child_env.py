"""Python subprocesses as in a runtime image: without the CUDA compiler, or with the kernel
cache on a read-only mount.

Hiding nvcc from the environment is not enough on a machine that has it: the JIT also looks at
`/usr/local/cuda/bin/nvcc`. And chmod does not stop root, who runs these tests in containers. So
a `sitecustomize` put first on the child's import path replaces the JIT's nvcc search with one
that finds nothing, can forbid starting any program (a cache lookup must not shell out), and can
refuse with EROFS every write below a folder, as a read-only mount does."""

from __future__ import annotations

import os
from pathlib import Path

SITECUSTOMIZE = """
import os

if os.environ.get("MOEGEMM_TEST_HIDE_NVCC"):
    from moegemm.jit import compiler

    def _no_nvcc(override, cuda_home):
        raise FileNotFoundError(
            "nvcc not found: set MOEGEMM_NVCC or CUDA_HOME, or put nvcc on PATH"
        )

    compiler._find_nvcc = _no_nvcc

if os.environ.get("MOEGEMM_TEST_NO_SUBPROCESS"):
    import subprocess

    class _Refused(subprocess.Popen):
        def __init__(self, args, *rest, **kwargs):
            raise AssertionError(f"started a program: {args!r}")

    subprocess.Popen = _Refused

_read_only = os.environ.get("MOEGEMM_TEST_READ_ONLY")
if _read_only:
    import errno

    _real_open, _real_mkdir = os.open, os.mkdir
    _writes = os.O_WRONLY | os.O_RDWR | os.O_CREAT

    def _refuse(path):
        if os.path.abspath(os.fspath(path)).startswith(_read_only):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))

    def _open(path, flags, *args, **kwargs):
        if flags & _writes:
            _refuse(path)
        return _real_open(path, flags, *args, **kwargs)

    def _mkdir(path, *args, **kwargs):
        _refuse(path)
        return _real_mkdir(path, *args, **kwargs)

    os.open, os.mkdir = _open, _mkdir
"""


def _with_site(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "child-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env["MOEGEMM_LIGHT_IMPORT"] = "1"  # the JIT alone: no torch in these children
    return env


def no_nvcc_env(env: dict[str, str], tmp_path: Path, no_subprocess: bool = False) -> dict[str, str]:
    """A copy of env with nvcc gone: off PATH, MOEGEMM_NVCC and CUDA_HOME unset, the default
    location hidden; with no_subprocess, starting any program raises."""
    env = {
        k: v for k, v in _with_site(env, tmp_path).items() if k not in ("MOEGEMM_NVCC", "CUDA_HOME")
    }
    env["PATH"] = "/usr/bin:/bin"
    env["MOEGEMM_TEST_HIDE_NVCC"] = "1"
    if no_subprocess:
        env["MOEGEMM_TEST_NO_SUBPROCESS"] = "1"
    return env


def read_only_env(env: dict[str, str], tmp_path: Path, folder: Path) -> dict[str, str]:
    """A copy of env in which every write below folder fails with EROFS."""
    env = _with_site(env, tmp_path)
    env["MOEGEMM_TEST_READ_ONLY"] = str(folder.resolve())
    return env
