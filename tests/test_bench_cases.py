"""The benchmark case definitions (CPU logic): every suite loads, the anchors reproduce the
published row totals, and the two contiguous layouts index the same real rows."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

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


def test_stage_breakdown_cases() -> None:
    """The breakdown script loads without a GPU; its k-grouped groups end in partial k-blocks
    (so the tail-zeroing variant measures something) and its variants are the kernels' bits."""
    import stage_breakdown

    assert all(rows % 64 for _, _, rows, _, _ in stage_breakdown.K_GROUPED_CASES)
    assert set(stage_breakdown.COMMON_VARIANTS) == {0, 1, 2, 3}
    assert set(stage_breakdown.K_GROUPED_VARIANTS) == {0, 1, 2, 3, 4, 8}


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
    import bench_bf16

    case = next(c for c in bf16_cases.load_cases(("prefill",)) if c.regime == "prefill")
    flops = 2 * case.total_rows * case.n * case.k
    res = {"ours_us": flops / 700e6}  # 700 TFLOP/s
    bench_bf16.add_metrics(case, res, {"cublas_tflops": 800.0, "copy_gbps": 4000.0})
    bench_bf16.add_shares(res, {"cublas_tflops": 700.0}, "_adjacent")
    bench_bf16.add_shares(res, {"cublas_tflops": 1000.0}, "_start")
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
    bench_bf16.apply_run_medians([case, case], [row, failed], {"cublas_tflops": 875.0})
    assert abs(row["pct_cublas"] - 0.8) < 1e-9 and abs(row["pct_cublas_run_median"] - 0.8) < 1e-9
    assert "pct_cublas" not in failed
    summary = bench_bf16.summarize([row, failed])
    assert abs(summary["geomean"]["pct_cublas_prefill"] - 0.8) < 1e-9
    assert abs(summary["geomean"]["pct_cublas_prefill_adjacent"] - 1.0) < 1e-9
    assert abs(summary["geomean"]["pct_cublas_prefill_start"] - 0.7) < 1e-9
    assert summary["checks"]["prefill_pct_cublas>=0.92"] == [case.name]
    assert summary["checks"]["correctness_failures"] == ["failed"]
    assert summary["checks"]["gpt_oss_k2880_tflops>=640"] == []  # failures are not counted here


