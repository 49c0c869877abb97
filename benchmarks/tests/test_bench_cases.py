"""The benchmarks' CPU logic: every suite loads, the anchors reproduce the published row totals,
the two contiguous layouts index the same real rows, the kernels a case precompiles are the
ones the API plans, the report's shares and checks, and the walk twins."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

import bf16_cases


def test_all_suites_load_with_published_anchor_totals() -> None:
    cases = bf16_cases.load_cases()
    assert {c.suite for c in cases} == set(bf16_cases.SUITES)
    for case in cases:
        assert len(case.rows) == case.num_groups and min(case.rows) >= 0
        table_rows = case.anchor.get("table_rows")
        if table_rows is not None:
            assert case.total_rows == table_rows, case.name
        if case.layout == "masked":
            assert max(case.rows) <= case.max_m and case.expected_m > 0


def test_group_layouts_agree() -> None:
    rows = [5, 0, 130, 7]
    lay = bf16_cases.group_layouts(rows, align=128)
    assert lay["offs"].tolist() == [5, 5, 135, 142]
    assert lay["padded_starts"] == [0, 128, 128, 384] and lay["padded_total"] == 512
    m_indices, real = lay["m_indices"], lay["real_rows"]
    assert real.numel() == sum(rows)
    expected_groups = torch.repeat_interleave(torch.arange(4), torch.tensor(rows))
    assert torch.equal(m_indices[real].long(), expected_groups)
    assert (m_indices >= 0).sum() == sum(rows)


def test_precompiled_descriptions_follow_the_layouts() -> None:
    """descs_for gives each layout's description as the API builds it (offs first, then the
    m_indices layout over 128-row padded segments), and spec_for turns each pick into a kernel
    spec (the benchmark precompiles these in parallel before timing anything)."""
    import bench_common

    from moegemm.families import select_config
    from moegemm.heuristics import SM90

    cases = bf16_cases.load_cases(quick=True)
    assert {c.layout for c in cases} == {"contiguous", "masked", "k_grouped"}
    for case in cases:
        descs = bench_common.descs_for(case)
        if case.layout == "contiguous":
            assert [d.kind for d in descs] == ["m_grouped_offsets", "m_grouped_contiguous"]
            assert descs[0].m == case.total_rows
            padded = bf16_cases.group_layouts(case.rows)["padded_total"]
            assert descs[1].m == padded and padded % bf16_cases.ALIGN == 0
        elif case.layout == "masked":
            assert [d.kind for d in descs] == ["m_grouped_masked"] and descs[0].m == case.max_m
        else:
            assert [d.kind for d in descs] == ["k_grouped"] and descs[0].d_dtype == "fp32"
        configs = [select_config(d, SM90) for d in descs]
        specs = [bench_common.spec_for(d, c) for d, c in zip(descs, configs)]
        assert len(set(specs)) == len(specs), case.name


def test_bench_parser_and_run_info(monkeypatch) -> None:
    """--json takes the output path (nothing else is written); run_info names what a table of
    the results needs (GPU, torch, commit, date), the commit from $TREE_COMMIT where set (a
    copied tree may have no .git)."""
    import bench_bf16
    import bench_common

    args = bench_bf16.build_parser().parse_args(["--json", "out.json", "--quick"])
    assert args.json == "out.json" and args.quick
    assert bench_bf16.build_parser().parse_args([]).json is None
    monkeypatch.delenv("TREE_COMMIT", raising=False)
    info = bench_common.run_info()
    assert set(info) == {"gpu", "torch", "commit", "date_utc"} and all(info.values())
    monkeypatch.setenv("TREE_COMMIT", "abc1234")
    assert bench_common.run_info()["commit"] == "abc1234"


def test_case_orders() -> None:
    import bench_bf16

    cases = bf16_cases.load_cases()
    names = [c.name for c in cases]
    assert [c.name for c in bench_bf16.order_cases(cases, "natural")] == names
    assert [c.name for c in bench_bf16.order_cases(cases, "reverse")] == names[::-1]
    shuffled = [c.name for c in bench_bf16.order_cases(cases, "shuffle")]
    assert sorted(shuffled) == sorted(names) and shuffled != names
    assert shuffled == [c.name for c in bench_bf16.order_cases(cases, "shuffle")]


def test_prefill_regime_follows_the_targets_definition() -> None:
    """Prefill targets are defined for >= 1024 rows per group: the prefill suite's smaller
    cases (EP1 with 128-256 experts, llama4-scout) are reported as "mid"."""
    cases = {c.name: c for c in bf16_cases.load_cases(("prefill",))}
    for case in cases.values():
        expected = "prefill" if case.mean_rows >= 1024 else "mid"
        assert case.regime == expected, case.name
    assert {c.regime for c in cases.values()} == {"prefill", "mid"}


def test_bench_ceiling_shares() -> None:
    """The headline shares use the run-median ceilings; adjacent and start-of-run shares are
    kept beside them, and the summary's checks use the headline."""
    import bench_report

    case = next(c for c in bf16_cases.load_cases(("prefill",)) if c.regime == "prefill")
    flops = 2 * case.total_rows * case.n * case.k
    res = {"ours_us": flops / 700e6}  # 700 TFLOP/s
    bench_report.add_metrics(case, res, {"cublas_tflops": 800.0, "copy_gbps": 4000.0})
    bench_report.add_shares(res, {"cublas_tflops": 700.0}, "_adjacent")
    bench_report.add_shares(res, {"cublas_tflops": 1000.0}, "_start")
    assert abs(res["tflops"] - 700) < 1e-6
    assert abs(res["pct_cublas"] - 0.875) < 1e-9
    assert abs(res["pct_cublas_adjacent"] - 1.0) < 1e-9
    assert abs(res["pct_cublas_start"] - 0.7) < 1e-9
    assert "pct_copy_adjacent" not in res  # only the regime's own ceiling was re-measured
    row = {**res, "case": case.name, "suite": case.suite, "regime": case.regime, "k": case.k}
    row["min_rows"] = min(case.rows)
    failed = {"case": "failed", "suite": "prefill", "regime": "prefill", "k": 2880, "min_rows": 0}
    failed["errors"] = {"exception": "RuntimeError: x"}
    # The end of the run: the headline shares move to the run medians; a failed case is skipped.
    bench_report.apply_run_medians([case, case], [row, failed], {"cublas_tflops": 875.0})
    assert abs(row["pct_cublas"] - 0.8) < 1e-9 and abs(row["pct_cublas_run_median"] - 0.8) < 1e-9
    assert "pct_cublas" not in failed
    summary = bench_report.summarize([row, failed])
    assert abs(summary["geomean"]["pct_cublas_prefill"] - 0.8) < 1e-9
    assert abs(summary["geomean"]["pct_cublas_prefill_adjacent"] - 1.0) < 1e-9
    assert abs(summary["geomean"]["pct_cublas_prefill_start"] - 0.7) < 1e-9
    assert summary["checks"]["prefill_pct_cublas>=0.92"] == [case.name]
    assert summary["checks"]["correctness_failures"] == ["failed"]
    assert summary["checks"]["gpt_oss_k2880_tflops>=640"] == []  # failures are not counted here
    # No row priced against DeepGEMM (no anchor, or anchors of another GPU): n/a, not a pass.
    assert summary["checks"]["vs_deepgemm_every_case>=1"] is None
    assert summary["checks"]["vs_deepgemm_geomean>=1.02"] is None


