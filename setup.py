"""Builds the one host extension, moegemm._C, with CMake + Ninja.

Metadata lives in pyproject.toml. This file only plugs a CMake-driven build_ext into setuptools,
so `pip install .` and `pip install -e .` both work, also with --no-build-isolation on an offline
machine where pybind11, cmake and ninja are already pip-installed. Kernels are not built here:
they are JIT-compiled at first use.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    """An extension whose sources CMakeLists.txt lists; setuptools compiles nothing itself."""

    def __init__(self, name: str, source_dir: Path) -> None:
        super().__init__(name, sources=[])
        self.source_dir = source_dir


def _find_cmake() -> str:
    try:
        import cmake  # the pip package, preferred: it is the version pyproject.toml pins

        candidate = Path(cmake.CMAKE_BIN_DIR) / "cmake"
        if candidate.exists():
            return str(candidate)
    except (ImportError, AttributeError):
        pass
    found = shutil.which("cmake")
    if found is None:
        raise RuntimeError("cmake not found: `pip install cmake` or put cmake >= 3.24 on PATH")
    return found


def _find_ninja() -> str | None:
    try:
        import ninja

        candidate = Path(ninja.BIN_DIR) / "ninja"
        if candidate.exists():
            return str(candidate)
    except (ImportError, AttributeError):
        pass
    return shutil.which("ninja")


class CMakeBuild(build_ext):
    def build_extension(self, ext: Extension) -> None:
        if not isinstance(ext, CMakeExtension):
            super().build_extension(ext)
            return
        import pybind11

        # setuptools decides where the module goes (build/lib..., or the source tree via the
        # editable-install machinery, which copies from here); CMake writes exactly that file.
        target = Path(self.get_ext_fullpath(ext.name)).resolve()
        build_dir = Path(self.build_temp).resolve() / ext.name
        build_dir.mkdir(parents=True, exist_ok=True)

        args = [
            f"-DCMAKE_BUILD_TYPE={'Debug' if self.debug else 'Release'}",
            f"-DMOEGEMM_OUTPUT_DIR={target.parent}",
            f"-DMOEGEMM_EXT_SUFFIX={sysconfig.get_config_var('EXT_SUFFIX')}",
            f"-DPython3_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            "--no-warn-unused-cli",
        ]
        # CMake reads CC/CXX only when a build folder is first configured; passing them
        # explicitly also applies a changed compiler to a reused folder.
        for env_name, var in (("CC", "CMAKE_C_COMPILER"), ("CXX", "CMAKE_CXX_COMPILER")):
            if os.environ.get(env_name):
                args.append(f"-D{var}={os.environ[env_name]}")
        ninja = _find_ninja()
        if ninja is not None:
            args += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
        args += [a for a in os.environ.get("CMAKE_ARGS", "").split() if a]

        cmake = _find_cmake()
        jobs = self.parallel or os.cpu_count() or 1
        subprocess.run([cmake, "-S", str(ext.source_dir), "-B", str(build_dir), *args], check=True)
        subprocess.run([cmake, "--build", str(build_dir), "--parallel", str(jobs)], check=True)
        if not target.exists():
            raise RuntimeError(f"CMake build finished but {target} was not produced")


class BuildPyWithHeaders(build_py):
    """Ships include/moegemm as moegemm/include/moegemm: the JIT compiles kernels from these
    headers at run time, so a regular (non-editable) install needs them inside the package."""

    def run(self) -> None:
        super().run()
        source = ROOT / "include" / "moegemm"
        target = Path(self.build_lib) / "moegemm" / "include" / "moegemm"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target)


setup(
    ext_modules=[CMakeExtension("moegemm._C", ROOT)],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithHeaders},
)
