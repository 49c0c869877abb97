"""bench_fp8_fp4.py's CPU logic: the case lists and their DeepGEMM FP8 anchors, the argument
parsing, the report maths (rates, shares, ratios, targets met / missed, geometric means), and
one case run end to end on CPU tensors with fake kernels (the checks catch a wrong group and a
write past masked_m; a torch that refuses the FP8 peer leaves a note)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

import bench_fp8_fp4 as bench
import fp8_fp4_cases as fc

from moegemm.api.mxfp4_weights import (
    Mxfp4Weights,
    prepare_mxfp4_weights,
    unprepare_mxfp4_weights,
)
from moegemm.quant import dequantize_mxfp4

# ----------------------------------------------------------------------------------------------
# Case lists


def test_suites_load_with_valid_shapes_and_rows() -> None:
    cases = fc.load_cases()
    counts = {s: sum(c.suite == s for c in cases) for s in fc.SUITES}
    assert counts == {"anchors": 16, "decode": 20, "prefill": 20, "masked": 16, "sweep": 54}
    assert len({c.name for c in cases}) == len(cases)
    for c in cases:
        assert c.k % 32 == 0 and c.n % 8 == 0, c.name
        assert len(c.rows) == c.num_groups and min(c.rows) >= 0 and c.total_rows > 0, c.name
        assert c.rows_nominal > 0 and c.regime == fc.regime_for(c.rows_nominal)
        if c.layout == "masked":
            assert max(c.rows) <= c.max_m and 1 <= c.expected_m <= c.max_m, c.name
            assert c.layouts() == ["masked"]
        else:
            assert c.layout == "contiguous" and c.layouts() == ["offs", "m_indices"]
    # Every anchor reproduces its table's rows (bf16_cases' rule) and carries its FP8 columns.
    anchors = [c for c in cases if c.suite == "anchors"]
    assert all(c.dg_fp8 and "Anchor table" in c.dg_fp8["source"] for c in anchors)
    assert {c.name.removeprefix("anchor:") for c in anchors} == set(fc.ANCHOR_FP8)


def test_anchor_ratios_agree_with_their_times() -> None:
    """The ratio columns were copied with the times beside them: torch / DeepGEMM agrees with
    the listed ratio to the tables' rounding (two decimals of medians)."""
    for dg_us, torch_us, ratio in fc.ANCHOR_FP8.values():
        assert abs(torch_us / dg_us - ratio) < 0.02, (dg_us, torch_us, ratio)
    for *_, dg_us, torch_us, _bf16, ratio in fc.FP8_SWEEP:
        assert abs(torch_us / dg_us - ratio) < 0.02, (dg_us, torch_us, ratio)
    for *_, us, _pct, torch_us, _bf16, ratio in fc.MXFP4_ENGINE:
        assert abs(torch_us / us - ratio) < 0.02


def test_sweep_covers_every_rows_per_group_and_the_fp8_sweep() -> None:
    sweep = fc.load_cases(("sweep",))
    for label, g, n, k in fc.SWEEP_SHAPES:
        mine = [c for c in sweep if c.anchor["sweep_shape"] == label]
        assert {c.rows_nominal for c in mine} == set(fc.SWEEP_ROWS)
        for c in mine:
            r = c.anchor["sweep_rows"]
            assert (c.num_groups, c.n, c.k) == (g, n, k)
            assert c.rows == fc.anchor_rows(r, g)
            assert c.layout in fc.sweep_layouts(r)
            if c.layout == "masked":
                assert r <= 256 and c.max_m % 128 == 0 and c.expected_m == r
            else:
                assert r >= 256
    assert {(c.rows_nominal, c.layout) for c in sweep if c.rows_nominal == 256} >= {
        (256, "masked"),
        (256, "contiguous"),
    }
    # Each FP8 sweep entry is the anchor of exactly one sweep case, of the same layout.
    used = [c for c in sweep if c.dg_fp8]
    assert len(used) == len(fc.FP8_SWEEP) == 36
    for c in used:
        assert (
            c.layout in c.dg_fp8["source"]
            and f"{c.anchor['sweep_rows']} rows" in (c.dg_fp8["source"])
        )
    no_anchor = {c.anchor["sweep_shape"] for c in sweep if not c.dg_fp8}
    assert no_anchor == {"gpt-oss L2", "qwen3-30b L2"}


