"""What the warmup builds: every kernel the heuristics can pick for a model's MoE GEMMs, for
every token count up to a maximum and every layout, so that serving compiles nothing.

For a shape with several groups (routed experts) and `tokens` tokens, the layer sees
rows = tokens x top_k routed rows, described as the API describes them:

- packed offsets (`offs`): m = rows, expected_m = ceil(rows / G);
- `m_indices`: M is the padded total of the groups' segments, each aligned to
  CONTIGUOUS_ALIGNMENT (128) rows. It depends on the routing, not only on the rows: anything
  from 128 up to round_up(rows + G * 127, 128) (vLLM's `compute_aligned_M` bound, which engines
  also allocate and pass whole). Every multiple of 128 up to that bound at the largest token
  count is covered (MINDICES_M below);
- masked: a [G, max_m, K] buffer with expected_m = min(ceil(rows / G), max_m). The warmup covers
  the buffers DeepGEMM-style engines allocate (masked_max_ms below), assumed to hold any
  routing: max_m = tokens (a buffer sized for the step: no expert receives a token twice) and
  max_m = max_tokens (one buffer allocated for the largest step and reused, as DeepEP's
  low-latency dispatch allocates room for every token of the ranks per expert). The heuristics
  read max_m only where a group's spread of rows reaches it, so any other buffer that large
  picks the same kernels except near that edge; a buffer sized to the mean load (e.g.
  round_up(max_tokens x top_k / G, 128)) is not covered. The expected_m hint is assumed to be
  the mean, ceil(rows / G); with max_m = max_tokens every hint from 1 to
  ceil(max_tokens x top_k / G) occurs, so any hint in that range is covered there;
- the k-grouped weight gradient (M = n, N = k, rows per group ceil(rows / G)), with and without
  the FP32 accumulator C.

A shape with one group (shared experts, dense layers) is `bf16_gemm_nt` with M = tokens (every
token goes through it). All BF16 out.

With weights="mxfp4" (experts that ship MXFP4, as gpt-oss does) the same shapes are built as the
FP8 x FP4 family instead (GemmDesc ab_dtype "fp8_fp4": FP8 activations, MXFP4 weights, BF16
out), not in addition to BF16: the dense (one-group shapes), offsets, m_indices and masked
layouts above with the same rows, each for both weight forms a call may pass (the raw checkpoint
layout and prepare_mxfp4_weights' "prepared" one: separate kernels). This family has no
k-grouped layout (no weight gradient of FP4 weights). K must be a multiple of 32 (one UE8M0
scale per 32 weights).

The enumeration is exact: it selects once per families.selection_key (descs with equal keys get
the same config), which makes 16384 token counts cost a few thousand selections per shape.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Sequence

from ..families import for_operands, kernel_spec, lookup, select_config, selection_key
from ..heuristics import CONTIGUOUS_ALIGNMENT, ArchSpec, GemmConfig, GemmDesc, arch_for
from ..jit.spec import KernelSpec

DEFAULT_MAX_TOKENS = 16384
# The m_indices layout is enumerated at every multiple of 128 rows up to rows + num_groups * 127
# (an engine's whole compute_aligned_M buffer): one selection per group. This bound keeps a
# shape's enumeration to about a second; MoE models have at most a few hundred experts.
MAX_NUM_GROUPS = 4096
WEIGHTS = ("bf16", "mxfp4")  # the expert weights a warmup builds for (check_weights)
MXFP4_GROUP = 32  # weights per UE8M0 scale: K must be a multiple of it


def round_up(x: int, align: int) -> int:
    return -(-x // align) * align


def check_shape(shape: dict) -> tuple[int, int, int]:
    """(n, k, num_groups) of a shape dict: TypeError for a non-dict or a non-integer field,
    ValueError for a missing or non-positive one, an n or k that is not a multiple of 8 or
    num_groups above MAX_NUM_GROUPS."""
    if not isinstance(shape, dict):
        raise TypeError(f"a shape must be a dict with n, k and optional num_groups, got {shape!r}")
    values = []
    for field, default in (("n", None), ("k", None), ("num_groups", 1)):
        value = shape.get(field, default)
        if value is None:
            raise ValueError(f"shape {shape!r} has no {field!r}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"shape {shape!r}: {field} must be an integer, got {value!r}")
        if value <= 0:
            raise ValueError(f"shape {shape!r}: {field} must be positive, got {value}")
        values.append(value)
    n, k, groups = values
    for field, value in (("n", n), ("k", k)):
        if value % 8:
            raise ValueError(
                f"shape {shape!r}: {field} must be a multiple of 8 (16-byte rows), got {value}"
            )
    check_num_groups(groups, f"shape {shape!r}: num_groups")
    return n, k, groups


def check_num_groups(num_groups: int, what: str = "num_groups") -> None:
    """ValueError for more groups than the warmup enumerates (MAX_NUM_GROUPS)."""
    if num_groups > MAX_NUM_GROUPS:
        raise ValueError(
            f"{what} must be at most {MAX_NUM_GROUPS} (the experts of one layer), got {num_groups}"
        )


def check_top_k(top_k: int, num_groups: int, what: str = "top_k") -> None:
    """ValueError for more experts per token than a grouped shape has: a token's top_k choices
    are distinct experts. One-group shapes (dense) read no top_k."""
    if num_groups > 1 and top_k > num_groups:
        raise ValueError(
            f"{what} must be at most num_groups {num_groups} (a token picks top_k distinct "
            f"experts), got {top_k}"
        )


def check_weights(weights: object) -> str:
    """`weights` if it is one of WEIGHTS: TypeError for a non-string, ValueError otherwise."""
    if not isinstance(weights, str):
        raise TypeError(f"weights must be a string, one of {WEIGHTS}, got {weights!r}")
    if weights not in WEIGHTS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHTS)}, got {weights!r}")
    return weights


def check_mxfp4_shape(shape: dict, k: int) -> None:
    """ValueError for a K that MXFP4 weights cannot have (one scale byte per 32 of K)."""
    if k % MXFP4_GROUP:
        raise ValueError(
            f"shape {shape!r}: k must be a multiple of {MXFP4_GROUP} for MXFP4 weights (one "
            f"UE8M0 scale per {MXFP4_GROUP} of K), got {k}"
        )


def masked_max_ms(tokens: int, max_tokens: int) -> tuple[int, ...]:
    """The masked buffers' max_m the warmup covers at `tokens` tokens (see the module doc)."""
    return (tokens, max_tokens) if tokens != max_tokens else (tokens,)


