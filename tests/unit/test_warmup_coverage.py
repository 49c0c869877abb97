"""The warmup leaves nothing to compile: for every model preset, the kernel select_config picks
at every token count 1..max_tokens in every layout (as the API describes the call) is among the
kernels warmup_specs built. Selections go through warmup.specs.Picker (one select_config per
families.selection_key); the first two tests prove that key complete.

Which calls are proved (routed rows = tokens x top_k, G groups, BF16 out):
- offs: m = rows, expected_m = ceil(rows / G);
- m_indices: every M = 128 j up to round_up(max_tokens x top_k + 127 G, 128), whatever the token
  count (the padded total depends on the routing);
- masked: max_m = tokens and max_m = max_tokens, expected_m = min(ceil(rows / G), max_m); with
  max_m = max_tokens that is every expected_m from 1 to ceil(max_tokens x top_k / G);
- k-grouped: M = n, N = k, rows per group ceil(rows / G), with and without C;
- dense (one-group shapes): M = tokens.

max_tokens is the CLI's default, 16384, for every preset (~200 CPU seconds for the file);
MOEGEMM_COVERAGE_MAX_TOKENS lowers it for quick local runs.
"""

from __future__ import annotations

import ast
import inspect
import math
import os
import random

import pytest

from moegemm.families import selection_key
from moegemm.heuristics import SM90, GemmDesc, ragged, sm90_bf16, waves
from moegemm.warmup import presets
from moegemm.warmup.specs import Picker, kernel_spec, warmup_specs


def api_descs(shape: dict, top_k: int, max_tokens: int):
    """The descs the API builds for the calls the module doc lists, written out again here
    rather than taken from warmup.specs.layer_descs."""
    n, k, g = shape["n"], shape["k"], shape.get("num_groups", 1)
    if g == 1:
        for tokens in range(1, max_tokens + 1):
            yield GemmDesc("bf16_gemm_nt", m=tokens, n=n, k=k)
        return
    for tokens in range(1, max_tokens + 1):
        rows = tokens * top_k
        per_group = math.ceil(rows / g)
        yield GemmDesc("m_grouped_offsets", rows, n, k, g, expected_m=per_group)
        for max_m in dict.fromkeys((tokens, max_tokens)):
            yield GemmDesc("m_grouped_masked", max_m, n, k, g, expected_m=min(per_group, max_m))
        for with_c in (False, True):
            yield GemmDesc("k_grouped", n, k, per_group, g, d_dtype="fp32", with_c=with_c)
    top = -(-(max_tokens * top_k + g * 127) // 128) * 128
    for m in range(128, top + 1, 128):
        yield GemmDesc("m_grouped_contiguous", m, n, k, g)


# Share of the descs each coverage test also selects without the memo (a few hundred per shape).
FRESH_SAMPLE_RATE = 0.003


def coverage_max_tokens(model: str) -> int:
    env = os.environ.get("MOEGEMM_COVERAGE_MAX_TOKENS")
    if env:
        return int(env)
    return 16384


@pytest.mark.parametrize("model", presets.known_models())
def test_every_pick_was_built(model: str) -> None:
    top_k, shapes = presets.model_top_k(model), presets.model_shapes(model)
    max_tokens = coverage_max_tokens(model)
    picker = Picker(SM90)
    built = set(warmup_specs(shapes, range(1, max_tokens + 1), top_k, "sm_90a", 132, picker=picker))
    kinds = set()
    specs = {}  # rendering a kernel's source is the slow part: once per kernel
    # The picker answers from its memo, which the warmup filled from other descs of the same
    # key: a sample of descs is also selected afresh, so a key that folds descs the heuristics
    # tell apart fails here, not only in the key tests below.
    rng = random.Random(model)
    for shape in shapes:
        missing = {}
        for desc in api_descs(shape, top_k, max_tokens):
            config = picker(desc)
            if rng.random() < FRESH_SAMPLE_RATE:
                fresh = sm90_bf16.select(desc, SM90)
                assert config == fresh, f"{model}: memo {config} != select {fresh} for {desc}"
            ident = (desc.kind, desc.d_dtype, desc.with_c, config)
            spec = specs.get(ident)
            if spec is None:
                spec = specs[ident] = kernel_spec(desc, config)
            kinds.add(desc.kind)
            if spec not in built:
                missing.setdefault(spec.name, desc)
        assert not missing, f"{model}: {len(missing)} kernels not warmed, e.g. {missing}"
    assert kinds >= {"m_grouped_offsets", "m_grouped_masked", "m_grouped_contiguous", "k_grouped"}


# --- The memo key is complete. (1) Where the model reads the rows: every read of desc.m and
# desc.expected_m in the heuristics is in a function that selection_key accounts for.
KEYED_READERS = {
    # ragged.py: the rows per group (in the key), the masked capacity (RaggedBlocks.cap_blocks)
    "expected_rows_per_group",
    "masked_capacity",
    # ragged.py: fewer packed rows than groups seen as the groups they reach (the FP8 x FP4
    # key applies the same view first)
    "routed_view",
    # waves.py: tiles of the balanced layouts (ceil(m / block_m): in the dense / m_indices key;
    # k-grouped m is in its key); the wave bound (RaggedBlocks.max_blocks)
    "count_tiles",
    "of",
    # sm90_bf16.py: the walk's rows (in the key), busy warpgroups and epilogue rows of the
    # balanced layouts (ceil(m / 64 or 128), min(block_m, m)), legality (m % 8: k-grouped m is
    # in its key), and the keys themselves
    "walk_rows",
    "busy_atom_fraction",
    "epilogue_cycles",
    "is_legal",
    "candidate_key",
    "selection_key",
}


def _row_readers(module) -> set[str]:
    tree = ast.parse(inspect.getsource(module))
    readers = set()
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef):
            continue
        for node in ast.walk(func):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("m", "expected_m")
                and isinstance(node.value, ast.Name)
                and node.value.id == "desc"
            ):
                readers.add(func.name)
    return readers


