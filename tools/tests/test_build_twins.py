"""tools/build_twins.py on the CPU: the baseline packaging (copy, import rewrite, import
beside the current `moegemm`, its heuristics picking configs, its own include and cache dirs,
its `_C` built and loaded next to ours) and the A/B statistics with a fake timer."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tools"))

import ab_timing
import baseline_build as bb
import build_twins as bt
from bf16_cases import Case

BASELINE_REV = "3f8aa66"


def _has_rev(rev: str) -> bool:
    if shutil.which("git") is None:
        return False
    proc = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{rev}^{{commit}}"],
        check=False,
        capture_output=True,
    )
    return proc.returncode == 0


needs_rev = pytest.mark.skipif(not _has_rev(BASELINE_REV), reason=f"no git commit {BASELINE_REV}")


def _clean_env() -> dict[str, str]:
    """The environment without MOEGEMM_* switches (a subprocess imports both packages fully)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("MOEGEMM_")}


# ----------------------------------------------------------------------------------------------
# The import rewrite


def test_rewrite_source_points_imports_at_the_baseline() -> None:
    src = textwrap.dedent(
        """\
        from moegemm.api import warmup_specs
        from moegemm import _C
        import moegemm
        import moegemm as mg
        _PUBLIC = {"bf16_gemm_nt": "moegemm.api"}
        text = resources.files("moegemm").joinpath("data")
        cmd = f"{python} -m moegemm.jit._build_one $in $out"
        root = os.environ.get("MOEGEMM_CACHE_DIR")
        inc = os.environ.get("MOEGEMM_INCLUDE_DIR")
        """
    )
    out = bb.rewrite_source(src)
    assert "from moegemm_baseline.api import warmup_specs" in out
    assert "from moegemm_baseline import _C" in out
    assert "import moegemm_baseline as moegemm\n" in out
    assert "import moegemm_baseline as mg\n" in out
    assert '"moegemm_baseline.api"' in out
    assert 'files("moegemm_baseline")' in out
    assert "-m moegemm_baseline.jit._build_one" in out
    assert '"MOEGEMM_BASELINE_CACHE_DIR"' in out and '"MOEGEMM_BASELINE_INCLUDE_DIR"' in out
    assert 'MOEGEMM_CACHE_DIR"' not in out.replace("BASELINE_CACHE_DIR", "")


def test_rewrite_source_leaves_cxx_names_include_folders_and_messages() -> None:
    src = textwrap.dedent(
        """\
        scheduler = "moegemm::sm90::" + name
        if (candidate / "moegemm").is_dir():
            pass
        raise AttributeError(f"module 'moegemm' has no attribute {name!r}")
        from .heuristics import select_config
        os.environ.get("MOEGEMM_CUTLASS_INCLUDE")
        """
    )
    assert bb.rewrite_source(src) == src


def test_rewrite_package_refuses_dotted_imports_and_reports_leftovers(tmp_path: Path) -> None:
    pkg = tmp_path / "moegemm_baseline"
    pkg.mkdir()
    (pkg / "a.py").write_text("import moegemm.api\n")
    with pytest.raises(ValueError, match="import moegemm.x"):
        bb.rewrite_package(pkg)
    (pkg / "a.py").write_text("from moegemm.api import f\n")
    assert bb.rewrite_package(pkg) == 1
    assert bb.leftover_imports(pkg) == []
    (pkg / "b.py").write_text("x = 1\n    from moegemm import y\n")
    assert bb.leftover_imports(pkg) == ["b.py:2: from moegemm import y"]
    # An import shown in a docstring is no import (the syntax tree decides where it parses).
    (pkg / "b.py").write_text('"""Use:\n\n    import moegemm.integrations.transformers\n"""\n')
    assert bb.rewrite_package(pkg) == 0 and bb.leftover_imports(pkg) == []
    (pkg / "c.py").write_text("def f():\n    import moegemm.api\n")
    with pytest.raises(ValueError, match="import moegemm.x"):
        bb.rewrite_package(pkg)


