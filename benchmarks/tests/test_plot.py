"""benchmarks/plot.py: each benchmark's JSON is recognized, its series, labels and ceilings are
the records' numbers (pure extraction, no matplotlib), every figure kind renders to a PNG, and a
file it cannot use stops it with one line and exit 2.

The fixtures in data/ were written through the benchmarks' own record code (bench_report /
fp8_fp4_cases / moe_cases add_metrics and summaries, the main()s' top-level layout) with fake
timings; test_fixtures_are_the_benchmarks_records re-derives their metrics with that code."""

from __future__ import annotations

import copy
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(BENCH))  # benchmarks/

import plot

DATA = Path(__file__).resolve().parent / "data"
FIXTURES = {
    "bf16": "bench_bf16.json",
    "fp8_fp4": "bench_fp8_fp4.json",
    "moe": "bench_moe.json",
    "dense": "bench_bf16_gemm.json",
}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def fixture(kind: str) -> dict:
    return json.loads((DATA / FIXTURES[kind]).read_text())


def by_name(figures: list[plot.Figure]) -> dict[str, plot.Figure]:
    return {f.name: f for f in figures}


def labels(panel: plot.Panel) -> list[str]:
    return [s.label for s in panel.series]


def series(panel: plot.Panel, label: str) -> plot.Series:
    return next(s for s in panel.series if s.label == label)


def close(points: list[tuple[float, float]], want: list[tuple[float, float]]) -> bool:
    return len(points) == len(want) and all(
        math.isclose(x, wx) and math.isclose(y, wy) for (x, y), (wx, wy) in zip(points, want)
    )


def test_detects_each_benchmark_and_refuses_others() -> None:
    for kind in FIXTURES:
        assert plot.detect(fixture(kind)) == kind
    for other in ({}, {"rows": []}, {"rows": [{"ranks": 2}], "verdicts": []}, {"cases": [1]}):
        with pytest.raises(plot.PlotError, match="not a result of"):
            plot.detect(other)
    broken = fixture("moe")
    del broken["rows"][0]["model"]  # recognized by its first record, then malformed
    broken["rows"] = broken["rows"][1:] + [{"tokens": 1}]
    with pytest.raises(plot.PlotError, match="malformed moe result"):
        plot.figures_for(broken)


def test_importing_the_helpers_needs_no_matplotlib() -> None:
    code = "import sys, plot; assert 'matplotlib' not in sys.modules, 'imported'"
    subprocess.run([sys.executable, "-c", code], cwd=BENCH, check=True)


def test_bf16_series_are_the_records_rates() -> None:
    data = fixture("bf16")
    figs = by_name(plot.figures_for(data))
    assert list(figs) == [
        "bf16-contiguous-n4096-k7168",
        "bf16-masked-n7168-k2048",
        "bf16-k_grouped-n4096-k7168",
    ]
    contiguous = figs["bf16-contiguous-n4096-k7168"]
    assert contiguous.title.startswith("BF16 m-grouped contiguous, N4096 K7168 (G 32)")
    assert "GPU NVIDIA H200 | 2026-12-04 10:00 UTC | commit abc1234" in contiguous.title
    by_bytes, by_flops = contiguous.panels
    assert labels(by_bytes) == [
        "moegemm offs", "moegemm m_indices", "torch._grouped_mm", "torch.mm per expert",
        "ours: failed check",
    ]  # fmt: skip
    # The run-median ceilings, the ones the headline shares use.
    assert [c.value for c in by_bytes.ceilings] == [4245.0]
    assert [c.value for c in by_flops.ceilings] == [701.0]
    assert "run median" in by_bytes.ceilings[0].label and not by_flops.note
    recs = [r for r in data["cases"] if r["layout"] == "contiguous"]
    good = [r for r in recs if r.get("ours_us") and not r["errors"]]
    wrong = [r for r in recs if "check" in r["errors"]]
    assert len(good) == 3 and len(wrong) == 1 and len(recs) == 5  # and one that raised
    assert "not timed: 1 case" in by_bytes.note

    def pts(rs: list[dict], col: str, peer: str = "ours_us") -> list[tuple[float, float]]:
        return sorted(
            (r["total_rows"] / r["num_groups"], r[col] * r["ours_us"] / r[peer]) for r in rs
        )

    assert close(series(by_bytes, "moegemm offs").points, pts(good, "gbps_weights"))
    assert close(series(by_flops, "moegemm offs").points, pts(good, "tflops"))
    assert close(series(by_flops, "ours: failed check").points, pts(wrong, "tflops"))
    # A peer on the same work: its rate is ours × ours µs / its µs (the wrong row's too).
    assert close(
        series(by_flops, "torch._grouped_mm").points, pts(good + wrong, "tflops", "torch_us")
    )
    masked = figs["bf16-masked-n7168-k2048"]
    assert labels(masked.panels[0]) == [
        "moegemm masked", "torch._grouped_mm (valid rows)", "torch.bmm (padded)",
        "torch.mm per expert",
    ]  # fmt: skip
    assert [x for x, _ in series(masked.panels[0], "moegemm masked").points] == [8.0, 31.4375, 64.0]
    k_grouped = figs["bf16-k_grouped-n4096-k7168"]
    assert k_grouped.panels[0].ylabel.startswith("operand bytes")
    kg = [r for r in data["cases"] if r["layout"] == "k_grouped"]
    assert close(series(k_grouped.panels[0], "moegemm k-grouped").points, pts(kg, "gbps_all"))


