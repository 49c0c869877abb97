"""python/moegemm/_C.pyi declares exactly what moegemm._C exposes: the same module functions,
attributes and classes, the same methods and properties per class, and the same parameters
(names, order, which have defaults, which are positional-only); and it is what
tools/gen_c_stub.py generates from the bindings. Runs without a GPU: _C imports without a
driver."""

from __future__ import annotations

import ast
import glob
import importlib
import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
PYBIND_INTERNALS = {"_pybind11_conduit_v1_"}


def _load_extension() -> ModuleType | None:
    """moegemm._C, also while moegemm/__init__.py does not import cleanly (it is developed
    separately from the extension)."""
    try:
        return importlib.import_module("moegemm._C")
    except ImportError:
        pass
    for path in sorted(glob.glob(str(REPO / "python" / "moegemm" / "_C*.so"))):
        spec = importlib.util.spec_from_file_location("moegemm._C", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    return None


C = _load_extension()
if C is None:
    pytest.skip("moegemm._C is not built", allow_module_level=True)

# The stub next to the module that was loaded (an installed package ships it as package data).
STUB = Path(C.__file__).with_name("_C.pyi")
if not STUB.exists():
    STUB = REPO / "python" / "moegemm" / "_C.pyi"


# A parameter: (name, has a default, positional-only). pybind names unnamed arguments argN; a
# `/` in its signature line ends the positional-only ones.
Param = tuple[str, bool, bool]


def _split_top_level(text: str) -> list[str]:
    """Splits a parameter list at the commas outside brackets (types like dict[str, int])."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:])
    return [p.strip() for p in parts]


def runtime_params(func: object) -> list[Param]:
    """The parameters of a pybind11 function, from the signature line pybind11 puts first in
    its docstring: `name(a: int, /, b: int = 0) -> None`. An unnamed argument (argN) counts as
    positional-only: it can only be passed by position."""
    doc = (getattr(func, "__doc__", None) or "").strip()
    match = re.match(r"(\w+)\((.*)\) -> ", doc.splitlines()[0] if doc else "")
    assert match, f"no pybind11 signature line in {doc[:80]!r}"
    parts = _split_top_level(match.group(2))
    posonly_end = parts.index("/") if "/" in parts else 0
    params = []
    for i, part in enumerate(parts):
        name = part.split(":", 1)[0].strip()
        if name not in ("self", "/", "*"):
            unnamed = re.fullmatch(r"arg\d+", name) is not None
            params.append((name, " = " in part, unnamed or i < posonly_end))
    return params


def stub_params(node: ast.FunctionDef, method: bool) -> list[Param]:
    args = node.args
    positional = [(a, True) for a in args.posonlyargs] + [(a, False) for a in args.args]
    first_default = len(positional) - len(args.defaults)
    params = [(a.arg, i >= first_default, posonly) for i, (a, posonly) in enumerate(positional)]
    params += [(a.arg, d is not None, False) for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    assert args.vararg is None and args.kwarg is None, f"{node.name}: *args/**kwargs in the stub"
    return params[1:] if method else params


def params_agree(runtime: list[Param], stub: list[Param]) -> bool:
    """Same count, order, defaults and positional-only parameters; the same names, but where
    the binding leaves an argument unnamed (argN), which the stub may name descriptively."""
    if len(runtime) != len(stub):
        return False
    for (r_name, r_default, r_posonly), (s_name, s_default, s_posonly) in zip(runtime, stub):
        if r_default != s_default or r_posonly != s_posonly:
            return False
        if r_name != s_name and re.fullmatch(r"arg\d+", r_name) is None:
            return False
    return True


def runtime_members(cls: type) -> dict[str, str]:
    """Name -> "method", "property" or "attribute" (a class attribute, e.g. a launcher's
    bind_args) of what the binding defined on the class itself."""
    members = {}
    for name, value in vars(cls).items():
        if name in PYBIND_INTERNALS or (name.startswith("__") and not callable(value)):
            continue  # __doc__, __module__ and pybind11's own helpers
        if isinstance(value, property):
            members[name] = "property"
        else:
            members[name] = "method" if callable(value) else "attribute"
    return members


def stub_members(node: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AnnAssign]:
    members = {}
    for item in node.body:
        if isinstance(item, ast.FunctionDef):
            members[item.name] = item
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            members[item.target.id] = item
        else:
            assert isinstance(item, ast.Expr), f"{node.name}: methods, attributes, a docstring"
    return members


def is_property(node: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)


def parse_stub(text: str) -> dict[str, ast.AST]:
    declared = {}
    for node in ast.parse(text).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            declared[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            declared[node.target.id] = node
        else:
            assert isinstance(node, (ast.Expr, ast.Import, ast.ImportFrom)), ast.dump(node)
    return declared


def stub_mismatches(module: ModuleType, stub_text: str) -> list[str]:
    """Every difference between the stub and the module, one line each."""
    declared = parse_stub(stub_text)
    exposed = {name for name in dir(module) if not name.startswith("__")}
    problems = [f"{n}: in _C, not in the stub" for n in sorted(exposed - declared.keys())]
    problems += [f"{n}: in the stub, not in _C" for n in sorted(declared.keys() - exposed)]
    for name in sorted(exposed & declared.keys()):
        value, node = getattr(module, name), declared[name]
        if isinstance(node, ast.ClassDef):
            if not isinstance(value, type):
                problems.append(f"{name}: a class in the stub, not in _C")
                continue
            have, want = runtime_members(value), stub_members(node)
            problems += [f"{name}.{m}: not in the stub" for m in sorted(have.keys() - want.keys())]
            problems += [f"{name}.{m}: not in _C" for m in sorted(want.keys() - have.keys())]
            for member in sorted(have.keys() & want.keys()):
                method = want[member]
                if have[member] == "attribute" or isinstance(method, ast.AnnAssign):
                    problems += attribute_mismatch(
                        f"{name}.{member}", getattr(value, member), method
                    )
                elif (have[member] == "property") != is_property(method):
                    problems.append(f"{name}.{member}: property in one, method in the other")
                elif have[member] == "method":
                    got = runtime_params(getattr(value, member))
                    if not params_agree(got, stub_params(method, method=True)):
                        problems.append(f"{name}.{member}: parameters differ, _C has {got}")
        elif isinstance(node, ast.FunctionDef):
            if isinstance(value, type) or not callable(value):
                problems.append(f"{name}: a function in the stub, not in _C")
            elif not params_agree(runtime_params(value), stub_params(node, method=False)):
                problems.append(f"{name}: parameters differ, _C has {runtime_params(value)}")
        else:
            annotation = ast.unparse(node.annotation)
            if callable(value) or type(value).__name__ != annotation:
                problems.append(f"{name}: declared {annotation}, _C has {type(value).__name__}")
    return problems


def attribute_mismatch(name: str, value: object, node: ast.AST) -> list[str]:
    """A class attribute: a tuple of names in _C, declared ClassVar[tuple[str, ...]]."""
    if not isinstance(node, ast.AnnAssign):
        return [f"{name}: an attribute in _C, a method in the stub"]
    annotation = ast.unparse(node.annotation)
    names = isinstance(value, tuple) and all(isinstance(v, str) for v in value)
    if callable(value) or not names or annotation != "ClassVar[tuple[str, ...]]":
        return [f"{name}: declared {annotation}, _C has {type(value).__name__}"]
    return []


def test_stub_matches_the_extension():
    assert stub_mismatches(C, STUB.read_text()) == []


def test_stub_declares_the_launchers_plans_use():
    # python/moegemm/launch/plans.py builds these with the config's boxes as keywords, binds each
    # plan's integers by the names in bind_args and reads num_blocks.
    declared = parse_stub(STUB.read_text())
    for name in ("Bf16GemmLauncher", "Bf16KGroupedLauncher"):
        members = stub_members(declared[name])
        assert {"__init__", "__call__", "bind", "bind_args", "num_blocks"} <= members.keys()
        assert ("store_box_d", True, False) in stub_params(members["__init__"], method=True)


@pytest.mark.parametrize(
    "edit, expected",
    [
        # A function the extension does not have.
        (lambda s: s + "\ndef launch_sm90_bf16_gemm(x: int) -> None: ...\n", "not in _C"),
        # A function dropped from the stub.
        (lambda s: s.replace("def get_pdl() -> bool:", "def _gone() -> bool:"), "get_pdl: in _C"),
        # A renamed parameter.
        (lambda s: s.replace("swizzle_bytes: int,", "swizzle: int,"), "encode_tma_desc: param"),
        # A bound integer too few (bind takes the call's ten integers).
        (lambda s: s.replace("        ldc: int,\n        /,\n", "        /,\n", 1), "bind: param"),
        # A dropped default.
        (lambda s: s.replace("swizzle_d: int = 0", "swizzle_d: int", 1), "__init__: param"),
        # A call argument too many (the binding has 16 for the m-grouped launcher).
        (
            lambda s: s.replace(
                "        stream: int,\n", "        x: int,\n        stream: int,\n", 1
            ),
            "__call__: param",
        ),
        # Positional-only call arguments declared as keyword-capable.
        (
            lambda s: s.replace("        stream: int,\n        /,\n", "        stream: int,\n", 1),
            "__call__: param",
        ),
        # A renamed launcher argument (the bindings name them: kArgNames, csrc/launcher.h).
        (
            lambda s: s.replace("        ldb_group: int,\n", "        ldb_grp: int,\n", 1),
            "__call__: param",
        ),
        # Keyword-capable parameters declared positional-only.
        (
            lambda s: s.replace(
                "        cluster_n: int,\n        *,\n",
                "        cluster_n: int,\n        /,\n        *,\n",
                1,
            ),
            "__init__: param",
        ),
        # A property declared as a method.
        (lambda s: s.replace("    @property\n    def num_regs", "    def num_regs"), "property"),
        # A property the class does not have.
        (lambda s: s.replace("def num_regs(self)", "def regs(self)"), "Kernel.num_regs: not in"),
        # A wrongly typed attribute.
        (lambda s: s.replace("DRIVER_API_VERSION: int", "DRIVER_API_VERSION: str"), "declared"),
    ],
)
def test_a_drifted_stub_is_reported(edit, expected):
    text = STUB.read_text()
    edited = edit(text)
    assert edited != text, "the edit did not apply: update this test with the stub"
    problems = stub_mismatches(C, edited)
    assert any(expected in line for line in problems), problems


def _load_generator() -> ModuleType:
    """tools/gen_c_stub.py, by path (tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("gen_c_stub", REPO / "tools" / "gen_c_stub.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_stub_is_the_generated_one():
    # The checked-in stub is tools/gen_c_stub.py's output for this build: edit the bindings'
    # names and docstrings (csrc/), then rerun the generator.
    generated = _load_generator().generate(C)
    assert STUB.read_text() == generated, "stale stub: run python3 tools/gen_c_stub.py"
    assert stub_mismatches(C, generated) == []


def test_generator_check_reports_a_drift(tmp_path, monkeypatch, capsys):
    gen = _load_generator()
    monkeypatch.setattr(gen, "load_extension", lambda: C)
    out = tmp_path / "_C.pyi"
    out.write_text(gen.generate(C))
    assert gen.main(["--check", "--out", str(out)]) == 0
    out.write_text(gen.generate(C).replace("def get_pdl", "def get_pdl_"))
    assert gen.main(["--check", "--out", str(out)]) == 1
    assert "tools/gen_c_stub.py" in capsys.readouterr().out