def test_foreign_switches() -> None:
    env = {"MOEGEMM_CACHE_DIR": "/c", "MOEGEMM_WALK_STRIPES": "0", "MOEGEMM_NVCC": "n", "X": "1"}
    assert bb.foreign_switches(env) == ["MOEGEMM_WALK_STRIPES"]


# ----------------------------------------------------------------------------------------------
# Staging


def _fake_source(root: Path, marker: str = "1") -> Path:
    (root / "python" / "moegemm" / "sub").mkdir(parents=True)
    (root / "python" / "moegemm" / "__init__.py").write_text(f"VALUE = {marker}\n")
    (root / "python" / "moegemm" / "sub" / "__init__.py").write_text("from moegemm import VALUE\n")
    (root / "python" / "moegemm" / "_C.cpython-x.so").write_bytes(b"not ours")
    (root / "python" / "moegemm" / "__pycache__").mkdir()
    (root / "csrc").mkdir()
    (root / "csrc" / "module.cpp").write_text("// nothing\n")
    (root / "include" / "moegemm").mkdir(parents=True)
    (root / "include" / "moegemm" / "a.h").write_text("#pragma once\n")
    (root / "CMakeLists.txt").write_text("# nothing\n")
    return root


def test_stage_from_a_directory(tmp_path: Path) -> None:
    src = _fake_source(tmp_path / "src")
    pkg = bb.stage(tmp_path / "work", source_dir=src)
    assert (pkg.package_dir / "sub" / "__init__.py").read_text() == (
        "from moegemm_baseline import VALUE\n"
    )
    assert (pkg.include_dir / "moegemm" / "a.h").is_file()
    assert pkg.extension() is None  # the checkout's built _C is never copied
    assert not (pkg.package_dir / "__pycache__").exists()
    # Staged once: the same sources give the same folder, changed sources a new one.
    assert bb.stage(tmp_path / "work", source_dir=src).root == pkg.root
    (src / "python" / "moegemm" / "__init__.py").write_text("VALUE = 2\n")
    assert bb.stage(tmp_path / "work", source_dir=src).root != pkg.root
    with pytest.raises(ValueError, match="exactly one"):
        bb.stage(tmp_path / "work")
    with pytest.raises(FileNotFoundError):
        bb.stage(tmp_path / "work", source_dir=tmp_path / "missing")


def test_baseline_source_default_and_dir(tmp_path: Path) -> None:
    assert bt.baseline_source(str(tmp_path)) == {"source_dir": tmp_path}
    assert bt.baseline_source("abc123") == {"rev": "abc123", "repo": bt.REPO}
    pkg = bb.BaselinePackage(root=tmp_path / "staged", cache_dir=tmp_path, label="git:abc123")
    assert bt.baseline_label({"rev": "abc123"}, pkg) == "git:abc123"
    (tmp_path / "REVISION").write_text("3f8aa66\n")  # written beside a `git archive` copy
    assert bt.baseline_label({"source_dir": tmp_path}, pkg) == "3f8aa66"
    default = bt.baseline_source(None)
    if (REPO / ".baseline").is_dir():
        assert default == {"source_dir": REPO / ".baseline"}
    else:
        assert default["rev"] == bt.DEFAULT_REV


IMPORT_CHECK = """
import json, sys
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, {bench!r})
import baseline_build as bb
pkg = bb.stage(Path({work!r}), rev={rev!r}, repo=Path({repo!r}))
mod = bb.import_baseline(pkg)
from moegemm_baseline.heuristics import GemmDesc, arch_for, select_config
from moegemm_baseline.jit import cache, include_tree
desc = GemmDesc("m_grouped_offsets", 35044, 4096, 7168, 32, expected_m=1096)
print(json.dumps({{
    "file": mod.__file__,
    "api": sys.modules["moegemm_baseline.api"].__file__,
    "current": sorted(m for m in sys.modules if m == "moegemm" or m.startswith("moegemm.")),
    "pick": select_config(desc, arch_for("sm_90a")).short_name(),
    "include": str(include_tree.library_include_dir()),
    "cache": str(cache.cache_root()),
    "root": str(pkg.root),
}}))
"""