def mindices_max_m(max_rows: int, num_groups: int) -> int:
    """The largest m_indices M a step of at most max_rows routed rows passes."""
    return round_up(max_rows + num_groups * (CONTIGUOUS_ALIGNMENT - 1), CONTIGUOUS_ALIGNMENT)


def layer_descs(
    n: int, k: int, num_groups: int, token_counts: Sequence[int], top_k: int
) -> Iterator[GemmDesc]:
    """Every desc the warmup covers for one shape (the module doc lists them)."""
    max_tokens = max(token_counts)
    if num_groups == 1:
        for tokens in token_counts:
            yield GemmDesc("bf16_gemm_nt", tokens, n, k)
        return
    g = num_groups
    for tokens in token_counts:
        rows = tokens * top_k
        per_group = math.ceil(rows / g)
        yield GemmDesc("m_grouped_offsets", rows, n, k, g, expected_m=per_group)
        for max_m in masked_max_ms(tokens, max_tokens):
            yield GemmDesc("m_grouped_masked", max_m, n, k, g, expected_m=min(per_group, max_m))
        for with_c in (False, True):
            yield GemmDesc("k_grouped", n, k, per_group, g, d_dtype="fp32", with_c=with_c)
    top = mindices_max_m(max_tokens * top_k, g)
    for m in range(CONTIGUOUS_ALIGNMENT, top + 1, CONTIGUOUS_ALIGNMENT):
        yield GemmDesc("m_grouped_contiguous", m, n, k, g)