def test_rows_are_read_only_where_the_key_looks() -> None:
    readers = set()
    for module in (ragged, waves, sm90_bf16):
        readers |= _row_readers(module)
    assert readers == KEYED_READERS, (
        "a heuristics function reads desc.m / desc.expected_m that selection_key may not "
        f"cover: update the key and this list: {sorted(readers ^ KEYED_READERS)}"
    )


# (2) Descs that share a key get the same candidates and the same cycle estimate for every one
# of them (so the same pick), compared exactly at the two extremes of every key's descs (the
# smallest and largest m and capacity), across the regimes where the key folds many row counts
# (decode with swapped tiles, capacities that cut the rows' spread, wave bounds that bind,
# prefill).
COLLISION_SHAPES = [
    (4096, 7168, 256, 8, 1200),  # deepseek_v3 linear1
    (4096, 14336, 8, 2, 700),  # mixtral linear2
    (2048, 768, 128, 8, 600),  # qwen3-30b linear2
]


@pytest.mark.parametrize("n,k,groups,top_k,max_tokens", COLLISION_SHAPES)
def test_descs_with_one_key_get_one_estimate(n, k, groups, top_k, max_tokens) -> None:
    shape = {"n": n, "k": k, "num_groups": groups}
    by_key: dict[tuple, list[GemmDesc]] = {}
    descs = list(api_descs(shape, top_k, max_tokens))
    descs += [GemmDesc("bf16_gemm_nt", m, n, k) for m in range(1, 3000, 7)]
    for desc in descs:
        by_key.setdefault(selection_key(desc, SM90), []).append(desc)
    assert len(by_key) < len(descs) / 3, "the key folds row counts"
    checked = 0
    for group in by_key.values():
        if len(group) < 2:
            continue
        ends = sorted(group, key=lambda d: (d.m, d.expected_m))
        low, high = ends[0], ends[-1]
        configs = sm90_bf16.candidates(low, SM90)
        assert configs == sm90_bf16.candidates(high, SM90), (low, high)
        for config in configs:
            cost = sm90_bf16.estimate_cycles(config, low, SM90)
            assert cost == sm90_bf16.estimate_cycles(config, high, SM90), (low, high, config)
        checked += 1
    assert checked > 50


def test_warmup_specs_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="multiple of 8"):
        warmup_specs([{"n": 100, "k": 64}], [1], 1, "sm_90a", 132)
    with pytest.raises(ValueError, match="num_groups must be positive"):
        warmup_specs([{"n": 64, "k": 64, "num_groups": 0}], [1], 1, "sm_90a", 132)
    with pytest.raises(TypeError, match="n must be an integer"):
        warmup_specs([{"n": 64.0, "k": 64}], [1], 1, "sm_90a", 132)
    with pytest.raises(ValueError, match="has no 'k'"):
        warmup_specs([{"n": 64}], [1], 1, "sm_90a", 132)
    with pytest.raises(ValueError, match="top_k must be positive"):
        warmup_specs([{"n": 64, "k": 64}], [1], 0, "sm_90a", 132)
    with pytest.raises(ValueError, match="num_sms must be positive"):
        warmup_specs([{"n": 64, "k": 64}], [1], 1, "sm_90a", -5)
    with pytest.raises(ValueError, match="must not be empty"):
        warmup_specs([{"n": 64, "k": 64}], [], 1, "sm_90a", 132)
    assert all(
        s.arch == "sm_100f" for s in warmup_specs([{"n": 64, "k": 64}], [1], 1, "sm_100a", 148)
    )
