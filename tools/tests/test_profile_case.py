"""tools/profile_case.py (the Nsight Compute driver) without a GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOOLS))
sys.path.insert(0, str(TOOLS.parent / "benchmarks"))


def test_profile_case_lists_and_refuses_configs(capsys) -> None:
    """tools/profile_case.py (the ncu driver) finds a case's legal configs by name without a
    GPU and refuses names that are not legal for the case."""
    import profile_case

    assert profile_case.main(["decode/13/offs", "--list"]) == 0
    listed = capsys.readouterr().out
    assert "m64n256k64s4w1c1x1e64" in listed and "m128n256k64s3w2c1x1e64" in listed
    with pytest.raises(SystemExit, match="not legal"):
        profile_case.main(["decode/13/offs", "m64n999k64s4w1c1x1"])
    with pytest.raises(SystemExit, match="unknown case"):
        profile_case.main(["decode/99/offs", "--list"])
