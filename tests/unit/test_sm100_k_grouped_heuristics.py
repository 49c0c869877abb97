"""SM100 k-grouped BF16 (weight gradients) on the CPU: the heuristics' picks are legal and
deterministic, and what stays unsupported is refused by name. The kernels themselves are
compiled and statically checked in tests/compile/test_compile_sm100.py (not run on hardware)."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from moegemm.families import enumerate_configs, is_legal, select_config, selection_key
from moegemm.heuristics import GemmDesc, arch_for, sm100_bf16
from moegemm.jit.codegen_sm100 import sm100_bf16_k_grouped_spec, sm100_kernel_spec

ARCH = arch_for("sm_100f")
SMEM_OPT_IN = 232448
# (M, N) of the output: the suite's shapes and small or odd ones; rows per group; groups.
OUTPUTS = ((4096, 7168), (7168, 2048), (2048, 768), (128, 64), (24, 40), (5760, 2880))
ROWS = (1, 63, 65, 2048, 9600)
GROUPS = (1, 4, 16, 256)


def _desc(m: int, n: int, rows: int, groups: int, with_c: bool) -> GemmDesc:
    return GemmDesc("k_grouped", m, n, rows, groups, d_dtype="fp32", with_c=with_c)


@pytest.mark.parametrize("with_c", [False, True])
def test_picks_are_legal_and_within_the_budgets(with_c: bool) -> None:
    for (m, n), rows, groups in itertools.product(OUTPUTS, ROWS, GROUPS):
        desc = _desc(m, n, rows, groups, with_c)
        config = select_config(desc, ARCH)
        lay = config.layout
        assert is_legal(config, desc, ARCH), desc
        assert not lay.swap_ab and lay.cluster_size == 1 and not lay.stripe_m
        assert lay.block_m == 128 and lay.block_k == 64
        assert lay.block_n in (64, 128, 192, 256), "B's columns load in 64-wide chunks"
        assert config.store_cols == 0 and config.launch.num_threads == 256
        stages = config.pipeline.num_stages
        stage = (lay.block_m + lay.block_n) * lay.block_k * 2
        assert config.pipeline.smem_bytes == stages * (stage + 16) + 4 * 8 + 16 <= SMEM_OPT_IN
        assert sm100_bf16.MIN_STAGES <= stages <= sm100_bf16.MAX_STAGES
        cols = sm100_bf16.tmem_columns(config)
        assert cols >= 2 * lay.block_n and 32 <= cols <= 512 and cols & (cols - 1) == 0
        spec = sm100_kernel_spec(desc, config)
        assert spec.arch == "sm_100f" and spec.name.startswith("sm100_bf16_kgrouped_")
        assert spec.name.endswith("_c") == with_c


def test_choice_is_deterministic_and_keyed_by_k_blocks() -> None:
    for (m, n), rows, groups in itertools.product(OUTPUTS, ROWS, GROUPS):
        desc = _desc(m, n, rows, groups, False)
        first = sm100_bf16.select(desc, ARCH)
        assert sm100_bf16.select(desc, ARCH) == first == select_config(desc, ARCH)
        # Rows per group enter only as 64-row k-blocks: the same key, the same pick.
        same = dataclasses.replace(desc, k=math.ceil(rows / 64) * 64)
        assert selection_key(same, ARCH) == selection_key(desc, ARCH)
        assert sm100_bf16.select(same, ARCH) == first


def test_enumeration_is_the_four_chunk_widths() -> None:
    desc = _desc(4096, 7168, 2048, 16, True)
    configs = list(enumerate_configs(desc, ARCH))
    assert [c.layout.block_n for c in configs] == [64, 128, 192, 256]
    assert all(is_legal(c, desc, ARCH) for c in configs)
    # The suite's large shapes take the widest tile; a narrow N a narrow one.
    assert select_config(desc, ARCH).layout.block_n == 256
    assert select_config(_desc(2048, 512, 64, 8, False), ARCH).layout.block_n == 64


def test_illegal_configs_are_rejected() -> None:
    desc = _desc(4096, 7168, 2048, 16, False)
    config = select_config(desc, ARCH)
    wide = sm100_bf16.make_config(128, 96, False, ARCH)  # not whole 64-wide chunks
    assert not is_legal(wide, desc, ARCH)
    swapped = sm100_bf16.make_config(64, 128, True, ARCH)
    assert not is_legal(swapped, desc, ARCH)
    assert not is_legal(config, dataclasses.replace(desc, m=4100), ARCH), "M % 8"
    assert not is_legal(config, dataclasses.replace(desc, n=4100), ARCH), "N % 8"
    assert is_legal(config, dataclasses.replace(desc, k=2047), ARCH), "any rows per group"
    stages = dataclasses.replace(config.pipeline, num_stages=config.pipeline.num_stages + 1)
    assert not is_legal(dataclasses.replace(config, pipeline=stages), desc, ARCH)


def test_unsupported_k_grouped_problems_are_refused() -> None:
    for desc in (
        GemmDesc("k_grouped", 128, 128, 128, 2, d_dtype="bf16"),
        GemmDesc("k_grouped", 128, 128, 128, 2, d_dtype="fp32", epilogue="swiglu"),
        GemmDesc("k_grouped", 128, 128, 128, 2, ab_dtype="fp8_fp4", d_dtype="fp32"),
    ):
        with pytest.raises(ValueError, match="no SM100 kernel"):
            select_config(desc, ARCH)
    config = select_config(_desc(4096, 7168, 2048, 16, False), ARCH)
    with pytest.raises(ValueError, match="FP32 out"):
        sm100_kernel_spec(GemmDesc("k_grouped", 128, 128, 128, 2, d_dtype="bf16"), config)
    with pytest.raises(ValueError, match="no SM100 kernel"):
        sm100_kernel_spec(
            GemmDesc("k_grouped", 128, 128, 128, 2, ab_dtype="fp8_fp4", d_dtype="fp32"), config
        )
    swapped = sm100_bf16.make_config(64, 128, True, ARCH)
    with pytest.raises(ValueError, match="no swap_ab"):
        sm100_bf16_k_grouped_spec(swapped, with_c=False)
