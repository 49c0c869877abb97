"""scripts/timeline.py's reading of the probe's printf lines (CPU only)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import timeline

# Two CTAs; CTA 1's producer resolved no tile (first-tile stamp 0). Fields after the CTA:
# four global-timer stamps (ns), four SM-clock stamps, tiles.
LINES = """\
TLP 0 1000 2000 3000 9000 10 20 30 40 2
TLM 0 1100 4000 8000 9500 11 50 60 75 2
noise from another printf
TLP 1 1500 2500 0 9100 10 25 0 45 0
TLM 1 1600 4500 8500 9900 11 55 66 70 1
TLM 2 1600 4500
"""


def test_parse_and_summarize() -> None:
    launch = timeline.parse_lines(LINES)
    assert sorted(launch["P"]) == [0, 1] and sorted(launch["M"]) == [0, 1]  # short line dropped
    s = timeline.summarize(launch)
    assert s["ctas"] == 2
    assert s["span_us"] == pytest.approx((9900 - 1000) / 1e3)
    points = s["points_us"]
    assert points["P.entry"] == pytest.approx([0.0, 0.25, 0.5])
    assert points["P.first_tile"] == pytest.approx([2.0, 2.0, 2.0])  # the zero stamp is left out
    assert points["M.first_data"] == pytest.approx([3.0, 3.25, 3.5])
    assert points["M.exit"] == pytest.approx([8.5, 8.7, 8.9])
    cycles = s["median_cycles"]
    assert cycles["P.entry->ready"] == pytest.approx(12.5)
    assert cycles["P.ready->first_tile"] == pytest.approx(10)  # CTA 1 has no first tile
    assert cycles["M.last_mainloop_end->exit"] == pytest.approx((15 + 4) / 2)
    assert s["tiles_min_max"] == [1, 2]
