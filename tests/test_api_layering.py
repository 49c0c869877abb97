"""Dependencies point one way (issue 16, section 2): the API uses the heuristics (through the
package alone, so their modules can be split) and the JIT; nothing in it imports the warmup,
which sits above the API."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PYTHON_DIR

API_DIR = PYTHON_DIR / "moegemm" / "api"


def _imports(path: Path) -> list[str]:
    """Absolute names of the modules a file imports (relative imports resolved)."""
    package = ["moegemm", "api"]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.append(module)
            names += [f"{module}.{alias.name}" for alias in node.names]
    return names


@pytest.mark.parametrize("path", sorted(API_DIR.glob("*.py")), ids=lambda p: p.name)
def test_api_imports_the_heuristics_package_and_never_the_warmup(path: Path) -> None:
    imported = _imports(path)
    assert [m for m in imported if m.startswith("moegemm.warmup")] == []
    heuristics_dir = PYTHON_DIR / "moegemm" / "heuristics"
    internals = [
        m
        for m in imported
        if m.startswith("moegemm.heuristics.")
        and (heuristics_dir / f"{m.split('.')[2]}.py").exists()
    ]
    assert internals == [], f"{path.name} imports heuristics modules {internals}"


def test_the_checker_sees_relative_imports() -> None:
    names = _imports(API_DIR / "plans.py")
    assert "moegemm.heuristics.select_config" in names and "moegemm.jit.runtime" in names


def test_importing_the_api_loads_no_warmup(subprocess_env: dict[str, str]) -> None:
    code = (
        "import sys, moegemm.api\n"
        "loaded = [m for m in sys.modules if m.startswith('moegemm.warmup')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], env=subprocess_env, check=True, timeout=300)