def fp8_fp4_layer_descs(
    n: int, k: int, num_groups: int, token_counts: Sequence[int], top_k: int, form: str
) -> Iterator[GemmDesc]:
    """Every FP8 x FP4 desc the warmup covers for one shape and weight form (`form`: "raw" or
    "prepared"): the layouts of layer_descs but the k-grouped one, with the same rows; prepared
    weights both windowed or not (Mxfp4Weights.windowed: the data decides, so both picks)."""
    for desc in layer_descs(n, k, num_groups, token_counts, top_k):
        if desc.kind != "k_grouped":
            desc = dataclasses.replace(desc, ab_dtype="fp8_fp4", weights=form)
            yield desc
            if form == "prepared":
                yield dataclasses.replace(desc, windowed=True)


class Picker:
    """select_config, once per families.selection_key: exact, and cheap over many rows."""

    def __init__(self, arch: ArchSpec) -> None:
        self.arch = arch
        self._picks: dict[tuple, GemmConfig] = {}

    def __call__(self, desc: GemmDesc) -> GemmConfig:
        key = selection_key(desc, self.arch)
        config = self._picks.get(key)
        if config is None:
            config = select_config(desc, self.arch)
            self._picks[key] = config
        return config


def check_arguments(token_counts: Sequence[int], top_k: int, num_sms: int) -> None:
    """TypeError for non-integers, ValueError for empty or non-positive values."""
    if len(token_counts) == 0:
        raise ValueError("token counts must not be empty")
    for name, values in (
        ("token counts", token_counts),
        ("top_k", [top_k]),
        ("num_sms", [num_sms]),
    ):
        for value in values:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be integers, got {value!r}")
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")


def warmup_specs(
    shapes: list[dict],
    token_counts: Sequence[int],
    top_k: int,
    arch: str,
    num_sms: int,
    *,
    weights: str = "bf16",
    picker: Picker | None = None,
) -> list[KernelSpec]:
    """The kernels the heuristics pick for `shapes` (dicts with n, k, optional num_groups;
    num_groups 1 = a dense / shared-expert GEMM) at every count of `token_counts` (the CLI
    passes range(1, max_tokens + 1)) with `top_k` experts per token, in every layout of the
    module doc: BF16 kernels, or with weights="mxfp4" the FP8 x FP4 ones for both weight forms.
    Deduplicated, in first-pick order. On sm_100f (alias sm_100a) the BF16 layouts SM100 has
    kernels for (heuristics/sm100_bf16.py: all of them, the k-grouped weight gradient
    included), and for MXFP4 weights the FP8 x FP4
    kernels (heuristics/sm100_fp8_fp4.py) of the SM100-prepared form only (SM100 refuses raw
    weights): compiled and statically checked kernels, not run on hardware.
    TypeError / ValueError on a bad argument (check_shape, check_arguments, check_weights,
    check_mxfp4_shape, check_top_k). `picker` (tests) shares the selections with the caller."""
    check_arguments(token_counts, top_k, num_sms)
    check_weights(weights)
    checked = [check_shape(shape) for shape in shapes]
    for shape, (_, _, groups) in zip(shapes, checked):
        check_top_k(top_k, groups, f"shape {shape!r}: top_k")
    if weights == "mxfp4":
        for shape, (_, k, _) in zip(shapes, checked):
            check_mxfp4_shape(shape, k)
    spec_arch = arch_for(arch, num_sms)
    pick = picker if picker is not None and picker.arch == spec_arch else Picker(spec_arch)
    specs: dict[KernelSpec, None] = {}
    seen: dict[tuple, None] = {}
    for n, k, groups in dict.fromkeys(checked):
        if weights == "mxfp4":
            descs = itertools.chain.from_iterable(
                fp8_fp4_layer_descs(n, k, groups, token_counts, top_k, form)
                for form in for_operands(spec_arch, "fp8_fp4").mxfp4_forms
            )
        else:
            descs = layer_descs(n, k, groups, token_counts, top_k)
        for desc in descs:
            if lookup(spec_arch, desc).unsupported(desc) is not None:
                continue  # a layout the family has no kernel for (SM100 lacks some)
            config = pick(desc)
            ident = (desc.kind, desc.ab_dtype, desc.weights, desc.d_dtype, desc.with_c, config)
            if ident not in seen:  # building the spec renders source: once per kernel
                seen[ident] = None
                specs[kernel_spec(desc, config, spec_arch)] = None
    return list(specs)
