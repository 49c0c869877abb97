"""A build of another revision of moegemm, importable beside the current one as `moegemm_baseline`.

tools/build_twins.py times the current tree's kernels against a baseline revision in ONE
process. Both packages are named `moegemm`, so the baseline is staged under a work dir as

    <work>/<digest>/python/moegemm_baseline/   the revision's python/moegemm, imports rewritten
    <work>/<digest>/include/moegemm/            its device headers (the JIT compiles from these)
    <work>/<digest>/csrc, CMakeLists.txt        its host extension, built into the package above
    <work>/cache/                               its own kernel cache

Isolation, and why each step is needed:
- Imports: absolute `moegemm` imports (and the module-path strings of the lazy public API and of
  `importlib.resources`) are rewritten to `moegemm_baseline`; relative imports need nothing.
  Any absolute import left over is an error (`leftover_imports`).
- Environment: the cache root and the include dir are read from `MOEGEMM_CACHE_DIR` and
  `MOEGEMM_INCLUDE_DIR` at call time by both versions, so in the copy those names become
  `MOEGEMM_BASELINE_CACHE_DIR` / `MOEGEMM_BASELINE_INCLUDE_DIR`, which `import_baseline` sets.
  Every other switch (nvcc, CUTLASS headers) is deliberately shared: the same compiler and
  CUTLASS must build both sides.
- `_C`: a pybind11 module; PyInit__C works under any package, so the .so goes inside
  moegemm_baseline/. pybind11 keeps one registry of C++ types per process keyed by type name, so
  a second `moegemm::Kernel` would fail to import ("type already registered"): the baseline is
  compiled with `-Dmoegemm=moegemm_baseline`, which renames its C++ namespace (strings and
  `#include <moegemm/...>` paths are not macro-expanded). It is built with the revision's own
  CMakeLists.txt, with CC/CXX honoured as setup.py does.
- Device code needs no renaming: each package loads its cubins into its own modules.

CPU-only logic (staging, rewriting, building); nothing here touches a GPU.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

PACKAGE = "moegemm_baseline"
SOURCE_PATHS = ("python/moegemm", "csrc", "include", "CMakeLists.txt")
ENV_RENAMES = {
    "MOEGEMM_CACHE_DIR": "MOEGEMM_BASELINE_CACHE_DIR",
    "MOEGEMM_INCLUDE_DIR": "MOEGEMM_BASELINE_INCLUDE_DIR",
}
# Switches both sides may share: where the compiler, CUTLASS and caches are, and diagnostics.
# Any other MOEGEMM_* variable could change one side's picks or kernels (walk stripes, stage
# variants, experiments), so build_twins refuses to run with one set.
SHARED_ENV = {
    "MOEGEMM_CACHE_DIR",
    "MOEGEMM_CUTLASS_INCLUDE",
    "MOEGEMM_NVCC",
    "MOEGEMM_JIT_DEBUG",
    "MOEGEMM_LIGHT_IMPORT",
    "MOEGEMM_GPU_TEST_TIMEOUT",
    *ENV_RENAMES.values(),
}
REWRITE_VERSION = "1"  # part of the staging digest: a changed rewrite restages

_FROM_RE = re.compile(r"^(\s*)from moegemm(?=[\s.])", re.MULTILINE)
_IMPORT_RE = re.compile(r"^(\s*)import moegemm(\s+as\s+\w+)?[ \t]*$", re.MULTILINE)
# "moegemm.api" (a module path in a string) but not "moegemm::sm90::..." (C++ in codegen), and
# not the bare "moegemm" of an include folder (`include / "moegemm"`).
_MODULE_STRING_RE = re.compile(r"""(["'])moegemm((?:\.\w+)+)\1""")
_PACKAGE_STRING_RE = re.compile(r"""((?:files|import_module|find_spec)\(\s*)(["'])moegemm\2""")
_DASH_M_RE = re.compile(r"-m moegemm\.")


def rewrite_source(text: str) -> str:
    """The baseline copy of one Python file: `moegemm` imports point at moegemm_baseline and the
    per-package environment variables are renamed (module docstring)."""
    text = _FROM_RE.sub(rf"\1from {PACKAGE}", text)

    def plain_import(m: re.Match[str]) -> str:
        alias = m.group(2)
        return f"{m.group(1)}import {PACKAGE}{alias if alias else ' as moegemm'}"

    text = _IMPORT_RE.sub(plain_import, text)
    text = _MODULE_STRING_RE.sub(rf"\1{PACKAGE}\2\1", text)
    text = _PACKAGE_STRING_RE.sub(rf"\1\2{PACKAGE}\2", text)
    text = _DASH_M_RE.sub(f"-m {PACKAGE}.", text)
    for old, new in ENV_RENAMES.items():
        text = re.sub(rf"\b{old}\b", new, text)
    return text


def _import_lines(text: str, dotted_only: bool = False) -> list[int]:
    """Line numbers of the import statements of `moegemm` (or, dotted_only, of `import
    moegemm.x`) in a Python source: its syntax tree, so an import shown in a docstring is no
    import; a source that does not parse is read line by line."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        pattern = r"import moegemm\." if dotted_only else r"(from|import) moegemm(\s|\.|$)"
        return [i for i, line in enumerate(text.splitlines(), 1)
                if re.match(pattern, line.strip())]  # fmt: skip
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
            if any(n.startswith("moegemm.") or (n == "moegemm" and not dotted_only) for n in names):
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and not dotted_only and node.level == 0:
            module = node.module or ""
            lines += [node.lineno] if module == "moegemm" or module.startswith("moegemm.") else []
    return sorted(lines)


def leftover_imports(package_dir: Path) -> list[str]:
    """`file:line: text` of every absolute import of `moegemm` still in the copy (none may be
    left: it would load the current tree's module into the baseline)."""
    bad = []
    for path in sorted(package_dir.rglob("*.py")):
        text = path.read_text()
        lines = text.splitlines()
        for lineno in _import_lines(text):
            bad.append(f"{path.relative_to(package_dir)}:{lineno}: {lines[lineno - 1].strip()}")
    return bad


def rewrite_package(package_dir: Path) -> int:
    """Rewrites every .py file under package_dir in place; returns how many changed."""
    changed = 0
    for path in sorted(package_dir.rglob("*.py")):
        text = path.read_text()
        if _import_lines(text, dotted_only=True):
            raise ValueError(f"{path}: `import moegemm.x` is not rewritten; use `from` imports")
        new = rewrite_source(text)
        if new != text:
            path.write_text(new)
            changed += 1
    bad = leftover_imports(package_dir)
    if bad:
        raise ValueError("absolute moegemm imports left in the baseline copy:\n" + "\n".join(bad))
    return changed


# ----------------------------------------------------------------------------------------------
# Staging


def _git(repo: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    if proc.returncode != 0:
        raise ValueError(f"git {' '.join(args)} failed: {proc.stderr.decode().strip()}")
    return proc.stdout


def source_digest(*, rev: str | None = None, repo: Path | None = None, source_dir=None) -> str:
    """Identity of the baseline's sources: the git tree of the revision, or a hash of the files
    under source_dir (SOURCE_PATHS only; built files and caches are skipped)."""
    h = hashlib.sha256(f"{REWRITE_VERSION}\0{sysconfig.get_config_var('EXT_SUFFIX')}\0".encode())
    if rev is not None:
        h.update(_git(repo or Path.cwd(), "rev-parse", f"{rev}^{{tree}}"))
        return h.hexdigest()
    root = Path(source_dir)
    for rel in SOURCE_PATHS:
        base = root / rel
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            if _skipped(path):
                continue
            h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _skipped(path: Path) -> bool:
    return (
        "__pycache__" in path.parts
        or path.suffix in (".so", ".pyc")
        or any(part.endswith(".egg-info") for part in path.parts)
    )


def _extract_rev(repo: Path, rev: str, dest: Path) -> None:
    data = _git(repo, "archive", "--format=tar", rev, *SOURCE_PATHS)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        if sys.version_info >= (3, 12):
            tar.extractall(dest, filter="data")
        else:
            tar.extractall(dest)  # our own repository's archive


def _copy_dir(source_dir: Path, dest: Path) -> None:
    for rel in SOURCE_PATHS:
        src = source_dir / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
        elif src.is_dir():
            shutil.copytree(
                src,
                dest / rel,
                ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyc", "*.egg-info"),
            )
        else:
            raise FileNotFoundError(f"baseline source {source_dir} has no {rel}")


@dataclass(frozen=True)
class BaselinePackage:
    """A staged baseline: root/python/moegemm_baseline, root/include, its cache dir."""

    root: Path
    cache_dir: Path
    label: str  # the revision or source dir it came from

    @property
    def python_dir(self) -> Path:
        return self.root / "python"

    @property
    def package_dir(self) -> Path:
        return self.python_dir / PACKAGE

    @property
    def include_dir(self) -> Path:
        return self.root / "include"

    def extension(self) -> Path | None:
        """The built _C, if any."""
        found = sorted(self.package_dir.glob("_C*.so"))
        return found[0] if found else None


def stage(
    work_dir: Path,
    *,
    rev: str | None = None,
    repo: Path | None = None,
    source_dir: Path | None = None,
) -> BaselinePackage:
    """The baseline's sources copied to work_dir/<digest> with the package renamed and rewritten
    (reused when already staged). Exactly one of rev (a git revision of repo) or source_dir (a
    checkout or an extracted `git archive`)."""
    if (rev is None) == (source_dir is None):
        raise ValueError("give exactly one of rev or source_dir")
    if source_dir is not None and not Path(source_dir).is_dir():
        raise FileNotFoundError(f"baseline source dir {source_dir} does not exist")
    work_dir = Path(work_dir).resolve()
    repo = Path(repo or Path.cwd())
    digest = source_digest(rev=rev, repo=repo, source_dir=source_dir)
    label = f"git:{rev}" if rev is not None else str(Path(source_dir).resolve())
    root = work_dir / digest[:16]
    pkg = BaselinePackage(root=root, cache_dir=work_dir / "cache", label=label)
    if (root / "STAGED").is_file():
        return pkg
    work_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="stage.", dir=work_dir))
    try:
        if rev is not None:
            _extract_rev(repo, rev, tmp)
        else:
            _copy_dir(Path(source_dir), tmp)
        (tmp / "python" / "moegemm").rename(tmp / "python" / PACKAGE)
        rewrite_package(tmp / "python" / PACKAGE)
        (tmp / "STAGED").write_text(label + "\n")
        try:
            tmp.rename(root)
        except OSError:  # staged meanwhile by another process: theirs is the same
            if not (root / "STAGED").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return pkg


# ----------------------------------------------------------------------------------------------
# The host extension


def _tool(module: str, attr: str, name: str) -> str | None:
    try:
        mod = importlib.import_module(module)
        candidate = Path(getattr(mod, attr)) / name
        if candidate.exists():
            return str(candidate)
    except (ImportError, AttributeError):
        pass
    return shutil.which(name)


def cmake_command(pkg: BaselinePackage, build_dir: Path) -> list[str]:
    """The configure command: the revision's CMakeLists.txt, the output inside the renamed
    package, the C++ namespace renamed (module docstring), CC/CXX as setup.py honours them."""
    import pybind11

    cmake = _tool("cmake", "CMAKE_BIN_DIR", "cmake")
    if cmake is None:
        raise RuntimeError("cmake not found (pip package or PATH)")
    cxx_flags = " ".join(f for f in (os.environ.get("CXXFLAGS", ""), f"-Dmoegemm={PACKAGE}") if f)
    args = [
        cmake,
        "-S",
        str(pkg.root),
        "-B",
        str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release",
        f"-DMOEGEMM_OUTPUT_DIR={pkg.package_dir}",
        f"-DMOEGEMM_EXT_SUFFIX={sysconfig.get_config_var('EXT_SUFFIX')}",
        f"-DPython3_EXECUTABLE={sys.executable}",
        f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
        f"-DCMAKE_CXX_FLAGS={cxx_flags}",
        "--no-warn-unused-cli",
    ]
    for env_name, var in (("CC", "CMAKE_C_COMPILER"), ("CXX", "CMAKE_CXX_COMPILER")):
        if os.environ.get(env_name):
            args.append(f"-D{var}={os.environ[env_name]}")
    ninja = _tool("ninja", "BIN_DIR", "ninja")
    if ninja is not None:
        args += ["-G", "Ninja", f"-DCMAKE_MAKE_PROGRAM={ninja}"]
    return args


def build_extension(pkg: BaselinePackage, jobs: int | None = None) -> Path:
    """Builds (or finds already built) the baseline's _C inside its package; the log goes to
    root/build/build.log and its tail into the error on failure."""
    found = pkg.extension()
    if found is not None:
        return found
    build_dir = pkg.root / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    log = build_dir / "build.log"
    cmake = cmake_command(pkg, build_dir)
    steps = [
        cmake,
        [cmake[0], "--build", str(build_dir), "--parallel", str(jobs or os.cpu_count())],
    ]
    with log.open("w") as out:
        for cmd in steps:
            out.write("$ " + " ".join(cmd) + "\n")
            out.flush()
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=False)
            if proc.returncode != 0:
                tail = "\n".join(log.read_text().splitlines()[-30:])
                raise RuntimeError(f"building the baseline _C failed ({log}):\n{tail}")
    found = pkg.extension()
    if found is None:
        raise RuntimeError(f"the baseline build produced no _C in {pkg.package_dir} ({log})")
    return found