def test_deepgemm_lookup_prefers_the_layout_and_falls_back() -> None:
    masked = fc.dg_fp8_for(32, 4096, 7168, 256, "masked")
    contiguous = fc.dg_fp8_for(32, 4096, 7168, 256, "contiguous")
    assert masked["dg_x_torch"] == 1.31 and contiguous["dg_x_torch"] == 1.39
    # A contiguous decode case is judged against DeepGEMM's masked kernel (its only entry).
    dec = fc.dg_fp8_for(32, 4096, 7168, 8, "contiguous")
    assert dec["dg_x_torch"] == 1.39 and "masked" in dec["source"]
    assert fc.dg_fp8_for(32, 4096, 7168, 10.67, "contiguous") == {}
    assert fc.dg_fp8_for(128, 4096, 7168, 8, "masked") == {}  # other group count
    suites = {c.name: c for c in fc.load_cases(("decode", "prefill", "masked"))}
    assert suites["decode:deepseek_v3.linear1 G32 N4096 K7168 m276"].dg_fp8["dg_x_torch"] == 1.39
    assert (
        suites["prefill:qwen3_30b_a3b.linear1 G128 N1536 K2048 m131072"].dg_fp8["dg_x_torch"]
        == 3.37
    )
    assert not suites["decode:gpt_oss_120b.linear1 G128 N5760 K2880 m256"].dg_fp8


def test_regimes_follow_the_targets() -> None:
    assert [fc.regime_for(r) for r in (0.03, 8, 32, 33, 256, 1023, 1024)] == [
        "decode", "decode", "decode", "mid", "mid", "mid", "prefill",
    ]  # fmt: skip
    assert [fc.in_band(r) for r in (32, 63.9, 64, 128, 256, 257)] == [
        False, False, True, True, True, False,
    ]  # fmt: skip


def test_quick_and_selection() -> None:
    quick = fc.load_cases(quick=True)
    assert len(quick) == 8 and {c.suite for c in quick} == set(fc.SUITES)
    assert {c.regime for c in quick} == {"decode", "mid", "prefill"}
    cases = fc.load_cases()
    only_masked = fc.select_cases(cases, layouts=("masked",))
    assert only_masked and all(c.layout == "masked" for c in only_masked)
    offs = fc.select_cases(cases, layouts=("offs",))
    assert len(offs) + len(only_masked) == len(cases)
    spread = fc.select_cases(cases, max_cases=10)
    assert len(spread) == 10 and spread[0] is cases[0]
    assert len({c.suite for c in spread}) == len(fc.SUITES)  # a short run samples every suite
    assert fc.select_cases(cases, max_cases=1000) == cases
    gpt = fc.select_cases(cases, pattern="gpt.oss")
    assert gpt and all("gpt" in c.name for c in gpt)
    with pytest.raises(ValueError, match="unknown suites"):
        fc.load_cases(("k_grouped",))


# ----------------------------------------------------------------------------------------------
# Arguments


def test_parser_defaults_and_lists() -> None:
    args = bench.parse_args([])
    assert args.suites == fc.SUITES and args.layouts == fc.LAYOUTS
    assert args.weights == fc.WEIGHTS and args.json is None and args.max_cases is None
    assert args.budget_ms == 60.0 and args.rounds == 1 and not args.quick
    args = bench.parse_args(
        ["--suite", "sweep,masked", "--suite", "anchors,sweep", "--layouts", "masked,offs",
         "--weights", "prepared", "--max-cases", "7", "--json", "out.json", "--quick"]
    )  # fmt: skip
    assert args.suites == ("sweep", "masked", "anchors")
    assert args.layouts == ("masked", "offs") and args.weights == ("prepared",)
    assert args.max_cases == 7 and args.json == "out.json" and args.quick


