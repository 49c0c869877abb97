"""The FP8 x FP4 convert-ahead kernel's place in the heuristics (heuristics/
sm90_fp8_fp4_convert_ahead.py): offered only for windowed prepared SM90 weights within the
workspace limit, picked at prefill sizes and not where its conversion of every group's weights
costs more than the table kernels (256 rows a group, measured on the H100), its workspace sizes,
the limit's knob (`moegemm.set_workspace_limit`), and forced configs refused before any
launch where they do not compute the desc."""

from __future__ import annotations

import dataclasses

import pytest

import moegemm
from moegemm import families
from moegemm.heuristics import SM90, SM100, GemmDesc
from moegemm.heuristics import sm90_fp8_fp4_convert_ahead as ca
from moegemm.launch import device, plans


def desc(rows: int, g: int = 32, n: int = 4096, k: int = 7168, **kw) -> GemmDesc:
    fields = {"weights": "prepared", "windowed": True, **kw}
    return GemmDesc("m_grouped_offsets", g * rows, n, k, g, ab_dtype="fp8_fp4", expected_m=rows,
                    **fields)  # fmt: skip


@pytest.fixture(autouse=True)
def _default_limit():
    moegemm.set_workspace_limit(ca.DEFAULT_WORKSPACE_LIMIT)
    yield
    moegemm.set_workspace_limit(ca.DEFAULT_WORKSPACE_LIMIT)


@pytest.mark.parametrize("shape", [(32, 4096, 7168), (32, 5760, 2880), (128, 2048, 768)])
def test_picked_at_prefill_not_at_256_rows(shape) -> None:
    g, n, k = shape
    for rows in (1024, 4096):
        assert ca.is_convert_ahead(families.select_config(desc(rows, g, n, k), SM90)), rows
    for rows in (8, 64, 256):
        assert not ca.is_convert_ahead(families.select_config(desc(rows, g, n, k), SM90)), rows


def test_tma_store_epilogue_where_measured() -> None:
    """The TMA-store epilogue: offered at m128n192 without a fused-layer epilogue (and then the
    pick), never at m128n128 nor with a MoE epilogue, whose stores go from registers."""
    big = desc(1024)
    pick = families.select_config(big, SM90)
    assert ca.is_convert_ahead(pick) and pick.layout.block_n == 192 and pick.store_cols == 64
    assert pick.pipeline.num_stages == ca.max_stages(192, 64, SM90) < ca.max_stages(192, 0, SM90)
    register = ca.make_config(192, ca.max_stages(192, 0, SM90))
    assert families.is_legal(register, big, SM90)
    assert ca.estimate_cycles(pick, big, SM90, 0.0) < ca.estimate_cycles(register, big, SM90, 0.0)
    narrow = ca.make_config(128, ca.max_stages(128, 64, SM90), 64)
    assert not families.is_legal(narrow, big, SM90)
    assert all(
        c.store_cols == 0 or c.layout.block_n == 192 for c in ca.enumerate_configs(big, SM90)
    )
    swiglu = dataclasses.replace(big, epilogue="swiglu")
    assert all(c.store_cols == 0 for c in ca.enumerate_configs(swiglu, SM90))
    assert not families.is_legal(pick, swiglu, SM90)


def test_only_windowed_prepared_sm90_weights() -> None:
    big = desc(4096)
    config = families.select_config(big, SM90)
    assert ca.is_convert_ahead(config)
    for other in (
        dataclasses.replace(big, windowed=False),
        dataclasses.replace(big, weights="raw", windowed=False),
    ):
        pick = families.select_config(other, SM90)
        assert not ca.is_convert_ahead(pick) or pick.layout.swap_ab or other.weights == "raw"
        assert not families.is_legal(config, other, SM90)
    with pytest.raises(ValueError, match="windowed"):
        GemmDesc("m_grouped_offsets", 64, 4096, 7168, 8, ab_dtype="fp8_fp4", windowed=True)
    sm100 = families.select_config(big, SM100)  # its own tcgen05 kernel, no workspace
    assert families.lookup(SM100, big).workspace(big, sm100) is None


def test_workspace_sizes_and_launcher() -> None:
    d = desc(1024, 8, 4096, 2880)  # K 2880: Kp 2944, 23 k-blocks
    config = families.select_config(d, SM90)
    assert ca.workspace_bytes(d) == (8 * 4096 * 2944, 8 * 23 * 64 + 1)
    family = families.lookup(SM90, d)
    assert family.workspace(d, config) == ca.workspace_bytes(d)
    assert family.launcher_name(d, config) == "Sm90Fp8Fp4ConvertAheadGemmLauncher"
    moe = dataclasses.replace(d, epilogue="swiglu")
    assert family.launcher_name(moe, config) == "Sm90Fp8Fp4ConvertAheadMoeGemmLauncher"
    table = families.select_config(desc(8, 8, 4096, 2880), SM90)
    assert family.workspace(d, table) is None


def test_the_workspace_limit() -> None:
    big = desc(4096)
    assert moegemm.get_workspace_limit() == ca.DEFAULT_WORKSPACE_LIMIT
    cache = device.register_plan_cache({"key": "plan"})
    moegemm.set_workspace_limit(ca.workspace_bytes(big)[0] - 1)
    assert cache == {}, "plans made under another limit are dropped"
    assert not ca.is_convert_ahead(families.select_config(big, SM90))
    moegemm.set_workspace_limit(ca.workspace_bytes(big)[0])
    assert ca.is_convert_ahead(families.select_config(big, SM90))
    moegemm.set_workspace_limit(0)
    assert not ca.is_convert_ahead(families.select_config(big, SM90))
    for bad, error in ((-1, ValueError), (True, TypeError), (1.5, TypeError), ("4G", TypeError)):
        with pytest.raises(error):
            moegemm.set_workspace_limit(bad)
    assert moegemm.get_workspace_limit() == 0


def test_forced_configs_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """plans.build_launcher refuses a forced config that does not compute the desc (here the
    convert-ahead kernel on weights with exact-path blocks) before compiling or launching."""
    monkeypatch.setattr(plans, "arch_for_device", lambda device: SM90)
    monkeypatch.setattr(plans, "load_kernel", lambda spec: pytest.fail("compiled"))
    config = families.select_config(desc(4096), SM90)
    with pytest.raises(ValueError, match="does not compute"):
        plans.build_launcher(0, desc(4096, windowed=False), config)