def test_profile_case_lists_and_refuses_configs(capsys) -> None:
    """scripts/profile_case.py (the ncu driver) finds a case's legal configs by name without a
    GPU and refuses names that are not legal for the case."""
    import pytest

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    import profile_case

    assert profile_case.main(["decode/13/offs", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "m64n256k64s4w1c1x1e64" in listed and "m128n256k64s3w2c1x1e64" in listed
    with pytest.raises(SystemExit, match="not legal"):
        profile_case.main(["decode/13/offs", "m64n999k64s4w1c1x1"])
    with pytest.raises(SystemExit, match="unknown case"):
        profile_case.main(["decode/99/offs", "--list"])


def test_quality_sample_holds_both_decode_kernels() -> None:
    """The harness's 6-config sample of a decode case includes a swapped and an unswapped
    config (a 6-config run once scored a pick 100% that every config put at 88.7%)."""
    from heuristic_quality import all_qcases, choose_candidates, desc_for, sm90_arch

    from moegemm.heuristics import sm90

    arch = sm90_arch()
    decode = [q for q in all_qcases() if q.layout in ("offs", "masked")]
    checked = 0
    for q in decode:
        desc = desc_for(q)
        if not sm90.swap_ab_possible(desc):
            continue
        chosen, pick = choose_candidates(desc, arch, 6)
        assert chosen[0] == pick and len(chosen) == 6 and len(set(chosen)) == 6
        assert {c.layout.swap_ab for c in chosen} == {False, True}, q.id
        checked += 1
    assert checked >= 20


class _FakeProblem:
    """check(config) -> calc_diff; timed(config) -> the config itself (the fake timer reads it)."""

    def __init__(self, diffs: dict) -> None:
        self.diffs = diffs
        self.calls: list[tuple[str, object]] = []

    def check(self, config):
        self.calls.append(("check", config))
        return self.diffs.get(config, 0.0)

    def timed(self, config):
        self.calls.append(("timed", config))
        return config


def test_twin_timing_checks_first_then_interleaves() -> None:
    import twin_timing

    prob = _FakeProblem({})
    clock = iter([5.0, 1.0, 9.0, 2.0, 7.0, 3.0])  # a, b, a, b, a, b
    selected: list[str] = []
    med, bad = twin_timing.check_and_time(
        prob, lambda runner: next(clock), {"a": "cfg_a", "b": "cfg_b"}, select=selected.append
    )
    assert bad == [] and med == {"a": 7.0, "b": 2.0}  # medians of (5, 9, 7) and (1, 2, 3)
    assert [c for kind, c in prob.calls if kind == "check"] == ["cfg_a", "cfg_b"]
    assert [c for kind, c in prob.calls if kind == "timed"] == ["cfg_a", "cfg_b"] * 3
    assert selected == ["a", "b"] + ["a", "b"] * 3  # each check and timing after its select


def test_twin_timing_refuses_wrong_results() -> None:
    import twin_timing

    prob = _FakeProblem({"cfg_b": 1e-2, "cfg_c": float("nan")})
    med, bad = twin_timing.check_and_time(
        prob, lambda runner: 1.0, {"a": "cfg_a", "b": "cfg_b", "c": "cfg_c"}
    )
    assert med == {} and len(bad) == 2 and bad[0].startswith("b: calc_diff")
    assert not any(kind == "timed" for kind, _ in prob.calls)  # nothing timed after a failure


def test_dense_equivalent_rows_match_the_anchor_totals() -> None:
    import dense_equivalent

    anchors = {c.name.split(":", 1)[-1]: c for c in bf16_cases.load_cases() if c.suite == "anchors"}
    totals = {"gpt-oss L1": "gpt-oss-120b L1", "dsv3 L1 prefill": "dsv3-ep8 L1 prefill"}
    for name, groups, n, k, expected_m in dense_equivalent.CASES:
        anchor = anchors[totals[name]]
        assert (anchor.num_groups, anchor.n, anchor.k) == (groups, n, k)
        ragged, balanced = dense_equivalent.case_rows(groups, expected_m)
        assert sum(ragged) == sum(balanced) == anchor.total_rows
        assert max(balanced) - min(balanced) <= 1 and max(ragged) - min(ragged) > 100


def test_walk_twin_columns_check_bits_and_time_alternately() -> None:
    """bench_bf16's walk twins: both walks run into fresh outputs and are compared bitwise (a
    difference is a check failure), then timed striped, whole, striped, whole, striped; the
    column is whole / striped of the medians; a failure is reported and keeps the row. CPU
    tensors and a fake timer stand in for the GPU."""
    import dataclasses

    import bench_bf16

    from moegemm.heuristics import SM90, GemmDesc, select_config

    desc = GemmDesc("m_grouped_offsets", m=32768, n=4096, k=7168, num_groups=8)
    pick = select_config(desc, SM90)
    assert pick.layout.stripe_m == 8
    whole = dataclasses.replace(pick, layout=dataclasses.replace(pick.layout, stripe_m=0))
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
    order.clear()
    res = run(differs=True)
    assert not res["walk_twin_bitwise"] and "walk twin differs" in res["errors"]["check"]

    def broken(b, out, config):
        raise RuntimeError("no kernel")

    res = {"errors": {}, "ours_us": 5.0}
    bench_bf16.walk_twin_columns(res, timer, (pick, whole), weights, lambda: torch.zeros(2), broken)
    assert res["ours_us"] == 5.0 and "no kernel" in res["errors"]["walk_twin"]
    assert "whole_over_striped" not in res
