"""tools/resource_report.py on the CPU: the SASS histogram, the report's difference marks and
the config set (every family present, every forced config within the SM90 shared memory)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "resource_report.py"
SM90_SMEM_BUDGET = 232448


@pytest.fixture(scope="module")
def rr():
    spec = importlib.util.spec_from_file_location("resource_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["resource_report"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SASS = """
        Function : kernel
        /*0000*/                   LDC R1, c[0x0][0x28] ;                  /* 0x00000a00ff017b82 */
        /*0010*/              @!P0 BRA 0x250 ;                             /* 0x0000000000208947 */
        /*0020*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR8], R24 ;  /* 0x0 */
        /*0030*/                   STSM.16.M88.4 [R3], R4 ;                /* 0x0 */
        /*0040*/                   STS.128 [R3], R4 ;                      /* 0x0 */
        /*0050*/              @P1 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [R1], RZ ; /* 0x0 */
        /*0060*/                   NOP ;                                   /* 0x0 */
"""


def test_histogram_counts_classes_and_leaves_nops_out(rr) -> None:
    row = rr.sass_histogram(SASS)
    assert row["HGMMA"] == 1 and row["BRA"] == 1 and row["SYNCS"] == 1
    assert row["STSM"] == 1 and row["STS"] == 1, "stmatrix is not counted as STS"
    assert row["TOTAL"] == 6
    other = rr.sass_histogram(SASS.replace("R24, gdesc", "R26, gdesc"))
    assert other["HGMMA"] == 1 and other["SASS_SHA"] != row["SASS_SHA"]
    moved = SASS.replace("/*0060*/", "/*0070*/")
    assert rr.sass_histogram(moved)["SASS_SHA"] == row["SASS_SHA"], "addresses do not count"


def test_report_marks_differences(rr) -> None:
    case = rr.Case("c", "bf16_gemm_nt", rr.forced_config("bf16_gemm_nt", 64, 64, 8), "bf16", False)
    base = {k: 0 for k in rr.COLUMNS} | {"REG": 168, "SASS_SHA": "a"}
    same = rr.format_report([case], [dict(base)], [dict(base)])
    rows = same.split("\n", 2)[2]  # past the header, which explains the marks
    assert "  = " in rows and "(b" not in rows and "0 with more registers" in rows
    worse = rr.format_report([case], [base | {"REG": 176, "SASS_SHA": "b"}], [dict(base)])
    assert "REG=176(b168)" in worse and "1 with more registers" in worse
    failed = rr.format_report([case], [{"error": "boom"}], [dict(base)])
    assert "ERROR new: boom" in failed and "1 failed to build" in failed


def test_config_set_covers_every_family(rr) -> None:
    forced = rr.forced_cases()
    for case in forced:
        assert case.config["pipeline"]["smem_bytes"] <= SM90_SMEM_BUDGET, case.label
    labels = " ".join(c.label for c in forced + rr.picked_cases(2))
    for family in ("bf16_gemm_nt", "m_grouped_contiguous", "m_grouped_offsets",
                   "m_grouped_masked", "k_grouped", "c2x1", "c1x2", "p8", "swap"):  # fmt: skip
        assert family in labels
    for cols in ("e16", "e32", "e64"):
        assert cols in labels
