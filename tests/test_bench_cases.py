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