def test_fp8_fp4_series_per_layout_with_the_in_run_peers() -> None:
    data = fixture("fp8_fp4")
    figs = by_name(plot.figures_for(data))
    assert list(figs) == ["fp8_fp4-n7168-k2048", "fp8_fp4-n2880-k2880"]
    dsv3 = figs["fp8_fp4-n7168-k2048"]
    assert "dsv3 L2, N7168 K2048 (G 32)" in dsv3.title and "commit abc1234" in dsv3.title
    by_bytes, by_flops = dsv3.panels
    names = labels(by_flops)
    for layout in ("masked", "offs", "m_indices"):
        assert f"moegemm FP8 x FP4 prepared [{layout}]" in names
        assert f"moegemm FP8 x FP4 raw [{layout}]" in names
        assert f"moegemm BF16 [{layout}]" in names
    # DeepGEMM has no packed layout; torch FP8 is one peer per case, whatever the layout.
    assert "DeepGEMM FP8 [masked]" in names and "DeepGEMM FP8 [m_indices]" in names
    assert "DeepGEMM FP8 [offs]" not in names and "torch FP8 rowwise" in names
    torch_fp8 = series(by_flops, "torch FP8 rowwise")
    assert [x for x, _ in torch_fp8.points] == [1.0, 8.0, 256.0, 256.0, 1024.0]
    masked = [r for r in data["rows"] if r["layout"] == "masked" and r["n"] == 7168]
    want = sorted((r["rows_nominal"], r["gbps_fp4"]) for r in masked)
    assert close(series(by_bytes, "moegemm FP8 x FP4 prepared [masked]").points, want)
    dg = sorted((r["rows_nominal"], r["tflops"] * r["x_dg_inrun"] ** -1) for r in masked)
    assert close(series(by_flops, "DeepGEMM FP8 [masked]").points, dg)
    # The copy median is the run's ceiling; no cuBLAS ceiling is measured by this benchmark.
    assert [c.value for c in by_bytes.ceilings] == [data["ceilings"]["copy_gbps_median"]]
    assert by_flops.ceilings == [] and "not in this JSON" in by_flops.note


def test_moe_series_roofline_and_unknown_run() -> None:
    data = fixture("moe")
    figs = by_name(plot.figures_for(data))
    assert list(figs) == ["moe-bf16-mixtral-8x7b", "moe-bf16-qwen3-30b-a3b"]
    qwen = figs["moe-bf16-qwen3-30b-a3b"]
    # A bench_moe.py result from before it recorded GPU, date and commit: said so, not guessed.
    assert "GPU unknown | date unknown | commit unknown" in qwen.title
    times, fractions = qwen.panels
    assert labels(times) == [
        "moegemm fused_moe", "torch composition", "moegemm composition", "roofline bound",
    ]  # fmt: skip
    assert times.ylog and "T2048" in times.note  # the row that failed has no point
    rows = [r for r in data["rows"] if r["model"] == "qwen3-30b-a3b" and r.get("ours_us")]
    copy_gbps, cublas = data["copy_gbps"], data["cublas_tflops"]
    roof = [max(r["touched_bytes"] / copy_gbps / 1e3, r["flops"] / cublas / 1e6) for r in rows]
    tokens = [r["tokens"] for r in rows]
    assert tokens == [1, 32, 512, 8192]
    assert close(series(times, "roofline bound").points, list(zip(tokens, roof)))
    assert close(
        series(times, "torch composition").points, [(r["tokens"], r["torch_us"]) for r in rows]
    )
    ours = [(t, b / r["ours_us"]) for t, b, r in zip(tokens, roof, rows)]
    assert close(series(fractions, "moegemm fused_moe").points, ours)
    assert [c.value for c in fractions.ceilings] == [1.0]