@needs_rev
def test_baseline_imports_alone_and_picks(tmp_path: Path) -> None:
    """The staged 3f8aa66 imports fully (its API too) without loading any module of the current
    tree, and resolves its own include dir and cache even with the current ones exported."""
    code = IMPORT_CHECK.format(
        bench=str(REPO / "tools"), work=str(tmp_path), rev=BASELINE_REV, repo=str(REPO)
    )
    env = {**_clean_env(), "MOEGEMM_INCLUDE_DIR": str(REPO / "include")}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    root = Path(out["root"])
    assert Path(out["file"]).is_relative_to(root) and Path(out["api"]).is_relative_to(root)
    assert out["current"] == []
    assert out["pick"].startswith("m128n256k64")  # the dsv3 L1 prefill pick at 3f8aa66
    assert Path(out["include"]) == root / "include"
    assert Path(out["cache"]) == tmp_path / "cache"


@needs_rev
def test_picks_cli_runs_on_the_cpu(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "tools" / "build_twins.py"), "--picks", "--quick",
         "--baseline", BASELINE_REV,
         "--work-dir", str(tmp_path), "--json", str(tmp_path / "picks.json")],
        check=False, capture_output=True, text=True, env=_clean_env(), timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr  # 1: some picks differ (reported, not an error)
    assert "picks match (git:3f8aa66, 132 SMs)" in proc.stdout
    rows = json.loads((tmp_path / "picks.json").read_text())
    assert {r["layout"] for r in rows} == set(bt.LAYOUTS)
    assert all(not r["old"].startswith("error") for r in rows)


@pytest.fixture(scope="module")
def built_baseline(tmp_path_factory: pytest.TempPathFactory) -> bb.BaselinePackage:
    if not _has_rev(BASELINE_REV):
        pytest.skip(f"no git commit {BASELINE_REV}")
    pytest.importorskip("pybind11")
    pkg = bb.stage(tmp_path_factory.mktemp("baseline"), rev=BASELINE_REV, repo=REPO)
    bb.build_extension(pkg)  # ~35 s of g++ on two cores
    return pkg


BOTH_C = """
import sys
sys.path.insert(0, {python!r})
from moegemm import _C as new
from moegemm_baseline import _C as old
assert new.__file__ != old.__file__
assert new.Kernel is not old.Kernel
print(new.Kernel.__module__, old.Kernel.__module__, old.get_pdl())
"""


