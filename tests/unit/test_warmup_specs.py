"""warmup_specs: every kernel family of a MoE model, routed rows = tokens x top_k, kernels of
other token counts never make a count pass, and the GPU check of the built kernels (gpu)."""

from __future__ import annotations

import io
import math
import re
import time

import pytest

from moegemm.families import select_config
from moegemm.heuristics import SM90, GemmDesc
from moegemm.warmup import presets
from moegemm.warmup.specs import MAX_NUM_GROUPS, kernel_spec, layer_descs, warmup_specs


def _family(name: str) -> str:
    return re.sub(r"_m\d+n\d+.*", "", name)


def test_every_family_is_enumerated_for_a_moe_model() -> None:
    shapes = presets.model_shapes("deepseek-v3")
    specs = warmup_specs(shapes, [1, 64, 4096], presets.model_top_k("deepseek-v3"), "sm_90a", 132)
    assert {
        "sm90_bf16_dense",
        "sm90_bf16_contig",
        "sm90_bf16_offs",
        "sm90_bf16_masked",
        "sm90_bf16_kgrouped",
    } <= {_family(s.name) for s in specs}
    assert len(specs) == len(set(specs)), "deduplicated"
    # SM100: every BF16 layout, the k-grouped weight gradient included (compiled and
    # statically checked, not run on hardware), built for sm_100f.
    sm100 = warmup_specs(shapes, [1, 64], 8, "sm_100a", 148)
    assert sm100 and all(s.arch == "sm_100f" for s in sm100)
    assert {_family(s.name) for s in sm100} == {
        "sm100_bf16_dense",
        "sm100_bf16_contig",
        "sm100_bf16_offs",
        "sm100_bf16_masked",
        "sm100_bf16_kgrouped",
    }
    # With and without C: two k-grouped kernels at least.
    assert sum(s.name.startswith("sm100_bf16_kgrouped_") for s in sm100) >= 2


def test_routed_rows_are_tokens_times_top_k() -> None:
    """One token count on its own: the kernels for tokens x top_k rows are built, and not the
    one for tokens rows (the old warmup's mistake) where the picks differ."""
    shape = {"n": 7168, "k": 2048, "num_groups": 256}
    for tokens, top_k in ((64, 8), (512, 8), (3000, 8)):
        rows = tokens * top_k
        warmed = set(warmup_specs([shape], [tokens], top_k, "sm_90a", 132))
        offs = GemmDesc(
            "m_grouped_offsets", rows, 7168, 2048, 256, expected_m=math.ceil(rows / 256)
        )
        assert kernel_spec(offs, select_config(offs, SM90)) in warmed
        for max_m in (tokens,):
            per_group = min(math.ceil(rows / 256), max_m)
            masked = GemmDesc("m_grouped_masked", max_m, 7168, 2048, 256, expected_m=per_group)
            assert kernel_spec(masked, select_config(masked, SM90)) in warmed
    # 1024 tokens as 1024 rows (4 per group) pick a swapped m8 tile; as 8192 rows, not.
    as_tokens = GemmDesc("m_grouped_offsets", 1024, 7168, 2048, 256, expected_m=4)
    warmed = set(warmup_specs([shape], [1024], 8, "sm_90a", 132))
    assert kernel_spec(as_tokens, select_config(as_tokens, SM90)) not in warmed


def test_m_indices_covers_every_aligned_m_up_to_the_padded_bound() -> None:
    descs = [
        d for d in layer_descs(4096, 7168, 32, [1, 100], 8) if d.kind == "m_grouped_contiguous"
    ]
    top = -(-(100 * 8 + 32 * 127) // 128) * 128
    assert [d.m for d in descs] == list(range(128, top + 1, 128))


def test_one_group_shapes_are_dense_with_every_token() -> None:
    descs = list(layer_descs(4096, 7168, 1, [1, 2, 300], 8))
    assert [(d.kind, d.m) for d in descs] == [("bf16_gemm_nt", t) for t in (1, 2, 300)]


@pytest.mark.gpu
def test_run_check_passes_on_a_small_preset() -> None:
    from moegemm.warmup.check import run_check

    # One shape (linear2: 128 experts, N 2048, K 768) at a decode and a mid token count keeps
    # the kernels to compile few; empty groups and single-row groups occur at 5 tokens.
    out = io.StringIO()
    shapes = presets.model_shapes("qwen3-30b-a3b")[1:]
    assert run_check(shapes, presets.model_top_k("qwen3-30b-a3b"), token_counts=[5, 300], out=out)
    text = out.getvalue()
    for layout in ("offs", "m_indices", "masked", "k-grouped"):
        assert text.count(f"\n{layout} ") == 2 * len(shapes), (layout, text)
    assert "all passed" in text and "FAILED" not in text


def test_warmup_builds_the_spec_a_call_loads() -> None:
    """warmup.specs.kernel_spec (torch-free) and the API's plans.kernel_spec agree."""
    from moegemm.launch.plans import kernel_spec as api_kernel_spec

    descs = [
        GemmDesc("bf16_gemm_nt", 100, 4096, 7168),
        GemmDesc("bf16_gemm_nt", 100, 4096, 7168, d_dtype="fp32", with_c=True),
        GemmDesc("m_grouped_contiguous", 4096, 4096, 7168, 32),
        GemmDesc("m_grouped_offsets", 96, 4096, 7168, 32, expected_m=3),
        GemmDesc("m_grouped_offsets", 32768, 4096, 7168, 32, expected_m=1024),
        GemmDesc("m_grouped_masked", 256, 4096, 7168, 32, expected_m=8),
        GemmDesc("k_grouped", 4096, 7168, 512, 32, d_dtype="fp32", with_c=True),
    ]
    for desc in descs:
        config = select_config(desc, SM90)
        assert kernel_spec(desc, config) == api_kernel_spec(desc, config), desc


def test_num_groups_and_top_k_are_bounded() -> None:
    """The m_indices layout costs one selection per group: a group count past MAX_NUM_GROUPS is
    refused at once (not enumerated for minutes), as is a top_k above a grouped shape's
    experts; a dense shape reads no top_k."""
    start = time.monotonic()
    huge = {"n": 4096, "k": 7168, "num_groups": 100_000_000}
    with pytest.raises(ValueError, match=r"num_groups must be at most 4096 .*got 100000000$"):
        warmup_specs([huge], [1], 1, "sm_90a", 132)
    assert time.monotonic() - start < 10
    assert MAX_NUM_GROUPS == 4096
    with pytest.raises(ValueError, match=r"top_k must be at most num_groups 8 .*got 9$"):
        warmup_specs([{"n": 512, "k": 512, "num_groups": 8}], [1], 9, "sm_90a", 132)
    assert warmup_specs([{"n": 512, "k": 512}], [1], 9, "sm_90a", 132)
