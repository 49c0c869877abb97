"""benchmarks/ep_cases.py (bench_ep.py's CPU logic): buffer sizing, targets, verdicts, bytes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/

from ep_cases import (
    MIN_MAX_M,
    MODELS,
    max_m_for,
    nvlink_bytes,
    parse_list,
    target_for,
    verdicts,
)


def test_max_m() -> None:
    ds = MODELS["deepseek-v3"]
    assert max_m_for(ds, 128, 4, None) == 512
    assert max_m_for(ds, 1, 2, 4.0) == 2  # never more than every token
    assert max_m_for(ds, 8192, 2, 4.0) == 4 * 8192 * 8 * 2 // 256
    assert max_m_for(ds, 64, 2, 4.0) == MIN_MAX_M


def test_targets_and_verdicts() -> None:
    assert target_for(1) == target_for(256) == 1.5
    assert target_for(512) is None and target_for(2048) == target_for(8192) == 1.1
    rows = [{"ranks": 2, "weights": "bf16", "tokens": t, "speedup": s}
            for t, s in ((8, 2.0), (128, 1.4), (2048, 1.2), (512, 0.1), (8192, None))]  # fmt: skip
    v = {x["band"]: x for x in verdicts(rows)}
    assert v["T <= 256"]["met"] is False and v["T <= 256"]["min"] == 1.4
    assert v["T in (2048, 8192)"]["met"] is True


def test_bytes_and_parsing() -> None:
    assert nvlink_bytes(3, 2, 7168, False) == 5 * 2 * 7168
    assert nvlink_bytes(1, 0, 256, True) == 256 + 8
    assert parse_list("1,8,32") == [1, 8, 32]
    with pytest.raises(ValueError, match="not among"):
        parse_list("3", (1, 2, 4))


def test_cli_refuses_an_unknown_model_in_one_line(capsys) -> None:
    pytest.importorskip("torch")
    import bench_ep

    with pytest.raises(SystemExit) as exc:
        bench_ep.parse_args(["--models", "qwen3-30b-a3b"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "not among" in err and "Traceback" not in err