def test_dense_bars() -> None:
    data = fixture("dense")
    (fig,) = plot.figures_for(data)
    assert fig.categories == [r["case"] for r in data["dense"]]
    ours, cublas = fig.panels[0].series
    assert [y for _, y in ours.points] == [r["moegemm_tflops"] for r in data["dense"]]
    assert [y for _, y in cublas.points] == [r["cublas_tflops"] for r in data["dense"]]


def test_missing_run_fields_read_unknown() -> None:
    data = fixture("bf16")
    for key in ("gpu", "date_utc", "commit"):
        del data[key]
    title = plot.figures_for(data)[0].title
    assert title.endswith("GPU unknown | date unknown | commit unknown")


def png_size(blob: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk (always the first, right after the signature)."""
    assert blob[:8] == PNG_MAGIC and blob[12:16] == b"IHDR"
    return int.from_bytes(blob[16:20], "big"), int.from_bytes(blob[20:24], "big")


def test_every_figure_kind_renders(tmp_path: Path, capsys) -> None:
    pytest.importorskip("matplotlib")
    paths = [DATA / name for name in FIXTURES.values()]
    assert plot.main([*map(str, paths), "--out", str(tmp_path / "png")]) == 0
    written = capsys.readouterr().out.split()
    expected = sum(len(plot.figures_for(plot.load(p))) for p in paths)
    assert len(written) == expected == 8
    for name in written:
        blob = Path(name).read_bytes()
        width, height = png_size(blob)
        assert 600 <= width <= 2000 and 300 <= height <= 1000, (name, width, height)
        assert 10_000 < len(blob) < 2_000_000, name
    kinds = {Path(n).stem.split("-")[1] for n in written}
    assert kinds == {"bf16", "fp8_fp4", "moe", "dense"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "cannot read JSON: FileNotFoundError"),
        ("{", "cannot read JSON: JSONDecodeError"),
        ("[1, 2]", "top level is not a JSON object"),
        ('{"rows": [{"ranks": 2}], "verdicts": []}', "not a result of"),
    ],
)
def test_unusable_json_is_one_line_and_exit_2(
    tmp_path: Path, capsys, content: str | None, message: str
) -> None:
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    out = tmp_path / "png"
    assert plot.main([str(DATA / FIXTURES["moe"]), str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and str(bad) in err
    assert not out.exists()  # nothing written when any input is unusable


def test_fixtures_are_the_benchmarks_records() -> None:
    """The fixtures' metric columns are what the benchmarks' own code computes from their
    timings (so the plots are tested on the real record format)."""
    import moe_cases

    moe = fixture("moe")
    for row in moe["rows"]:
        again = copy.deepcopy(row)
        moe_cases.add_metrics(again, moe["copy_gbps"], moe["cublas_tflops"])
        assert again == row
    pytest.importorskip("torch")
    bench_report = pytest.importorskip("bench_report")  # imports torch and moegemm
    import bf16_cases
    import fp8_fp4_cases

    bf16 = fixture("bf16")
    defs = {d["name"]: bf16_cases.Case(**d) for d in bf16["case_defs"]}
    start = {k: bf16["ceilings"][k] for k in ("copy_gbps", "cublas_tflops")}
    for rec in bf16["cases"]:
        if not rec.get("ours_us"):
            continue
        case = defs[rec["case"]]
        assert case.regime == rec["regime"] and case.total_rows == rec["total_rows"]
        again = {k: rec[k] for k in rec if k.endswith("_us") or k == "with_c"}
        bench_report.add_metrics(case, again, {**start, **rec["ceilings_adjacent"]})
        for key in ("tflops", "gbps_weights", "gbps_all", "x_torch", "x_loop", "x_bmm"):
            assert math.isclose(again.get(key, 0.0), rec.get(key, 0.0)), (rec["case"], key)
    fp8 = fixture("fp8_fp4")
    median = fp8["ceilings"]["copy_gbps_median"]
    for row in fp8["rows"]:
        again = {k: v for k, v in row.items() if k not in ("tflops", "gbps_fp4", "pct_copy")}
        fp8_fp4_cases.add_metrics(again, median)
        for key in ("tflops", "gbps_fp4", "pct_copy", "x_torch_fp8", "x_bf16"):
            assert math.isclose(again[key], row[key]), (row["case"], key)


def test_the_documents_figures_exist() -> None:
    """Every image README.md and BENCHMARKS.md show is a PNG in the tree."""
    repo = BENCH.parent
    links = [
        link
        for doc in ("README.md", "BENCHMARKS.md")
        for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (repo / doc).read_text())
    ]
    assert links, "the README shows at least one figure"
    for link in links:
        blob = (repo / link).read_bytes()
        assert blob[:8] == PNG_MAGIC, link
        width, height = png_size(blob)
        assert width >= 600 and height >= 300, link
