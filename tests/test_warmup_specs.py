"""The warmup enumeration covers what the API picks at run time: for a model preset, the
kernel every layout's call would compile at a warmed token count is among the warmed specs."""

from __future__ import annotations

import math
import re

from moegemm.api import warmup_specs
from moegemm.heuristics import SM90, GemmDesc, select_config
from moegemm.jit import presets
from moegemm.jit.codegen import sm90_bf16_gemm_spec, sm90_bf16_k_grouped_spec

TOKENS = [1, 64, 4096]


def test_every_family_is_enumerated_for_a_moe_model() -> None:
    specs = warmup_specs(presets.model_shapes("deepseek-v3"), TOKENS, "sm_90a", 132)
    names = {re.sub(r"_m\d+n\d+.*", "", s.name) for s in specs}
    assert {
        "sm90_bf16_dense",
        "sm90_bf16_contig",
        "sm90_bf16_offs",
        "sm90_bf16_masked",
        "sm90_bf16_kgrouped",
    } <= names
    assert len(specs) == len(set(specs)), "deduplicated"
    assert warmup_specs(presets.model_shapes("deepseek-v3"), TOKENS, "sm_100a", 148) == []


def test_runtime_picks_are_prewarmed() -> None:
    """What m_grouped_*/k_grouped_* build at run time (see api/m_grouped.py, api/k_grouped.py)
    for balanced routing at a warmed token count."""
    shapes = [s for s in presets.model_shapes("qwen3-30b-a3b") if s["num_groups"] > 1]
    shapes += [s for s in presets.model_shapes("deepseek-v3") if s["num_groups"] > 1]
    # deepseek-v3 linear2 on 8-way expert parallelism: groups of ~64 and ~128 rows, where the
    # masked choice depends on whether the buffer can hold a group's spread of rows.
    shapes.append({"n": 7168, "k": 2048, "num_groups": 32})
    for shape in shapes:
        n, k, groups = shape["n"], shape["k"], shape["num_groups"]
        for tokens in TOKENS + [2048]:
            # Each shape and token count on its own: a kernel warmed for another one must not
            # make this one pass.
            warmed = set(warmup_specs([shape], [tokens], "sm_90a", 132))
            per_group = math.ceil(tokens / groups)
            offs = GemmDesc("m_grouped_offsets", tokens, n, k, groups, expected_m=per_group)
            # Masked buffers that can hold every token of the step, or more.
            masked = [
                GemmDesc("m_grouped_masked", rows, n, k, groups, expected_m=per_group)
                for rows in (tokens, 2 * tokens, 4096 + tokens)
            ]
            for desc in (offs, *masked):
                spec = sm90_bf16_gemm_spec(select_config(desc, SM90), "bf16", False, desc.kind)
                assert spec in warmed, (desc, spec.name)
            wgrad = GemmDesc("k_grouped", n, k, per_group, groups, d_dtype="fp32")
            assert sm90_bf16_k_grouped_spec(select_config(wgrad, SM90), False) in warmed