def test_baseline_extension_loads_beside_the_current_one(built_baseline) -> None:
    """Both _C modules in one process: without the namespace rename pybind11 refuses the second
    ('generic_type: type "Kernel" is already registered!')."""
    pytest.importorskip("moegemm._C")
    code = BOTH_C.format(python=str(built_baseline.python_dir))
    env = {**_clean_env(), "MOEGEMM_LIGHT_IMPORT": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["moegemm._C", "moegemm_baseline._C", "False"]
    assert bb.build_extension(built_baseline) == built_baseline.extension()  # reused, not rebuilt


# ----------------------------------------------------------------------------------------------
# Problems and statistics


def test_problems_for_every_layout() -> None:
    contiguous = Case("prefill", 0, "c", "contiguous", 2, 256, 512, [100, 300])
    offs, idx = bt.problems_for(contiguous)
    assert (offs.layout, offs.kind, offs.m, offs.expected_m) == (
        "offs",
        "m_grouped_offsets",
        400,
        200,
    )
    assert (idx.layout, idx.kind, idx.m, idx.expected_m) == (
        "m_indices",
        "m_grouped_contiguous",
        512,
        0,
    )
    masked = Case("masked", 0, "m", "masked", 4, 256, 512, [1, 2, 3, 4], max_m=128, expected_m=300)
    (p,) = bt.problems_for(masked)
    assert (p.kind, p.m, p.expected_m) == ("m_grouped_masked", 128, 128)
    kg = Case("k_grouped", 0, "k", "k_grouped", 3, 1024, 2048, [10, 20, 31])
    (p,) = bt.problems_for(kg)
    assert (p.kind, p.m, p.n, p.k, p.d_dtype, p.with_c) == (
        "k_grouped",
        1024,
        2048,
        21,
        "fp32",
        True,
    )
    (p,) = bt.problems_for(bt.dense_cases()[0])
    assert (p.layout, p.kind, p.m, p.n, p.k) == ("dense", "bf16_gemm_nt", 4096, 4096, 4096)
    with pytest.raises(ValueError, match="unknown layout"):
        bt.problems_for(Case("x", 0, "x", "bogus", 1, 8, 8, [8]))  # fmt: skip


class FakeTimer:
    """Times a fn by calling it: each fn returns its next duration; the call order is kept."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def __call__(self, fn) -> float:
        name, value = fn()
        self.order.append(name)
        return value


def test_interleave_alternates_in_abba_order() -> None:
    new_times = iter([10.0, 11.0, 10.5, 30.0])
    old_times = iter([10.0, 10.0, 10.0, 10.0])
    timer = FakeTimer()
    samples = ab_timing.interleave(
        timer, {"new": lambda: ("new", next(new_times)), "old": lambda: ("old", next(old_times))}, 4
    )
    assert timer.order == ["new", "old", "old", "new", "new", "old", "old", "new"]
    assert samples == {"new": [10.0, 11.0, 10.5, 30.0], "old": [10.0] * 4}
    with pytest.raises(ValueError):
        ab_timing.interleave(timer, {"a": lambda: ("a", 1.0)}, 0)


def test_compare_uses_medians_and_the_spread_of_either_side() -> None:
    res = ab_timing.compare([10.0, 11.0, 10.5, 30.0], [10.0, 10.0, 10.0, 10.0])
    assert res["new_us"] == 10.75 and res["old_us"] == 10.0
    assert res["ratio"] == pytest.approx(1.075)
    assert res["noise"] == pytest.approx(2.0)  # 30 / 10 - 1: one bad sample widens it
    assert res["within_noise"]
    tight = ab_timing.compare([10.3, 10.31, 10.29], [10.0, 10.01, 10.0])
    assert tight["ratio"] == pytest.approx(1.03, abs=1e-3) and not tight["within_noise"]


def _row(layout: str, ratio: float | None, same: bool = True, errors=None, within=True) -> dict:
    row = {"problem": f"p [{layout}]", "layout": layout, "same_pick": same, "errors": errors or {}}
    if ratio is not None:
        row.update(ratio=ratio, within_noise=within, new_us=ratio, old_us=1.0, noise=0.01)
    return row


def test_summarize_geomean_per_layout_and_target() -> None:
    rows = [
        _row("offs", 1.02),
        _row("offs", 1.0 / 1.02),
        _row("masked", 1.03, within=False),
        _row("masked", 1.0),
        _row("dense", 1.0, same=False),
        _row("k_grouped", None, errors={"exception": "boom"}),
    ]
    s = ab_timing.summarize(rows)
    assert s["offs"]["geomean"] == pytest.approx(1.0) and s["offs"]["pass"]
    assert s["masked"]["geomean"] == pytest.approx(math.sqrt(1.03))
    assert not s["masked"]["pass"] and s["masked"]["moved"] == 1
    assert s["dense"]["pick_mismatch"] == 1 and s["dense"]["pass"]
    assert s["k_grouped"]["timed"] == 0 and not s["k_grouped"]["pass"]
    assert s["k_grouped"]["check_failed"] == 1
    assert "m_indices" not in s
    assert s["all"]["problems"] == 6 and s["all"]["timed"] == 5
    table = ab_timing.format_summary(s)
    assert table.splitlines()[1].startswith("dense") and "MISS" in table and "PASS" in table
    line = ab_timing.format_row(_row("offs", 1.05, same=False, within=False) | {"new_pick": "a"})
    assert "1.0500" in line and "a / ?" in line and "*" in line


# ----------------------------------------------------------------------------------------------
# The whole per-problem flow (inputs, checks, bitwise comparison, interleaved timing) on the CPU,
# with two fake packages computing in FP32


def _fake_package(name: str, state: dict, skew: float = 0.0) -> SimpleNamespace:
    """moegemm's five public GEMMs in FP32 on the CPU; skew > 0 perturbs the m-grouped outputs
    (a kernel that is off by rounding: the bitwise check must see it, calc_diff must not)."""
    import torch

    def mm(a, b):
        state["last"] = name
        return a.float() @ b.float().t()

    def dense(a, b, d):
        d.copy_(mm(a, b))

    def contiguous(a, b, d, m_indices=None, *, offs=None):
        for g in range(b.shape[0]):
            if offs is not None:
                rows = torch.arange(int(offs[g - 1]) if g else 0, int(offs[g]))
            else:
                rows = (m_indices == g).nonzero().flatten()
            d[rows] = (mm(a[rows], b[g]) * (1 + skew)).to(d.dtype)

    def masked(a, b, d, masked_m, expected_m):
        for g, r in enumerate(masked_m.tolist()):
            d[g, :r] = mm(a[g, :r], b[g])

    def k_grouped(a, b, d, offs, c=None):
        state["last"] = name
        start = 0
        for g, end in enumerate(offs.tolist()):
            acc = a[start:end].float().t() @ b[start:end].float()
            d[g] = acc + (c[g] if c is not None else 0)
            start = end

    return SimpleNamespace(
        __name__=name,
        bf16_gemm_nt=dense,
        m_grouped_bf16_gemm_nt_contiguous=contiguous,
        m_grouped_bf16_gemm_nt_masked=masked,
        k_grouped_bf16_gemm_tn_contiguous=k_grouped,
    )


class FakeSide:
    def __init__(self, label: str, module, pick: str) -> None:
        self.label, self.module, self.name = label, module, pick

    def pick(self, problem, num_sms):
        return SimpleNamespace(short_name=lambda: self.name)


FLOW_CASES = [
    Case("dense", 0, "dense:x", "dense", 1, 40, 64, [33]),
    Case("prefill", 0, "c", "contiguous", 3, 64, 64, [5, 0, 130]),
    Case("masked", 0, "m", "masked", 2, 32, 64, [3, 16], max_m=16, expected_m=10),
    Case("k_grouped", 0, "k", "k_grouped", 2, 32, 48, [7, 9]),
]


@pytest.mark.parametrize("skew", [0.0, 0.01])
def test_run_problem_checks_and_times_both_sides(monkeypatch: pytest.MonkeyPatch, skew) -> None:
    import torch

    monkeypatch.setattr(bt, "DEVICE", "cpu")
    torch.manual_seed(0)
    state: dict = {}
    new = FakeSide("new", _fake_package("new", state), "cfgA")
    old = FakeSide("old", _fake_package("old", state, skew), "cfgA")
    other = FakeSide("old", _fake_package("old", state, skew), "cfgB")

    def timer(fn) -> float:
        fn()
        return {"new": 10.0, "old": 12.5}[state["last"]]

    rows = []
    for case in FLOW_CASES:
        runners = bt.runners_for(case)
        for p in bt.problems_for(case):
            rows.append(bt.run_problem(p, runners[p.layout], new, old, timer, 2, 132))
            if p.layout == "offs":
                rows.append(bt.run_problem(p, runners[p.layout], new, other, timer, 2, 132))
    layouts = [r["layout"] for r in rows]
    assert layouts == ["dense", "offs", "offs", "m_indices", "masked", "k_grouped"]
    for r in rows:
        assert r["ratio"] == pytest.approx(0.8) and r["noise"] == 0.0, r
        assert r["calc_diff_new"] < 1e-5
    skewed = {"offs", "m_indices"} if skew else set()
    for r in rows:
        if not r["same_pick"]:  # different configs: no bitwise check, FP32 reference only
            assert "bitwise" not in r and r["old_pick"] == "cfgB"
            continue
        assert r["bitwise"] == (r["layout"] not in skewed), r
        assert ("bitwise" in r["errors"]) == (r["layout"] in skewed)
        # A 1% skew is far beyond rounding: calc_diff (~1e-4) flags the old side too.
        assert ("check" in r["errors"]) == (r["layout"] in skewed)


def test_run_all_makes_inputs_once_per_case_and_survives_a_failing_case(monkeypatch) -> None:
    monkeypatch.setattr(bt, "DEVICE", "cpu")
    state: dict = {}
    new = FakeSide("new", _fake_package("new", state), "cfg")
    old = FakeSide("old", _fake_package("old", state), "cfg")
    made = []
    real = bt.runners_for

    def runners_for(case):
        made.append(case.name)
        if case.layout == "masked":
            raise MemoryError("out of memory")
        return real(case)

    monkeypatch.setattr(bt, "runners_for", runners_for)

    def timer(fn) -> float:
        fn()
        return {"new": 9.95, "old": 10.0}[state["last"]]

    problems = [(c, p) for c in FLOW_CASES for p in bt.problems_for(c)]
    lines: list[str] = []
    rows = bt.run_all(problems, new, old, timer, 3, 132, echo=lines.append)
    assert made == ["dense:x", "c", "m", "k"]  # the contiguous case's two layouts share inputs
    assert len(rows) == len(lines) == 5
    (masked,) = [r for r in rows if r["layout"] == "masked"]
    assert masked["errors"] == {"exception": "inputs: MemoryError: out of memory"}
    summary = ab_timing.summarize(rows)
    assert summary["masked"]["timed"] == 0 and not summary["masked"]["pass"]
    assert summary["offs"]["geomean"] == pytest.approx(0.995) and summary["offs"]["pass"]
    assert summary["all"]["check_failed"] == 1 and summary["all"]["pick_mismatch"] == 0


@pytest.mark.gpu
def test_gpu_flow_with_the_current_package_as_both_sides() -> None:
    """The real GPU path (inputs, checks, bench_common.Timer) with moegemm on both sides: the same
    picks, bitwise equal outputs, FP32-correct, and a ratio near 1."""
    import bench_common
    import torch

    import moegemm

    side = bt.Side("new", moegemm)
    twin = bt.Side("old", moegemm)
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    cases = [
        Case("dense", 0, "dense:small", "dense", 1, 256, 512, [200]),
        Case("prefill", 0, "contig", "contiguous", 4, 256, 512, [70, 0, 300, 129]),
        Case("masked", 0, "masked", "masked", 3, 256, 512, [5, 64, 0], max_m=64, expected_m=23),
        Case("k_grouped", 0, "kgrp", "k_grouped", 3, 256, 512, [128, 0, 384]),
    ]
    problems = [(c, p) for c in cases for p in bt.problems_for(c)]
    rows = bt.run_all(problems, side, twin, bench_common.Timer(budget_ms=5.0), 2, num_sms,
                      echo=lambda line: None)  # fmt: skip
    assert [r["layout"] for r in rows] == ["dense", "offs", "m_indices", "masked", "k_grouped"]
    for r in rows:
        assert r["errors"] == {}, r
        assert r["same_pick"] and r["bitwise"]
        assert r["calc_diff_new"] < 1e-5
        assert 0.5 < r["ratio"] < 2.0


# ----------------------------------------------------------------------------------------------
# FP8 x FP4 (on request: --layouts fp4_masked,fp4_offs)


def _fp4_case(layout: str, rows: list[int], **kw):
    from fp8_fp4_cases import Fp4Case

    case = Fp4Case("sweep", 0, f"fp4 {layout}", layout, len(rows), 64, 160, rows, rows_nominal=8.0)
    for key, value in kw.items():
        setattr(case, key, value)
    return case


def test_fp4_problems_and_case_selection() -> None:
    (p,) = bt.problems_for(_fp4_case("masked", [3, 0, 9], max_m=16, expected_m=40))
    assert (p.layout, p.kind, p.m, p.expected_m, p.ab_dtype, p.weights) == (
        "fp4_masked", "m_grouped_masked", 16, 16, "fp8_fp4", "prepared",
    )  # fmt: skip
    (p,) = bt.problems_for(_fp4_case("contiguous", [3, 0, 9]))
    assert (p.layout, p.kind, p.m, p.num_groups, p.expected_m) == (
        "fp4_offs", "m_grouped_offsets", 12, 3, 4,
    )  # fmt: skip
    bf16_only = bt.select_cases(bt.parse_args([]))
    assert bf16_only and not any(bt.is_fp4(c) for c in bf16_only)
    fp4_only = bt.select_cases(bt.parse_args(["--layouts", "fp4_masked,fp4_offs"]))
    assert fp4_only and all(bt.is_fp4(c) for c in fp4_only)
    assert {c.rows_nominal for c in fp4_only if c.layout == "contiguous"} == {256, 1024}
    with pytest.raises(SystemExit):
        bt.parse_args(["--layouts", "fp4_dense"])


def _fake_fp4_package(name: str, state: dict, skew: float = 0.0) -> SimpleNamespace:
    """moegemm's FP8 x FP4 m-grouped functions in FP32 on the CPU; prepare_mxfp4_weights
    returns its own wrapper (each package prepares its weights)."""
    from moegemm.quant import dequantize_mxfp4

    def prepare(b, sfb):
        return SimpleNamespace(owner=name, b=b, sfb=sfb)

    def mm(a, w, grp):
        assert w.owner == name, "a package must run on the weights it prepared"
        state["last"] = name
        a8, sfa = a
        x = a8.float() * sfa.repeat_interleave(128, dim=-1)[..., : a8.shape[-1]]
        return x @ dequantize_mxfp4(w.b[grp], w.sfb[grp]).float().t() * (1 + skew)

    def masked(a, w, d, masked_m, expected_m):
        for g, r in enumerate(masked_m.tolist()):
            d[g, :r] = mm((a[0][g, :r], a[1][g, :r]), w, g)

    def contiguous(a, w, d, m_indices=None, *, offs=None):
        start = 0
        for g, end in enumerate(offs.tolist()):
            d[start:end] = mm((a[0][start:end], a[1][start:end]), w, g)
            start = end

    return SimpleNamespace(
        __name__=name,
        prepare_mxfp4_weights=prepare,
        m_grouped_fp8_fp4_gemm_nt_masked=masked,
        m_grouped_fp8_fp4_gemm_nt_contiguous=contiguous,
    )


@pytest.mark.parametrize("skew", [0.0, 0.01])
def test_fp4_flow_checks_and_times_both_sides(monkeypatch: pytest.MonkeyPatch, skew) -> None:
    import torch

    monkeypatch.setattr(bt, "DEVICE", "cpu")
    torch.manual_seed(0)
    state: dict = {}
    new = FakeSide("new", _fake_fp4_package("new", state), "cfg")
    old = FakeSide("old", _fake_fp4_package("old", state, skew), "cfg")

    def timer(fn) -> float:
        fn()
        return {"new": 8.0, "old": 10.0}[state["last"]]

    cases = [_fp4_case("masked", [3, 0, 16], max_m=16, expected_m=8),
             _fp4_case("contiguous", [5, 0, 11])]  # fmt: skip
    rows = []
    for case in cases:
        runners = bt.fp4_runners_for(case)
        for p in bt.problems_for(case):
            rows.append(bt.run_problem(p, runners[p.layout], new, old, timer, 2, 132))
    assert [r["layout"] for r in rows] == ["fp4_masked", "fp4_offs"]
    for r in rows:
        assert r["ratio"] == pytest.approx(0.8) and r["calc_diff_new"] < 1e-5, r
        assert r["bitwise"] == (skew == 0.0) and ("check" in r["errors"]) == (skew != 0.0), r
    summary = ab_timing.summarize(rows)
    assert summary["fp4_masked"]["timed"] == 1 and "masked" not in summary
