"""Dependencies point one way: heuristics <- jit <- families <- launch <- api <- moe <- ep, and
the warmup above the API and the MoE layer.

The heuristics (types, arch facts, one model per family) import neither the JIT nor the
families. No jit module imports a layer above it (except `__main__`, the entry shim of `python
-m moegemm.jit --warmup`) nor a heuristics submodule, and importing moegemm.jit loads neither
torch nor the layers above it. The families (moegemm.families: one record per arch x operand
type) import nothing above them and no torch. The API uses the heuristics through the package
alone (so their modules can be split), the families and the JIT; nothing in it imports the
warmup, which sits above the API. The launch layer (checks, plans, problem records, device facts)
imports nothing above it; the fused layers (moe, ep) reach the GEMMs through it and take from the
API only the MXFP4 weight format (api/mxfp4_weights.py). Above the families no module tells
families apart by comparing arch names: it asks the registry."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PYTHON_DIR

API_DIR = PYTHON_DIR / "moegemm" / "api"
API_PACKAGE = ("moegemm", "api")
JIT_DIR = PYTHON_DIR / "moegemm" / "jit"
JIT_PACKAGE = ("moegemm", "jit")
FAMILIES_DIR = PYTHON_DIR / "moegemm" / "families"
FAMILIES_PACKAGE = ("moegemm", "families")
HEURISTICS_DIR = PYTHON_DIR / "moegemm" / "heuristics"
HEURISTICS_PACKAGE = ("moegemm", "heuristics")
LAUNCH_DIR = PYTHON_DIR / "moegemm" / "launch"
LAUNCH_PACKAGE = ("moegemm", "launch")
ABOVE_LAUNCH = ("moegemm.api", "moegemm.warmup", "moegemm.moe", "moegemm.ep")
ABOVE_FAMILIES = ("moegemm.launch", *ABOVE_LAUNCH)
FUSED_LAYERS = {"moe": ("moegemm", "moe"), "ep": ("moegemm", "ep")}
API_FORMATS = ("moegemm.api.mxfp4_weights",)  # what the fused layers may take from the API
ABOVE = ("moegemm.families", *ABOVE_FAMILIES)
HEURISTICS_INTERFACE = ("config",)


def _imports(path: Path, package: tuple[str, ...]) -> list[str]:
    """Absolute names of the modules a file of `package` imports (relative imports resolved)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names.append(module)
            names += [f"{module}.{alias.name}" for alias in node.names]
    return names


@pytest.mark.parametrize("path", sorted(API_DIR.glob("*.py")), ids=lambda p: p.name)
def test_api_imports_the_heuristics_package_and_never_the_warmup(path: Path) -> None:
    imported = _imports(path, API_PACKAGE)
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
    names = _imports(LAUNCH_DIR / "plans.py", LAUNCH_PACKAGE)
    assert "moegemm.families.select_config" in names and "moegemm.jit.runtime" in names


@pytest.mark.parametrize("path", sorted(LAUNCH_DIR.glob("*.py")), ids=lambda p: p.name)
def test_launch_imports_nothing_above_it(path: Path) -> None:
    imported = _imports(path, LAUNCH_PACKAGE)
    above = [m for m in imported if m.startswith(ABOVE_LAUNCH)]
    assert above == [], f"{path.name} imports {above}"


