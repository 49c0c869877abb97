"""benchmarks/host_path_profile.py --cpu-stub: every public function timed, JSON written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_cpu_stub_profile_times_every_public_function(tmp_path: Path, subprocess_env) -> None:
    out = tmp_path / "host.json"
    script = REPO / "benchmarks" / "host_path_profile.py"
    subprocess.run(
        [sys.executable, str(script), "--cpu-stub", "--rounds", "2", "--json", str(out)],
        env=subprocess_env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    result = json.loads(out.read_text())
    assert result["mode"] == "cpu-stub"
    assert result["plans"] == 5  # each function stored its plan: the timed calls were hits
    names = [row["function"] for row in result["rows"]]
    assert names == ["dense", "offs", "m_indices", "masked", "k_grouped"]
    assert all(row["us_per_call"] > 0 for row in result["rows"])