def test_quality_sample_holds_both_decode_kernels() -> None:
    """The harness's 6-config sample of a decode case includes a swapped and an unswapped
    config (a 6-config run once scored a pick 100% that every config put at 88.7%)."""
    from heuristic_quality import all_qcases, choose_candidates, desc_for, sm90_arch

    from moegemm.heuristics.sm90_bf16 import swap_ab_possible

    arch = sm90_arch()
    decode = [q for q in all_qcases() if q.layout in ("offs", "masked")]
    checked = 0
    for q in decode:
        desc = desc_for(q)
        if not swap_ab_possible(desc):
            continue
        chosen, pick = choose_candidates(desc, arch, 6)
        assert chosen[0] == pick and len(chosen) == 6 and len(set(chosen)) == 6
        assert {c.layout.swap_ab for c in chosen} == {False, True}, q.id
        checked += 1
    assert checked >= 20


def test_walk_twin_columns_check_bits_and_time_alternately() -> None:
    """bench_bf16's walk twins: both walks run into fresh outputs and are compared bitwise (a
    difference is a check failure), then timed striped, whole, striped, whole, striped; the
    column is whole / striped of the medians; a failure is reported and keeps the row. CPU
    tensors and a fake timer stand in for the GPU."""
    import dataclasses

    import bench_bf16

    from moegemm.families import select_config
    from moegemm.heuristics import SM90, GemmDesc

    desc = GemmDesc("m_grouped_offsets", m=32768, n=4096, k=7168, num_groups=8)
    pick = select_config(desc, SM90)
    assert pick.layout.stripe_m == 8
    whole = bench_bf16.whole_group_twin(pick)
    assert whole == dataclasses.replace(pick, layout=dataclasses.replace(pick.layout, stripe_m=0))
    assert whole.short_name() != pick.short_name()  # the JSON names both builds apart
    weights = [torch.ones(2, 2), 2 * torch.ones(2, 2)]
    order: list[str] = []

    def timer(fn) -> float:
        fn()
        order.append(current[0])
        return {"p": 10.0, "w": 11.0}[current[0]]

    def run(differs: bool) -> dict:
        def call(b, out, config):
            current[0] = "p" if config.layout.stripe_m else "w"
            out.copy_(b + (1.0 if differs and not config.layout.stripe_m else 0.0))

        res: dict = {"errors": {}}
        bench_bf16.walk_twin_columns(
            res, timer, (pick, whole), weights, lambda: torch.full((2, 2), float("nan")), call
        )
        return res

    current = [""]
    res = run(differs=False)
    assert res["walk_twin_bitwise"] and "check" not in res["errors"]
    assert order == ["p", "w", "p", "w", "p"]
    assert res["whole_over_striped"] == 1.1 and res["walk_pick"] == pick.short_name()
    assert res["walk_whole"] == whole.short_name()
    order.clear()
    res = run(differs=True)
    assert not res["walk_twin_bitwise"] and "walk twin differs" in res["errors"]["check"]

    def broken(b, out, config):
        raise RuntimeError("no kernel")

    res = {"errors": {}, "ours_us": 5.0}
    bench_bf16.walk_twin_columns(res, timer, (pick, whole), weights, lambda: torch.zeros(2), broken)
    assert res["ours_us"] == 5.0 and "no kernel" in res["errors"]["walk_twin"]
    assert "whole_over_striped" not in res