@pytest.mark.parametrize(
    "path",
    sorted(p for name in FUSED_LAYERS for p in (PYTHON_DIR / "moegemm" / name).glob("*.py")),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_fused_layers_reach_the_gemms_through_the_launch_layer(path: Path) -> None:
    """moe/ and ep/ plan and launch through moegemm.launch; from the API they take only the
    MXFP4 weight format (no checks, plans or internals of the public functions)."""
    imported = _imports(path, FUSED_LAYERS[path.parent.name])
    api = [m for m in imported if m.startswith("moegemm.api") and not m.startswith(API_FORMATS)]
    assert api == [], f"{path.parent.name}/{path.name} imports API internals {api}"


def test_importing_the_api_loads_no_warmup(subprocess_env: dict[str, str]) -> None:
    code = (
        "import sys, moegemm.api\n"
        "loaded = [m for m in sys.modules if m.startswith('moegemm.warmup')]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], env=subprocess_env, check=True, timeout=300)


@pytest.mark.parametrize("path", sorted(JIT_DIR.glob("*.py")), ids=lambda p: p.name)
def test_jit_imports_nothing_above_it(path: Path) -> None:
    imported = _imports(path, JIT_PACKAGE)
    above = [m for m in imported if m.startswith(ABOVE)]
    if path.name == "__main__.py":
        assert above and all(m.startswith("moegemm.warmup.cli") for m in above), above
    else:
        assert above == [], f"{path.name} imports {above}"
    # `from ..heuristics import X` names X; only a real submodule file is an internal, and the
    # types module (GemmConfig, GemmDesc: what codegen is given) is the interface, not one.
    heuristics_dir = PYTHON_DIR / "moegemm" / "heuristics"
    internals = [
        m
        for m in imported
        if m.startswith("moegemm.heuristics.")
        and m.split(".")[2] not in HEURISTICS_INTERFACE
        and (heuristics_dir / f"{m.split('.')[2]}.py").exists()
    ]
    assert internals == [], f"{path.name} imports heuristics internals {internals}"


def test_import_resolution_sees_relative_imports() -> None:
    """The checker itself: relative imports of the cache resolve to moegemm.jit.*."""
    names = _imports(JIT_DIR / "cache.py", JIT_PACKAGE)
    assert "moegemm.jit.compiler" in names and "moegemm.jit.spec.KernelSpec" in names


def _loaded_above(modules: str, above: tuple[str, ...]) -> str:
    """What a fresh interpreter has loaded of torch and `above` after `import sys, <modules>`."""
    code = (
        f"import sys, {modules}\n"
        f"print(sorted(m for m in sys.modules if m == 'torch' or m.startswith({above!r})))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": str(PYTHON_DIR), "MOEGEMM_LIGHT_IMPORT": "1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_importing_the_jit_loads_nothing_above_it() -> None:
    assert _loaded_above("moegemm.jit, moegemm.jit.cache, moegemm.jit.runtime", ABOVE) == "[]"


@pytest.mark.parametrize("path", sorted(FAMILIES_DIR.glob("*.py")), ids=lambda p: p.name)
def test_families_import_nothing_above_them(path: Path) -> None:
    imported = _imports(path, FAMILIES_PACKAGE)
    above = [m for m in imported if m.startswith(ABOVE_FAMILIES) or m.startswith("torch")]
    assert above == [], f"{path.name} imports {above}"


@pytest.mark.parametrize("path", sorted(HEURISTICS_DIR.glob("*.py")), ids=lambda p: p.name)
def test_heuristics_import_neither_the_jit_nor_the_families(path: Path) -> None:
    imported = _imports(path, HEURISTICS_PACKAGE)
    above = [m for m in imported if m.startswith(("moegemm.jit", *ABOVE))]
    assert above == [], f"{path.name} imports {above}"


def test_importing_the_families_loads_nothing_above_them() -> None:
    assert _loaded_above("moegemm.families", ABOVE_FAMILIES) == "[]"


PRODUCT_FILES = sorted(
    p
    for p in (PYTHON_DIR / "moegemm").rglob("*.py")
    if "testing" not in p.relative_to(PYTHON_DIR).parts
)


@pytest.mark.parametrize("path", PRODUCT_FILES, ids=lambda p: str(p.relative_to(PYTHON_DIR)))
def test_no_product_module_imports_the_test_helpers(path: Path) -> None:
    """moegemm.testing is the tests' and benchmarks' face of moegemm.measure and
    moegemm.moe.reference; the product (the warmup's self-check, EP's reference path) imports
    those directly."""
    package = path.relative_to(PYTHON_DIR).with_suffix("").parts[:-1]
    if path.name == "__init__.py":
        package = path.relative_to(PYTHON_DIR).parts[:-1]
    imported = _imports(path, tuple(package))
    assert [m for m in imported if m.startswith("moegemm.testing")] == []


# Comparing arch names is left to the layers below the registry (the heuristics, the families,
# and the JIT, whose arch parameters are nvcc targets); a layer above asks moegemm.families.
ARCH_NAMES = frozenset({"sm_90a", "sm_100a", "sm_100f"})
BELOW_THE_REGISTRY = ("heuristics", "families", "jit")


def _arch_name_comparisons(source: str) -> list[int]:
    """Lines of `source` comparing anything to an arch name literal ("sm_90a" == x, x in
    ("sm_100f", ...))."""

    def literals(node: ast.expr) -> list[str]:
        elts = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
        return [e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]

    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Compare)
        and any(v in ARCH_NAMES for side in (node.left, *node.comparators) for v in literals(side))
    ]


def test_the_checker_sees_arch_name_comparisons() -> None:
    source = (
        'a = arch.name == "sm_100f"\n'
        'b = "sm_90a" != name\n'
        'c = arch in ("sm_100f", "sm_100a")\n'
        'd = f(arch="sm_90a")\n'
        'e = {"sm_90a": 1}[name]\n'
    )
    assert _arch_name_comparisons(source) == [1, 2, 3]


ABOVE_THE_REGISTRY = [
    p
    for p in PRODUCT_FILES
    if p.relative_to(PYTHON_DIR / "moegemm").parts[0] not in BELOW_THE_REGISTRY
]


@pytest.mark.parametrize("path", ABOVE_THE_REGISTRY, ids=lambda p: str(p.relative_to(PYTHON_DIR)))
def test_no_layer_above_the_registry_compares_arch_names(path: Path) -> None:
    lines = _arch_name_comparisons(path.read_text())
    assert lines == [], f"{path.name} compares arch names on lines {lines}: ask moegemm.families"


def _module_graph() -> tuple[dict[str, set[str]], list[tuple[str, str]]]:
    """(module -> the moegemm modules it imports at load, [(module, target)] of imports inside
    functions). `from pkg import name` counts as pkg.name where that is a module file."""
    root = PYTHON_DIR
    files = {}
    for path in (root / "moegemm").rglob("*.py"):
        parts = path.relative_to(root).with_suffix("").parts
        files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [alias.name for alias in node.names]
        package = module if files[module].name == "__init__.py" else module.rsplit(".", 1)[0]
        base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
        target = ".".join([*base, *([node.module] if node.module else [])])
        subs = [f"{target}.{alias.name}" for alias in node.names]
        return [sub if sub in files else target for sub in subs]

    at_load: dict[str, set[str]] = {module: set() for module in files}
    in_functions = []
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            for sub in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
                if isinstance(sub, (ast.Import, ast.ImportFrom)):
                    at_load[module] |= {t for t in targets(module, sub) if t in files}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)):
                        in_functions += [(module, t) for t in targets(module, sub) if t in files]
    for module, imported in at_load.items():
        imported.discard(module)
    return at_load, [(a, b) for a, b in in_functions if a != b]


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_no_import_cycles_hidden_or_not() -> None:
    """No module imports itself through its load-time imports, and no import inside a function
    closes a cycle (the function-level import that used to hide one: codegen <-> codegen_sm100,
    the MoE layer <-> its MXFP4 half, the two warmup checks)."""
    at_load, in_functions = _module_graph()
    assert [m for m in at_load if m in _reachable(at_load, m)] == []
    every = {module: set(targets) for module, targets in at_load.items()}
    for module, target in in_functions:
        every[module].add(target)
    hidden = sorted({(a, b) for a, b in in_functions if a in _reachable(every, b)})
    assert hidden == []
