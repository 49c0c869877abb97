"""The fused MoE benchmark's CPU logic (benchmarks/moe_cases.py): regimes, metrics, targets."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

from moe_cases import MODELS, add_metrics, regime_for, targets


def test_regimes_and_model_sizes() -> None:
    assert [regime_for(t) for t in (1, 32, 33, 2047, 2048)] == [
        "decode", "decode", "mid", "mid", "prefill"
    ]  # fmt: skip
    dsv3 = MODELS["deepseek-v3"]
    assert dsv3.expert_bytes() == 2 * 3 * 7168 * 2048
    assert dsv3.flops(8) == 2 * 8 * 3 * 7168 * 2048


def row(model: str, t: int, ours: float, torch_us: float, touched: float, flops: float) -> dict:
    r = {"model": model, "tokens": t, "ours_us": ours, "torch_us": torch_us,
         "touched_bytes": touched, "flops": flops}  # fmt: skip
    add_metrics(r, copy_gbps=4000.0, cublas_tflops=800.0)
    return r


def test_metrics_and_targets() -> None:
    fast = row("a", 1, 100.0, 200.0, 4e8 * 0.9, 1e9)  # 3.6 TB/s of 4: 90% of copy
    slow = row("a", 8192, 1000.0, 1200.0, 1e9, 7.5e11)  # 750 TFLOP/s of 800
    assert abs(fast["pct_copy"] - 0.9) < 1e-9 and fast["x_torch"] == 2.0
    assert abs(slow["pct_cublas"] - 0.9375) < 1e-9
    got = {t["target"]: t for t in targets([fast, slow])}
    assert got["x torch composition >= 1.5 at every T"]["status"] == "missed"  # 1.2 at 8192
    assert got["decode: >= 85% of copy on touched weights"]["status"] == "met"
    assert got["prefill: >= 90% of cuBLAS TFLOP/s"]["status"] == "met"
    broken = {"model": "b", "tokens": 1, "error": "calc_diff 1e-2"}
    assert targets([fast, broken])[-1]["status"] == "missed"


def test_the_json_records_the_run_for_the_plot(monkeypatch) -> None:
    """bench_moe.py's --json carries GPU, date and commit as the other benchmarks' do, so
    plot.py titles its figures with them instead of 'unknown'."""
    import bench_moe
    import plot

    monkeypatch.setenv("TREE_COMMIT", "abc1234")
    info = bench_moe.run_info()
    assert info["commit"] == "abc1234" and info["gpu"] and info["date_utc"]
    data = bench_moe.result(info, 2758.0, 760.0, [{"model": "m", "tokens": 1}], [])
    assert {"gpu", "torch", "commit", "date_utc", "copy_gbps", "cublas_tflops"} <= data.keys()
    assert plot.detect(data) == "moe"
    line = plot.run_line(data)
    assert "unknown" not in line and "commit abc1234" in line and info["gpu"] in line


def test_a_pdl_row_shows_both_times_and_their_ratio() -> None:
    """--pdl both: the row's PDL time follows ours with ours / PDL; rows without it keep the
    plain layout."""
    import bench_moe

    plain = {"model": "m", "tokens": 1, "ours_us": 30.0, "torch_us": 90.0}
    with_pdl = {**plain, "ours_pdl_us": 24.0}
    cols = bench_moe.format_row(with_pdl).split()
    assert cols[2:5] == ["30.0", "24.0", "1.250"]
    assert bench_moe.format_row(plain).split()[2:4] == ["30.0", "90.0"]
