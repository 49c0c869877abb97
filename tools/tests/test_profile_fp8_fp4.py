"""tools/profile_fp8_fp4.py without a GPU: the description it profiles, its config list and
its refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tools/

import profile_fp8_fp4 as tool

from moegemm.families import select_config
from moegemm.heuristics import SM90


def test_descs_per_layout() -> None:
    masked = tool.desc_of(tool.parse(["--rows", "8", "--layout", "masked"]))
    assert (masked.kind, masked.m, masked.expected_m, masked.ab_dtype) == (
        "m_grouped_masked",
        8,
        8,
        "fp8_fp4",
    )
    offs = tool.desc_of(tool.parse(["--rows", "300", "--layout", "offs", "--groups", "4"]))
    assert (offs.kind, offs.m, offs.num_groups) == ("m_grouped_offsets", 1200, 4)
    idx = tool.desc_of(tool.parse(["--rows", "130", "--layout", "m_indices", "--weights", "raw"]))
    assert (idx.kind, idx.m, idx.weights) == ("m_grouped_contiguous", 32 * 256, "raw")


def test_few_active_groups() -> None:
    """--active A: A groups spread over G hold the rows; the description is the API's (the
    packed layout's rows per group rounded up)."""
    args = tool.parse(["--groups", "128", "--rows", "1", "--layout", "offs", "--active", "8"])
    sizes = tool.group_rows(args)
    assert sum(sizes) == 8 and [g for g, r in enumerate(sizes) if r] == list(range(0, 128, 16))
    desc = tool.desc_of(args)
    assert (desc.m, desc.expected_m, desc.num_groups) == (8, 1, 128)
    ragged = tool.parse(["--groups", "32", "--rows", "8", "--ragged", "--active", "4"])
    assert sum(1 for r in tool.group_rows(ragged) if r) == 4
    with pytest.raises(SystemExit):
        tool.parse(["--groups", "8", "--active", "9"])


def test_list_holds_the_pick(capsys: pytest.CaptureFixture[str]) -> None:
    assert tool.main(["--list", "--rows", "8"]) == 0
    names = capsys.readouterr().out.split()
    pick = select_config(tool.desc_of(tool.parse(["--rows", "8"])), SM90)
    assert pick.short_name() in names


@pytest.mark.parametrize("bad", [["--k", "100"], ["--rows", "0"], ["--layout", "dense"]])
def test_bad_arguments_exit_2(bad: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        tool.parse(bad)
    assert exc.value.code == 2


def test_unknown_config_is_refused() -> None:
    with pytest.raises(SystemExit, match="not legal here"):
        tool.main(["--config", "m64n999k128s2w1c1x1x2"])