# ----------------------------------------------------------------------------------------------
# Import


def foreign_switches(environ: dict[str, str] | None = None) -> list[str]:
    """MOEGEMM_* variables that are set and could change one side's picks or kernels."""
    env = os.environ if environ is None else environ
    return sorted(k for k in env if k.startswith("MOEGEMM_") and k not in SHARED_ENV)


def import_baseline(pkg: BaselinePackage) -> ModuleType:
    """`moegemm_baseline`, with its include dir and kernel cache pointed at its own folders
    (set here, not inherited: an exported value could point it at the current tree's)."""
    os.environ[ENV_RENAMES["MOEGEMM_INCLUDE_DIR"]] = str(pkg.include_dir)
    os.environ[ENV_RENAMES["MOEGEMM_CACHE_DIR"]] = str(pkg.cache_dir)
    if str(pkg.python_dir) not in sys.path:
        sys.path.insert(0, str(pkg.python_dir))
    module = importlib.import_module(PACKAGE)
    where = Path(module.__file__).resolve()
    if not where.is_relative_to(pkg.package_dir.resolve()):
        raise ImportError(f"{PACKAGE} imported from {where}, not from {pkg.package_dir}")
    return module


def prepare(
    work_dir: Path,
    *,
    rev: str | None = None,
    repo: Path | None = None,
    source_dir: Path | None = None,
    build: bool = True,
    jobs: int | None = None,
) -> tuple[BaselinePackage, ModuleType]:
    """stage + (build_extension) + import_baseline."""
    pkg = stage(work_dir, rev=rev, repo=repo, source_dir=source_dir)
    if build:
        build_extension(pkg, jobs)
    return pkg, import_baseline(pkg)
