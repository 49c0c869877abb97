"""MoE GEMM shapes of known models (from `moegemm/data/moe_shapes.json`) for warmup."""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any


@functools.cache
def _data() -> dict[str, Any]:
    text = resources.files("moegemm").joinpath("data", "moe_shapes.json").read_text()
    return json.loads(text)


def normalize_name(name: str) -> str:
    """`DeepSeek-V3` / `deepseek-v3` / `deepseek_v3` all become `deepseek_v3`."""
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")


def known_models() -> list[str]:
    """The canonical keys of the model presets, sorted."""
    return sorted(_data()["models"])


def suite_names() -> list[str]:
    return sorted(_data()["suites"])


def resolve_model(name: str) -> str:
    """The canonical model key for a name or alias; ValueError listing the known models."""
    models = _data()["models"]
    wanted = normalize_name(name)
    if wanted in models:
        return wanted
    for key, entry in models.items():
        if any(normalize_name(alias) == wanted for alias in entry.get("aliases", ())):
            return key
    raise ValueError(f"unknown model {name!r}; available models: {', '.join(known_models())}")


def model_top_k(name: str) -> int:
    """Experts each token is routed to: routed rows = tokens x top_k."""
    return int(_data()["models"][resolve_model(name)]["top_k"])


# Presets whose checkpoints ship MXFP4 experts (e2m1 codes + a UE8M0 scale per 32 along K): the
# warmup builds their experts as FP8 x FP4 unless --weights says otherwise. Any other preset's
# experts are BF16 by default; `--weights mxfp4` declares them FP4.
MXFP4_MODELS = frozenset({"gpt_oss_20b", "gpt_oss_120b"})


def model_weights(name: str) -> str:
    """The expert weights a preset ships, as the warmup's --weights names them: "mxfp4" for
    MXFP4_MODELS, else "bf16"."""
    return "mxfp4" if resolve_model(name) in MXFP4_MODELS else "bf16"


# Presets whose experts use gpt-oss's SwiGLU (clamped, gate/up interleaved, biases); the others
# vLLM's silu(gate) * up.
SWIGLU_OAI_MODELS = frozenset({"gpt_oss_20b", "gpt_oss_120b"})


def model_activation(name: str) -> str:
    """The fused MoE layer's activation of a preset: "swiglu_oai" or "silu"."""
    return "swiglu_oai" if resolve_model(name) in SWIGLU_OAI_MODELS else "silu"


def model_shapes(name: str) -> list[dict[str, Any]]:
    """The GEMMs of one MoE layer: routed linear1/linear2 (grouped over all experts) and, if the
    model has shared experts, their dense `shared_linear1`/`shared_linear2` (one group)."""
    key = resolve_model(name)
    m = _data()["models"][key]
    shapes: list[dict[str, Any]] = []
    for op in ("linear1", "linear2"):
        n, k = m[f"{op}_nk"]
        shapes.append({"model": key, "op": op, "n": n, "k": k, "num_groups": m["num_experts"]})
    shared = m.get("shared_experts", 0) * m.get("shared_intermediate", 0)
    if shared:
        hidden = m["hidden"]
        shapes.append(
            {"model": key, "op": "shared_linear1", "n": 2 * shared, "k": hidden, "num_groups": 1}
        )
        shapes.append(
            {"model": key, "op": "shared_linear2", "n": hidden, "k": shared, "num_groups": 1}
        )
    return shapes


def suite_shapes(suite: str, model: str | None = None) -> list[dict[str, Any]]:
    """The entries of a benchmark suite (optionally one model's), unique by (op, n, k, groups,
    layout); each keeps its `layout`, and `tokens` when the suite gives tokens per rank."""
    suites = _data()["suites"]
    wanted = normalize_name(suite)
    if wanted not in suites:
        raise ValueError(f"unknown suite {suite!r}; available suites: {', '.join(suite_names())}")
    model_key = resolve_model(model) if model else None
    shapes: dict[tuple[Any, ...], dict[str, Any]] = {}
    for entry in suites[wanted]:
        if model_key and entry["model"] != model_key:
            continue
        ident = (entry["op"], entry["n"], entry["k"], entry["num_groups"], entry.get("layout"))
        shape = shapes.setdefault(
            ident,
            {
                "model": entry["model"],
                "op": entry["op"],
                "n": entry["n"],
                "k": entry["k"],
                "num_groups": entry["num_groups"],
                "layout": entry.get("layout"),
                "tokens": [],
            },
        )
        if entry.get("tokens_per_rank") and entry["tokens_per_rank"] not in shape["tokens"]:
            shape["tokens"].append(entry["tokens_per_rank"])
    for shape in shapes.values():
        if not shape["tokens"]:
            del shape["tokens"]
    return list(shapes.values())