@pytest.mark.parametrize(
    "argv",
    [
        ["--layouts", "offs,padded"],
        ["--weights", ""],
        ["--suite", "k_grouped"],
        ["--max-cases", "0"],
        ["--rounds", "0"],
    ],
)
def test_parser_refuses_bad_values(argv: list[str], capsys) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert argv[0] in capsys.readouterr().err


def test_list_runs_without_a_gpu(capsys) -> None:
    assert bench.main(["--list", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "# 8 cases" in out and "sweep:dsv3 L1" in out
    assert bench.main(["--list", "--layouts", "masked", "--max-cases", "3"]) == 0
    assert "# 3 cases" in capsys.readouterr().out


# ----------------------------------------------------------------------------------------------
# Report maths


def make_row(**kw) -> dict:
    row = {
        "case": "c", "layout": "offs", "regime": "decode", "rows_nominal": 8.0, "n": 4096,
        "k": 7168, "total_rows": 256, "touched_groups": 32, "errors": {},
        "dg_fp8": {"dg_x_torch": 1.4}, "mxfp4_engine": {"x_torch": 2.0},
    }  # fmt: skip
    row.update(kw)
    return row


def test_add_metrics() -> None:
    row = make_row(raw_us=110.0, prepared_us=100.0, torch_fp8_us=350.0, bf16_us=600.0)
    bench.add_metrics(row, copy_gbps=4000.0)
    wbytes = 32 * 4096 * (7168 // 2 + 7168 // 32)
    assert row["ours_us"] == 100.0
    assert math.isclose(row["gbps_fp4"], wbytes / 100e-6 / 1e9)
    assert math.isclose(row["pct_copy"], row["gbps_fp4"] / 4000.0)
    assert math.isclose(row["tflops"], 2 * 256 * 4096 * 7168 / 100e-6 / 1e12)
    assert math.isclose(row["x_torch_fp8"], 3.5) and math.isclose(row["x_bf16"], 6.0)
    assert math.isclose(row["x_torch_fp8_raw"], 350 / 110)
    assert math.isclose(row["raw_over_prepared"], 1.1)
    assert math.isclose(row["vs_dg"], 3.5 / 1.4) and math.isclose(row["vs_dg_raw"], 350 / 110 / 1.4)
    assert math.isclose(row["vs_mxfp4_engine"], 3.5 / 2.0)
    # DeepGEMM timed in the run: its ratio replaces the anchor's estimate.
    row = make_row(raw_us=110.0, prepared_us=100.0, torch_fp8_us=350.0, x_dg_inrun=1.7,
                   x_dg_inrun_raw=1.5)  # fmt: skip
    bench.add_metrics(row, copy_gbps=4000.0)
    assert row["vs_dg"] == 1.7 and row["vs_dg_raw"] == 1.5
    # Raw only: it is "ours"; no anchor, no torch: no ratios over them.
    row = make_row(raw_us=50.0, dg_fp8={}, mxfp4_engine={})
    bench.add_metrics(row, None)
    assert row["ours_us"] == 50.0 and "pct_copy" not in row and "vs_dg" not in row
    assert "raw_over_prepared" not in row and "x_torch_fp8" not in row
    row = make_row(errors={"exception": "x"})
    bench.add_metrics(row, 4000.0)
    assert row["ours_us"] is None and "tflops" not in row


def _by_target(summary: dict) -> dict:
    return {t["target"]: t for t in summary["targets"]}


def test_summary_marks_targets_met_and_missed() -> None:
    good = make_row(case="good", vs_dg=2.0, pct_copy=0.9, x_bf16=3.5, raw_over_prepared=1.05)
    slow = make_row(case="slow", vs_dg=1.5, pct_copy=0.8, x_bf16=3.1, raw_over_prepared=1.2)
    band = make_row(case="band", regime="mid", rows_nominal=128, vs_dg=1.05)
    prefill = make_row(case="pre", regime="prefill", rows_nominal=4096, vs_dg=1.2)
    s = _by_target(bench.summarize([good, slow, band, prefill]))
    dec = s["decode: >= 1.8 x DeepGEMM FP8"]
    assert dec["status"] == "missed" and dec["judged"] == 2 and dec["worst"] == 1.5
    assert dec["missed"] == ["slow [offs] 1.500"]
    assert math.isclose(dec["geomean"], math.sqrt(3.0))
    assert s["decode: >= 85% of copy bw on FP4 bytes"]["missed"] == ["slow [offs] 0.800"]
    assert s["decode: >= 3 x moegemm BF16"]["status"] == "met"
    every = s["every rows/group: >= 1.0 x DeepGEMM FP8"]
    assert every["status"] == "met" and every["judged"] == 4 and every["worst"] == 1.05
    mid = s["64-256 rows/group: >= 1.1 x DeepGEMM FP8"]
    assert mid["judged"] == 1 and mid["missed"] == ["band [offs] 1.050"]
    raw = s["raw within 10% of prepared (time)"]
    assert raw["missed"] == ["slow [offs] 1.200"] and raw["worst"] == 1.2
    assert s["correct: calc_diff < 0.0001 on every variant"]["status"] == "met"
    # A wrong result misses every speed target it is judged by, whatever its speed.
    wrong = make_row(case="wrong", vs_dg=2.5, pct_copy=0.95, x_bf16=4.0, calc_diff=0.3)
    wrong["errors"] = {"check": "raw calc_diff 3e-01"}
    s = _by_target(bench.summarize([good, wrong]))
    assert s["decode: >= 1.8 x DeepGEMM FP8"]["missed"] == ["wrong [offs] 2.500"]
    assert s["correct: calc_diff < 0.0001 on every variant"]["missed"] == ["wrong [offs]"]
    assert s["correct: calc_diff < 0.0001 on every variant"]["worst"] == 0.3
    # Nothing to judge: n/a, not met.
    s = _by_target(bench.summarize([prefill]))
    assert s["decode: >= 1.8 x DeepGEMM FP8"]["status"] == "n/a"


def test_summary_geomeans_and_report(capsys) -> None:
    rows = [make_row(x_torch_fp8=2.0, vs_dg=1.0), make_row(x_torch_fp8=8.0, vs_dg=4.0)]
    rows.append(make_row(regime="prefill", x_torch_fp8=None, vs_dg=float("nan")))
    geo = bench.summarize(rows)["geomean"]
    assert math.isclose(geo["x_torch_fp8"], 4.0) and math.isclose(geo["vs_dg"], 2.0)
    assert math.isclose(geo["x_torch_fp8_decode"], 4.0) and geo["x_torch_fp8_prefill"] is None
    sweep = [
        make_row(layout="masked", sweep_shape="dsv3 L1", sweep_rows=256, vs_dg=1.25),
        make_row(layout="offs", sweep_shape="dsv3 L1", sweep_rows=256, vs_dg=9.0),
        make_row(layout="offs", sweep_shape="dsv3 L1", sweep_rows=1024, vs_dg=1.5),
        make_row(layout="m_indices", sweep_shape="dsv3 L1", sweep_rows=4096, vs_dg=9.0),
    ]
    lines = fc.sweep_matrix(sweep, "vs_dg")
    assert len(lines) == 2 and lines[1].split() == ["dsv3", "L1", "-", "-", "-", "-", "-",
                                                    "1.25", "1.50", "-"]  # fmt: skip
    assert fc.sweep_matrix(rows, "vs_dg") == []
    summary = bench.summarize(sweep)
    fc.print_report(sweep, summary, {"copy_gbps": 4000.0, "copy_gbps_median": 3900.0})
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith("correct: calc_diff") and "met" in out[-1]  # the targets last
    assert any(line.startswith("geometric means:") for line in out)
    row = make_row(raw_us=100.0)
    bench.add_metrics(row, 4000.0)
    line = bench.format_row(row)
    assert line.startswith("c ") and "decode" in line and "100.0" in line
    estimated = bench.format_row(make_row(raw_us=100.0, vs_dg=1.25))
    in_run = bench.format_row(make_row(raw_us=100.0, vs_dg=1.25, deepgemm_us=150.0,
                                       x_dg_inrun=1.5))  # fmt: skip
    assert "~1.25" in estimated.split() and "150.0" not in estimated
    assert "1.50" in in_run.split() and "150.0" in in_run.split() and "~1.25" not in in_run


# ----------------------------------------------------------------------------------------------
# One case end to end on CPU (fake kernels and timer)


def _reference(a8: torch.Tensor, sfa: torch.Tensor, b: torch.Tensor, sfb: torch.Tensor):
    """Written apart from the benchmark's own reference: column c's scale is sfa[:, c // 128]."""
    scale = sfa[:, torch.arange(a8.shape[-1]) // 128]
    return (a8.float() * scale) @ dequantize_mxfp4(b, sfb).t()


def fake_api(bad_group: int | None = None, write_past_mask: bool = False) -> dict:
    """FP8 x FP4 functions computing the exact reference on CPU (group bad_group wrong)."""

    def weights_of(w):  # the real prepared layout, undone as a kernel would read it
        return unprepare_mxfp4_weights(w) if isinstance(w, Mxfp4Weights) else w

    def contiguous(a_pair, w, d, m_indices=None, *, offs=None):
        (a8, sfa), (b, sfb) = a_pair, weights_of(w)
        if offs is not None:
            ends = offs.tolist()
            groups = [(g, list(range(e - r, e))) for g, (r, e) in enumerate(
                zip([e - s for s, e in zip([0] + ends[:-1], ends)], ends))]  # fmt: skip
        else:
            idx = m_indices.tolist()
            groups = [(g, [i for i, v in enumerate(idx) if v == g]) for g in range(b.shape[0])]
        for g, rows in groups:
            if rows:
                out = _reference(a8[rows], sfa[rows], b[g], sfb[g])
                d[rows] = (out + (1.0 if g == bad_group else 0.0)).bfloat16()

    def masked(a_pair, w, d, masked_m, expected_m):
        (a8, sfa), (b, sfb) = a_pair, weights_of(w)
        for g, r in enumerate(masked_m.tolist()):
            out = _reference(a8[g, :r], sfa[g, :r], b[g], sfb[g])
            d[g, :r] = (out + (1.0 if g == bad_group else 0.0)).bfloat16()
            if write_past_mask:
                d[g, r:] = 0

    return {
        "m_grouped_fp8_fp4_gemm_nt_contiguous": contiguous,
        "m_grouped_fp8_fp4_gemm_nt_masked": masked,
        "prepare_mxfp4_weights": prepare_mxfp4_weights,
    }


@pytest.fixture
def on_cpu(monkeypatch):
    import moegemm

    def bf16_contiguous(a, b, d, m_indices=None, *, offs=None):
        d.zero_()

    def bf16_masked(a, b, d, masked_m, expected_m):
        d.zero_()

    monkeypatch.setattr(bench, "DEVICE", "cpu")
    monkeypatch.setattr(moegemm, "m_grouped_bf16_gemm_nt_contiguous", bf16_contiguous)
    monkeypatch.setattr(moegemm, "m_grouped_bf16_gemm_nt_masked", bf16_masked)

    def install(**kw):
        table = fake_api(**kw)
        monkeypatch.setattr(bench, "api", table.__getitem__)

    return install


def fake_timer(fn) -> float:
    fn()
    fn()  # the rotation advances
    return 10.0


CPU_CASES = [
    fc.Fp4Case("t", 0, "t:contig", "contiguous", 3, 64, 160, [5, 0, 7], rows_nominal=4.0),
    fc.Fp4Case("t", 1, "t:masked", "masked", 3, 64, 64, [2, 0, 6], max_m=8, expected_m=3,
               rows_nominal=3.0),
]  # fmt: skip


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.name)
def test_run_case_on_cpu(case: fc.Fp4Case, on_cpu) -> None:
    """K = 160 has a partial 128-block of activation scales; the torch FP8 peer cannot run on
    CPU, which leaves a note and an empty column, as a torch that refuses the call would."""
    torch.manual_seed(0)
    on_cpu()
    args = bench.parse_args([])
    rows = bench.run_case(case, args, fake_timer)
    assert [r["layout"] for r in rows] == case.layouts()
    for r in rows:
        assert not r["errors"], r["errors"]
        assert r["calc_diff"] < 1e-4 and r["calc_diff_raw"] == r["calc_diff"]
        assert r["raw_prepared_bitwise"] and r["calc_diff_vs_bf16_raw"] < 0.05
        assert r["raw_us"] == r["prepared_us"] == r["bf16_us"] == 10.0
        assert r["torch_fp8_us"] is None and "NotImplementedError" in r["notes"]["torch_fp8"]
        if case.layout == "masked":
            assert r["untouched_ok_raw"] and r["untouched_ok_prepared"]


def test_run_case_checks_catch_wrong_groups(on_cpu, monkeypatch) -> None:
    torch.manual_seed(0)
    on_cpu(bad_group=2)
    args = bench.parse_args(["--weights", "raw", "--layouts", "offs"])
    (row,) = bench.run_case(CPU_CASES[0], args, fake_timer)
    assert row["calc_diff"] > 1e-3 and "raw calc_diff" in row["errors"]["check"]
    assert "prepared_us" not in row and row["raw_us"] == 10.0
    on_cpu(write_past_mask=True)
    (row,) = bench.run_case(CPU_CASES[1], bench.parse_args([]), fake_timer)
    assert row["calc_diff"] < 1e-4 and "past masked_m" in row["errors"]["check"]
    assert row["untouched_ok_raw"] is False

    # The torch FP8 peer, where torch takes the call: emulated here on the same operands.
    def scaled_grouped_mm(a, b, sa, sb, offs=None, out_dtype=None):
        out, start = [], 0
        for g, end in enumerate(offs.tolist()):
            out.append((a[start:end].float() * sa[start:end, None]) @ (b[g].float() * sb[g]))
            start = end
        return torch.cat(out).to(out_dtype)

    on_cpu()
    monkeypatch.setattr(torch, "_scaled_grouped_mm", scaled_grouped_mm, raising=False)
    rows = bench.run_case(CPU_CASES[0], bench.parse_args([]), fake_timer)
    for r in rows:
        assert r["torch_fp8_us"] == 10.0 and r["torch_fp8_calc_diff_vs_bf16"] < 1e-2
        assert "torch_fp8_suspect" not in r["notes"]
        assert r["rotate"] == {"raw": 16, "prepared": 16, "bf16": 16, "fp8": 16}


def test_chunked_matches_one_call(monkeypatch) -> None:
    w = torch.randn(5, 8, 64) * 0.02
    whole = bench.moegemm.quant.quantize_mxfp4(w)
    monkeypatch.setattr(bench, "CHUNK_ELEMS", 2 * 8 * 64)  # three pieces
    parts = bench.quantize_weights(w)
    assert all(torch.equal(x, y) for x, y in zip(whole, parts))
    q, s = bench.rowwise_fp8(w)
    assert q.shape == w.shape and s.shape == (5, 8)
    assert bench.rotation(10 << 20, 10 << 20) == 16  # small: rotated (bench_common's count)
    assert bench.rotation(10 << 20, 4 << 30) == 2  # capped by ROTATE_MEM_BYTES
    assert bench.rotation(1 << 30, 1 << 30) == 1


def test_precompiled_kernels_are_the_apis() -> None:
    """The descriptions precompiled are the ones the FP8 x FP4 API builds (the BF16 layout's
    with ab_dtype fp8_fp4 and the weight layout: offs expected_m = ceil(rows / G), masked
    min(expected_m, max_m)); raw and prepared are different kernels; the BF16 peers' follow."""
    import math

    from moegemm.heuristics import SM90

    cases = fc.load_cases(quick=True)
    for c in cases:
        for layout in c.layouts():
            raw, prep = (fc.fp8_fp4_desc(c, layout, w) for w in ("raw", "prepared"))
            assert (raw.ab_dtype, raw.d_dtype, raw.weights, prep.weights) == (
                "fp8_fp4", "bf16", "raw", "prepared",
            )  # fmt: skip
            assert raw.kind == fc.KINDS[layout] and raw.n == c.n and raw.k == c.k
            if layout == "offs":
                assert raw.m == c.total_rows
                assert raw.expected_m == math.ceil(c.total_rows / c.num_groups)
            elif layout == "masked":
                assert raw.m == c.max_m and raw.expected_m == min(c.expected_m, c.max_m)
            else:
                assert raw.m % 128 == 0 and raw.m >= c.total_rows
    specs, failures = fc.kernel_specs(cases, fc.LAYOUTS, fc.WEIGHTS, SM90)
    assert not failures
    layouts = sum(len(c.layouts()) for c in cases)
    assert len(specs) == 3 * layouts  # raw, prepared, BF16 per layout
    for i in range(0, len(specs), 3):
        assert len(set(specs[i : i + 3])) == 3
    specs, _ = fc.kernel_specs(cases, fc.LAYOUTS, ("raw",), SM90)
    assert len(specs) == 2 * layouts


def test_m_indices_decode_rows_are_reported_not_judged_for_speed() -> None:
    """An m_indices row at decode pads every group to 128 rows (DeepGEMM's decode anchors are
    its unpadded masked kernel): the speed targets skip it, correctness and raw vs prepared
    judge it; at prefill it is judged (DeepGEMM's contiguous figures are padded too)."""
    dec = make_row(case="d", layout="m_indices", vs_dg=0.5, pct_copy=0.1, x_bf16=1.0)
    dec.update(raw_over_prepared=1.3, calc_diff=float("nan"), errors={"check": "nan"})
    pre = make_row(case="p", layout="m_indices", regime="prefill", rows_nominal=1024, vs_dg=0.9)
    s = _by_target(bench.summarize([dec, pre]))
    assert s["decode: >= 1.8 x DeepGEMM FP8"]["status"] == "n/a"
    assert s["every rows/group: >= 1.0 x DeepGEMM FP8"]["missed"] == ["p [m_indices] 0.900"]
    assert s["raw within 10% of prepared (time)"]["missed"] == ["d [m_indices] 1.300"]
    correct = s["correct: calc_diff < 0.0001 on every variant"]
    assert correct["missed"] == ["d [m_indices]"] and math.isnan(correct["worst"])


def test_rows_summary_and_json_compose_on_cpu(on_cpu, capsys, tmp_path) -> None:
    """The main loop's pieces in order on CPU: rows of both cases (a decode case measured
    beside the copy), a case that raises keeps a row per layout, the end-of-run metrics against
    the copy median, the report (targets last) and a JSON-serializable result."""
    import json

    class Meter:
        def __init__(self) -> None:
            self.samples: list[float] = []

        def measure(self) -> float:
            self.samples.append(4000.0 + len(self.samples))
            return self.samples[-1]

    torch.manual_seed(0)
    on_cpu()
    args = bench.parse_args(["-v"])
    meter = Meter()
    rows = [r for c in CPU_CASES for r in bench.run_case_rows(c, args, fake_timer, meter)]
    broken = fc.Fp4Case("t", 2, "t:broken", "contiguous", 2, 16, 48, [1, 1], rows_nominal=1.0)
    rows += bench.run_case_rows(broken, args, fake_timer, meter)  # K % 32 != 0: quantize raises
    assert [r["layout"] for r in rows] == ["offs", "m_indices", "masked", "offs", "m_indices"]
    assert all(r["copy_gbps_adjacent"] for r in rows[:3]) and len(meter.samples) == 5
    assert "exception" in rows[3]["errors"] and rows[3]["case"] == "t:broken"
    ceilings = {"copy_gbps": meter.samples[0]}
    summary = bench.finish(rows, meter, ceilings)
    assert ceilings["copy_gbps_end"] == 4005.0 and ceilings["copy_gbps_median"] == 4002.5
    for r in rows[:3]:
        assert math.isclose(r["pct_copy"], r["gbps_fp4"] / 4002.5)
        assert math.isclose(r["pct_copy_adjacent"], r["gbps_fp4"] / r["copy_gbps_adjacent"])
        assert r["raw_over_prepared"] == 1.0 and r["x_bf16"] == 1.0
    for r in rows:
        print(bench.format_row(r))
    bench.print_report(rows, summary, ceilings)
    out = capsys.readouterr().out
    assert "t:broken" in out and out.strip().splitlines()[-1].startswith("    missed: t:broken")
    path = tmp_path / "out.json"
    path.write_text(json.dumps({"rows": rows, **summary}, default=str))
    assert len(json.loads(path.read_text())["rows"]) == 5


def test_sm100_keeps_only_the_prepared_weights() -> None:
    assert fc.sm100_weights(("prepared",)) == (("prepared",), None)
    kept, note = fc.sm100_weights(("raw", "prepared"))
    assert kept == ("prepared",) and "raw not timed" in note
    kept, note = fc.sm100_weights(("raw",))
    assert kept == () and "nothing to run" in note


def test_sm100_inputs_use_power_of_two_scales(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.randn(3, 256).bfloat16()
    monkeypatch.setattr(bench, "PREPARE_ARCH", None)
    _, sfa = bench.fp8_cast()(x)
    assert not bool((torch.frexp(sfa).mantissa == 0.5).all())  # DeepGEMM's plain scales
    monkeypatch.setattr(bench, "PREPARE_ARCH", "sm_100f")
    _, sfa = bench.fp8_cast()(x)
    assert bool((torch.frexp(sfa).mantissa == 0.5).all())


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (ModuleNotFoundError("No module named 'deep_gemm'", name="deep_gemm"), False),
        (ModuleNotFoundError("No module named 'deep_gemm._C'", name="deep_gemm._C"), True),
        (ImportError("libcudart.so.12: cannot open shared object file"), True),
    ],
)
def test_deepgemm_that_will_not_import_says_why(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, error: Exception, said: bool
) -> None:
    """No DeepGEMM: no peer, silently. A DeepGEMM that is there but fails to import: no peer,
    and one line saying why (else a run loses its in-run peer without a trace)."""

    def refuse(name: str):
        raise error

    monkeypatch.setattr(bench.importlib, "import_module", refuse)
    bench.deep_gemm.cache_clear()
    try:
        assert bench.deep_gemm() is None
    finally:
        bench.deep_gemm.cache_clear()
    out = capsys.readouterr().out
    assert ("# DeepGEMM not importable: " in out) == said, out
    if said:
        assert str(error) in out


@pytest.mark.parametrize("importable", [False, True])
def test_no_deepgemm_row_says_which_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, importable: bool
) -> None:
    """Rows without a DeepGEMM time: either it is not importable, or every case ran `offs`,
    which DeepGEMM has no call for; the report says which."""
    monkeypatch.setattr(bench, "deep_gemm", lambda: object() if importable else None)
    bench.print_deepgemm_report([{"prepared_us": 10.0, "rows_nominal": 8}])
    out = capsys.readouterr().out
    assert ("offs has none" in out) == importable and ("not importable" in out) != importable
