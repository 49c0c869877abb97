"""transformers' experts implementations on one GPU: "moegemm" against "grouped_mm" and, where a
DeepGEMM build loads, "deepgemm", on MoE models of real hidden and expert sizes (few layers,
random weights).

Per model and weights (BF16; GPT-OSS-20B also with its experts as MXFP4, `attach_mxfp4`, the
BF16 parameters then holding the dequantized values, so the peers compute the same weights):

  experts   the first experts module alone at each T of --tokens, each implementation called
            through transformers' ExpertsInterface on the same inputs (x N(0, 1), Zipf-1.2 expert
            load, distinct experts per token). First checked against "grouped_mm" (calc_diff
            < 1e-4; MXFP4 against the FP32 math of the FP8 x FP4 layer, < 1e-4) on inputs where
            the experts' output is not negligible, then timed: ROUTINGS routings captured in one
            CUDA graph and replayed (no call finds its weights in L2), CUDA events where an
            implementation cannot be captured (noted in the row).
  model     one whole-model forward of --model-tokens tokens per implementation (CUDA events,
            launches queued behind a GPU sleep): the end-to-end ratio, and the experts' share of
            the moegemm forward (MoE layers x experts µs / forward µs).

Targets: experts >= 1.5 x grouped_mm at every T; >= 1.0 x deepgemm with BF16 experts; MXFP4
experts faster than the same model's BF16 experts at T <= 64. --deepgemm names a directory that
holds a built `deep_gemm` package (put first on sys.path and handed to transformers' loader, which
otherwise wants the `kernels` hub package and a download). --json writes everything with the GPU,
date and commit (bench_common.run_info). The pure logic (cases, ratios, verdicts, table) is
tested on the CPU in benchmarks/tests/test_bench_transformers.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

TOKENS = (1, 8, 64, 512, 4096)
MODEL_TOKENS = 512
IMPLS = ("moegemm", "grouped_mm", "deepgemm")
PEER = "grouped_mm"  # the correctness peer: transformers' default on CUDA
ROUTINGS = 4
TOL_PEER = 1e-4  # against grouped_mm, which rounds its [S, 2I] product to BF16 (GPU tests)
TOL_MXFP4 = 1e-4  # against the FP8 x FP4 layer's FP32 math on the dequantized weights
TOL_MODEL = 1e-3  # whole-model logits: recorded, a larger diff is flagged in the row
NEGLIGIBLE = 1e-2  # the experts' mean |out| must exceed this share of the mean |x|
TARGET_X_GROUPED_MM, TARGET_X_DEEPGEMM, MXFP4_MAX_T = 1.5, 1.0, 64


@dataclass(frozen=True)
class ModelSpec:
    """A model of real sizes with `layers` decoder layers: `config` the transformers config
    class's keyword arguments; `weights` the experts forms timed on it, in order."""

    name: str
    config_class: str
    config: dict
    weights: tuple[str, ...] = ("bf16",)
    layers: int = 2
    extra: dict = field(default_factory=dict)  # layer-count-dependent keywords

    def config_kwargs(self) -> dict:
        return {**self.config, "num_hidden_layers": self.layers, **self.extra}


MODELS = {
    "qwen3-30b-a3b": ModelSpec("qwen3-30b-a3b", "Qwen3MoeConfig", {
        "hidden_size": 2048, "intermediate_size": 6144, "moe_intermediate_size": 768,
        "num_experts": 128, "num_experts_per_tok": 8, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "norm_topk_prob": True,
    }),
    "mixtral-8x7b": ModelSpec("mixtral-8x7b", "MixtralConfig", {
        "hidden_size": 4096, "intermediate_size": 14336, "num_local_experts": 8,
        "num_experts_per_tok": 2, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 32000,
    }),
    "gpt-oss-20b": ModelSpec("gpt-oss-20b", "GptOssConfig", {
        "hidden_size": 2880, "intermediate_size": 2880, "num_local_experts": 32,
        "num_experts_per_tok": 4, "num_attention_heads": 64, "num_key_value_heads": 8,
        "head_dim": 64, "vocab_size": 201088,
    }, weights=("bf16", "mxfp4")),
    # One dense layer first, as the model has: its one MoE layer alone holds 22.5 GB of experts.
    "deepseek-v3": ModelSpec("deepseek-v3", "DeepseekV3Config", {
        "hidden_size": 7168, "intermediate_size": 18432, "moe_intermediate_size": 2048,
        "n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1, "n_group": 8,
        "topk_group": 4, "num_attention_heads": 128, "num_key_value_heads": 128,
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 129280,
    }, extra={"first_k_dense_replace": 1}),
}  # fmt: skip


def make_config(spec: ModelSpec):
    import transformers

    return getattr(transformers, spec.config_class)(**spec.config_kwargs())


def experts_modules(model) -> list:
    """The experts modules of a model, in layer order (classes of use_experts_implementation)."""
    return [m for m in model.modules() if type(m).__name__.endswith("Experts")]


def cases(models: list[str], tokens: list[int]) -> list[tuple[str, str, int]]:
    """(model, weights, T) in the order they are timed: per model, per weights form, per T."""
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    return [(m, w, t) for m in models for w in MODELS[m].weights for t in tokens]


def parse_list(text: str, kind: Callable = str) -> list:
    return [kind(v) for v in text.split(",") if v.strip()]


# ----------------------------------------------------------------------------------------------
# Ratios, verdicts, table (CPU)


def add_ratios(row: dict) -> None:
    """x peer = peer µs / moegemm µs (> 1: moegemm faster), for the peers timed in the row."""
    ours = row.get("us", {}).get("moegemm")
    if not ours:
        return
    for peer in IMPLS[1:]:
        peer_us = row["us"].get(peer)
        if peer_us:
            row["x_" + peer] = peer_us / ours


def add_mxfp4_ratios(rows: list[dict]) -> None:
    """x_bf16 on MXFP4 rows: the same model's BF16 moegemm µs / its MXFP4 moegemm µs at that T."""
    bf16 = {(r["model"], r["tokens"]): r for r in rows if r["weights"] == "bf16"}
    for r in rows:
        twin = bf16.get((r["model"], r["tokens"]))
        ours = r.get("us", {}).get("moegemm")
        if r["weights"] == "mxfp4" and twin and ours and twin.get("us", {}).get("moegemm"):
            r["x_bf16"] = twin["us"]["moegemm"] / ours


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


def _verdict(name: str, column: str, threshold: float, subset: list[dict]) -> dict:
    """met where every judged row reaches threshold; "n/a" where no row could be judged (a peer
    that did not run is not a miss of ours)."""
    values = [r[column] for r in subset]
    missed = [f"{r['model']} {r['weights']} T{r['tokens']} {r[column]:.2f}" for r in subset
              if not r[column] >= threshold]  # fmt: skip
    status = "n/a" if not subset else ("missed" if missed else "met")
    return {"target": name, "judged": len(subset), "missed": missed, "status": status,
            "worst": min(values, default=None), "geomean": geomean(values)}  # fmt: skip


def targets(rows: list[dict]) -> list[dict]:
    ok = [r for r in rows if not r.get("error")]
    out = [
        _verdict(f"experts >= {TARGET_X_GROUPED_MM} x grouped_mm at every T", "x_grouped_mm",
                 TARGET_X_GROUPED_MM, [r for r in ok if r.get("x_grouped_mm")]),
        _verdict(f"BF16 experts >= {TARGET_X_DEEPGEMM} x deepgemm", "x_deepgemm",
                 TARGET_X_DEEPGEMM,
                 [r for r in ok if r["weights"] == "bf16" and r.get("x_deepgemm")]),
        _verdict(f"MXFP4 experts faster than BF16 at T <= {MXFP4_MAX_T}", "x_bf16", 1.0 + 1e-9,
                 [r for r in ok if r["weights"] == "mxfp4" and r["tokens"] <= MXFP4_MAX_T
                  and r.get("x_bf16")]),
    ]  # fmt: skip
    # A row that could not be timed for ours or grouped_mm is a miss of the first target.
    untimed = [r for r in ok if not r.get("x_grouped_mm")]
    if untimed:
        out[0]["missed"] += [f"{r['model']} {r['weights']} T{r['tokens']} untimed" for r in untimed]
        out[0]["status"] = "missed"
    errors = [r for r in rows if r.get("error")]
    out.append({"target": "correct: every row checked before timing", "judged": len(rows),
                "missed": [f"{r['model']} {r['weights']} T{r['tokens']}: {r['error']}"
                           for r in errors],
                "status": "met" if rows and not errors else "missed"})  # fmt: skip
    return out


def _cell(value: float | None, spec: str) -> str:
    width = spec.split(".")[0]
    return format(value, spec) if isinstance(value, (int, float)) else format("-", ">" + width)


HEADER = (
    f"{'model':14} {'weights':7} {'T':>5} {'moegemm':>9} {'grouped':>9} {'deepgemm':>9} "
    f"{'xgrp':>6} {'xdg':>6} {'xbf16':>6} {'diff':>8}  notes"
)


def table_row(row: dict) -> str:
    """One experts row of the printed table (µs, ratios, worst calc_diff, error or notes)."""
    us = row.get("us", {})
    diffs = [d for d in row.get("calc_diff", {}).values() if d is not None]
    diff = max(diffs) if diffs else None
    events = [k for k, v in row.get("timing", {}).items() if v == "events"]
    notes = row.get("error") or (f"events: {','.join(events)}" if events else "")
    return (
        f"{row['model']:14} {row['weights']:7} {row['tokens']:5d} "
        f"{_cell(us.get('moegemm'), '9.1f')} {_cell(us.get('grouped_mm'), '9.1f')} "
        f"{_cell(us.get('deepgemm'), '9.1f')} {_cell(row.get('x_grouped_mm'), '6.2f')} "
        f"{_cell(row.get('x_deepgemm'), '6.2f')} {_cell(row.get('x_bf16'), '6.2f')} "
        f"{_cell(diff, '8.1e')}  {notes}"
    ).rstrip()


def model_summary(model_row: dict, rows: list[dict]) -> None:
    """End-to-end ratios of a whole-model row, and the experts' share of the moegemm forward
    (MoE layers x the experts row's moegemm µs at the same T: an estimate, the model routes
    with its own router)."""
    us = model_row.get("us", {})
    ours = us.get("moegemm")
    if not ours:
        return
    for peer in IMPLS[1:]:
        if us.get(peer):
            model_row["x_" + peer] = us[peer] / ours
    match = [r for r in rows if (r["model"], r["weights"], r["tokens"]) ==
             (model_row["model"], model_row["weights"], model_row["tokens"])]  # fmt: skip
    experts_us = match[0].get("us", {}).get("moegemm") if match else None
    if experts_us:
        model_row["experts_share"] = model_row["moe_layers"] * experts_us / ours


def model_table_row(row: dict) -> str:
    us = row.get("us", {})
    return (
        f"{row['model']:14} {row['weights']:7} {row['tokens']:5d} "
        f"{_cell(us.get('moegemm'), '9.1f')} {_cell(us.get('grouped_mm'), '9.1f')} "
        f"{_cell(us.get('deepgemm'), '9.1f')} {_cell(row.get('x_grouped_mm'), '6.2f')} "
        f"{_cell(row.get('x_deepgemm'), '6.2f')} {_cell(row.get('experts_share'), '6.2f')} "
        f"{_cell(row.get('logits_diff'), '8.1e')}  {row.get('error', '')}"
    ).rstrip()


# ----------------------------------------------------------------------------------------------
# DeepGEMM through transformers' own forward


# transformers' DeepGEMM bundle field -> the kernel's symbol (its loader's list).
DEEPGEMM_SYMBOLS = {
    "fp8_fp4_matmul": "fp8_fp4_gemm_nt",
    "grouped_fp8_fp4_matmul_nt": "m_grouped_fp8_fp4_gemm_nt_contiguous",
    "grouped_fp8_fp4_matmul_nn": "m_grouped_fp8_fp4_gemm_nn_contiguous",
    "grouped_bf16_matmul_nt": "m_grouped_bf16_gemm_nt_contiguous",
    "grouped_bf16_matmul_nn": "m_grouped_bf16_gemm_nn_contiguous",
    "per_token_cast_to_fp8": "utils.per_token_cast_to_fp8",
    "transform_sf_into_required_layout": "transform_sf_into_required_layout",
    "transform_weights_for_mega_moe": "transform_weights_for_mega_moe",
    "get_symm_buffer_for_mega_moe": "get_symm_buffer_for_mega_moe",
    "fp8_fp4_mega_moe": "fp8_fp4_mega_moe",
}
DEFAULT_ALIGNMENT = 128  # DeepGEMM's build-time m/k alignment of the contiguous layout


def _symbol(module: object, dotted: str) -> Callable | None:
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _missing(name: str) -> Callable:
    def stub(*args, **kwargs):
        raise NotImplementedError(f"this DeepGEMM build has no {name}")

    return stub


def _psum_compatible(fn: Callable) -> Callable:
    """fn, accepting transformers' use_psum_layout=False where a DeepGEMM build predates the
    keyword (False is what such a build does; True, SM100's layout, is passed through)."""

    def call(*args, use_psum_layout: bool = False, **kwargs):
        if use_psum_layout:
            return fn(*args, use_psum_layout=True, **kwargs)
        try:
            return fn(*args, use_psum_layout=False, **kwargs)
        except TypeError as exc:  # the argument check runs before any launch
            if "use_psum_layout" not in str(exc) and "incompatible function" not in str(exc):
                raise
            return fn(*args, **kwargs)

    return call


def deepgemm_bundle(kernel: object, bundle_class: type) -> object:
    """transformers' DeepGEMM bundle (`bundle_class`) over a DeepGEMM module: symbols the BF16
    experts path does not use may be missing (they raise when called); the BF16 grouped GEMMs
    are wrapped for builds without use_psum_layout."""
    if _symbol(kernel, DEEPGEMM_SYMBOLS["grouped_bf16_matmul_nt"]) is None:
        raise ImportError("this DeepGEMM build has no m_grouped_bf16_gemm_nt_contiguous")
    values = {}
    for f in dataclasses.fields(bundle_class):
        if f.name == "m_alignment":
            get = _symbol(kernel, "get_mk_alignment_for_contiguous_layout")
            values[f.name] = int(get()) if get else DEFAULT_ALIGNMENT
            continue
        symbol = DEEPGEMM_SYMBOLS.get(f.name, f.name)
        fn = _symbol(kernel, symbol)
        if fn is not None and f.name.startswith("grouped_bf16"):
            fn = _psum_compatible(fn)
        values[f.name] = fn if fn is not None else _missing(symbol)
    return bundle_class(**values)


def load_deepgemm(path: str | None) -> str | None:
    """Make "deepgemm" runnable: a build under `path` (or one importable as `deep_gemm`) handed
    to transformers' loader, else transformers' own loader (the `kernels` hub). Returns None, or
    why it cannot run."""
    from transformers.integrations import deepgemm as hf_dg

    if path:
        sys.path.insert(0, path)
    try:
        kernel = importlib.import_module("deep_gemm")
    except Exception as exc:  # noqa: BLE001 - absent or broken build: try the hub loader
        local_error = f"{type(exc).__name__}: {exc}"
    else:
        try:
            hf_dg._DEEPGEMM = deepgemm_bundle(kernel, hf_dg.DeepGEMM)
            return None
        except ImportError as exc:
            return str(exc)
    if path:
        return f"no deep_gemm under {path}: {local_error}"
    try:
        hf_dg.load_deepgemm_kernel()
        return None
    except Exception as exc:  # noqa: BLE001 - the peer is then n/a
        return f"{type(exc).__name__}: {exc}"[:300]


# ----------------------------------------------------------------------------------------------
# GPU


def build_model(spec: ModelSpec):
    """The model in BF16 on the GPU, experts weights N(0, 1/fan_in) (biases N(0, 0.01)) so that
    their output is not negligible after the default 0.02 initialization."""
    import torch
    import transformers

    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(
            make_config(spec), dtype=torch.bfloat16
        )
    model.eval().requires_grad_(False)
    with torch.no_grad():
        for m in experts_modules(model):
            h, i = model.config.hidden_size, m.down_proj.shape[1 if m.is_transposed else 2]
            m.gate_up_proj.normal_(0, h**-0.5)
            m.down_proj.normal_(0, i**-0.5)
            if m.has_bias:
                m.gate_up_proj_bias.normal_(0, 0.1)
                m.down_proj_bias.normal_(0, 0.1)
    return model


def to_mxfp4(model) -> None:
    """GPT-OSS experts as MXFP4 (attach_mxfp4), the BF16 parameters set to the dequantized values
    (exact in BF16) so that the peers compute the same weights; expert by expert to bound the
    FP32 temporaries."""
    import torch

    from moegemm.integrations import transformers as mt
    from moegemm.quant import dequantize_mxfp4, quantize_mxfp4

    def quantize(w):  # [E, N, K] -> blocks [E, N, K/2], scales [E, N, K/32], dequantized
        parts = [quantize_mxfp4(w[e : e + 1].float()) for e in range(w.shape[0])]
        b, s = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        deq = torch.cat([dequantize_mxfp4(p[0], p[1]).bfloat16() for p in parts])
        return b, s, deq

    with torch.no_grad():
        for m in experts_modules(model):
            b13, s13, w13 = quantize(m.gate_up_proj.transpose(1, 2))
            b2, s2, w2 = quantize(m.down_proj.transpose(1, 2))
            m.gate_up_proj.copy_(w13.transpose(1, 2))
            m.down_proj.copy_(w2.transpose(1, 2))
            e, n13, n2 = b13.shape[0], b13.shape[1], b2.shape[1]
            mt.attach_mxfp4(m, b13.view(e, n13, -1, 16), s13, b2.view(e, n2, -1, 16), s2)


def routing(module, hidden: int, t: int, seed: int):
    """x [t, H] BF16, distinct top-k ids per token (int64, as routers give) from a Zipf-1.2
    expert load, BF16 weights summing to 1 (bench_moe's routing)."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    e, k = module.num_experts, module.config.num_experts_per_tok
    load = 1.0 / torch.arange(1, e + 1, device="cuda", dtype=torch.float32) ** 1.2
    load = load[torch.randperm(e, device="cuda", generator=g)]
    ids = torch.multinomial(load.expand(t, e), k, replacement=False, generator=g)
    w = torch.rand(t, k, device="cuda", generator=g)
    x = torch.randn(t, hidden, device="cuda", generator=g).bfloat16()
    return x, ids, (w / w.sum(-1, keepdim=True)).bfloat16()


def impl_fn(name: str) -> Callable:
    from transformers.integrations import moe as hf_moe

    return hf_moe.ALL_EXPERTS_FUNCTIONS[name]


def mxfp4_reference(module, x, ids, w):
    from moegemm.integrations import transformers as mt
    from moegemm.quant import dequantize_mxfp4
    from moegemm.testing.moe_reference import fused_moe_reference_fp8

    ops = mt.experts_operands(module)
    ids32, w32 = mt.routing_operands(ids, w)
    b13 = None if ops.w13_bias is None else ops.w13_bias.float()
    b2 = None if ops.w2_bias is None else ops.w2_bias.float()
    w13, w2 = dequantize_mxfp4(*ops.w13), dequantize_mxfp4(*ops.w2)
    return fused_moe_reference_fp8(x, w13, w2, w32, ids32, ops.activation, b13, b2)


def experts_row(module, hidden: int, impls: list[str], row: dict) -> dict:
    """Check, then time, every implementation on the module at row['tokens'] (module doc)."""
    import torch
    from bench_common import Timer, rotating
    from bench_moe import time_graph

    from moegemm.testing import calc_diff

    t = row["tokens"]
    sets = [routing(module, hidden, t, seed) for seed in range(ROUTINGS)]
    x, ids, w = sets[0]
    row.update(us={}, calc_diff={}, timing={}, notes={})
    with torch.no_grad():
        peer = impl_fn(PEER)(module, x, ids, w).float()
        if not peer.abs().mean() > NEGLIGIBLE * x.float().abs().mean():
            row["error"] = f"negligible experts output ({peer.abs().mean():.2e})"
            return row
        for name in impls:
            try:
                out = impl_fn(name)(module, x, ids, w).float()
            except Exception as exc:  # a peer that cannot run reads n/a; ours fails the row
                if name == "moegemm":
                    raise
                row["notes"][name] = f"{type(exc).__name__}: {exc}"[:300]
                continue
            if name == "moegemm" and row["weights"] == "mxfp4":
                diff, tol = calc_diff(out, mxfp4_reference(module, x, ids, w)), TOL_MXFP4
                row["calc_diff_vs_grouped_mm"] = calc_diff(out, peer)  # FP8 activations: info
            else:
                diff, tol = (calc_diff(out, peer) if name != PEER else 0.0), TOL_PEER
            row["calc_diff"][name] = diff
            if not diff < tol:
                if name == "moegemm":
                    row["error"] = f"moegemm calc_diff {diff:.2e} >= {tol:.0e}"
                    return row
                row["notes"][name] = f"calc_diff {diff:.2e}: not timed"
                continue
            fn = impl_fn(name)
            calls = [functools.partial(fn, module, *s) for s in sets]
            try:
                row["us"][name] = time_graph(calls)
                row["timing"][name] = "graph"
            except Exception as exc:  # noqa: BLE001 - not capturable: events, noted
                torch.cuda.synchronize()
                row["notes"][f"{name}_graph"] = f"{type(exc).__name__}: {exc}"[:200]
                row["us"][name] = Timer(queued=True)(rotating(lambda call: call(), calls))
                row["timing"][name] = "events"
    add_ratios(row)
    return row


def model_row(model, spec: ModelSpec, weights: str, t: int, impls: list[str]) -> dict:
    """One whole-model forward of t tokens per implementation (module doc)."""
    import torch
    from bench_common import Timer

    from moegemm.testing import calc_diff

    row = {"model": spec.name, "weights": weights, "tokens": t, "us": {}, "notes": {},
           "moe_layers": len(experts_modules(model))}  # fmt: skip
    g = torch.Generator(device="cuda").manual_seed(1)
    tokens = torch.randint(0, model.config.vocab_size, (1, t), device="cuda", generator=g)
    logits = {}
    with torch.no_grad():
        for name in impls:
            model.set_experts_implementation(name)
            try:
                logits[name] = model(tokens).logits.float()
                row["us"][name] = Timer(queued=True)(lambda: model(tokens))
            except Exception as exc:  # noqa: BLE001 - reads n/a
                row["notes"][name] = f"{type(exc).__name__}: {exc}"[:300]
    if "moegemm" in logits and PEER in logits:
        row["logits_diff"] = calc_diff(logits["moegemm"], logits[PEER])
        if not row["logits_diff"] < TOL_MODEL:
            row["error"] = f"logits calc_diff {row['logits_diff']:.2e} against {PEER}"
    return row


def result_json(info: dict, args: dict, notes: dict, rows, model_rows, verdicts, elapsed) -> dict:
    """The --json document: bench_common.run_info's GPU, torch, commit and date first, as the
    other benchmarks write them."""
    return {**info, "args": args, "notes": notes, "rows": rows, "model_rows": model_rows,
            "targets": verdicts, "elapsed_s": elapsed}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)))
    parser.add_argument("--model-tokens", type=int, default=MODEL_TOKENS,
                        help="tokens of the whole-model forward (0: none)")  # fmt: skip
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--deepgemm", help="directory holding a built deep_gemm package")
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    todo = cases(parse_list(args.models), parse_list(args.tokens, int))
    if args.list:
        for c in todo:
            print(*c)
        return 0
    import torch

    if not torch.cuda.is_available():
        print("bench_transformers: no CUDA device", file=sys.stderr)
        return 1
    from bench_common import run_info

    import moegemm.integrations.transformers as mt

    mt.register(fallback=False)  # a refusal must fail the row, never time grouped_mm as ours
    torch.backends.cuda.matmul.allow_tf32 = False  # the references are FP32
    impls = parse_list(args.impls)
    notes = {}
    if "deepgemm" in impls:
        why = load_deepgemm(args.deepgemm)
        if why:
            notes["deepgemm"] = why
            impls.remove("deepgemm")
    info = run_info()
    print(f"# {info['gpu']}, torch {info['torch']}, commit {info['commit']}, "
          f"{info['date_utc']} UTC; impls {','.join(impls)}", flush=True)  # fmt: skip
    if notes.get("deepgemm"):
        print(f"# deepgemm n/a: {notes['deepgemm']}", flush=True)
    print(HEADER, flush=True)
    t0 = time.perf_counter()
    rows, model_rows = [], []
    for name in dict.fromkeys(m for m, _, _ in todo):
        spec = MODELS[name]
        try:
            model = build_model(spec)
        except Exception as exc:  # noqa: BLE001 - every row of the model keeps the reason
            err = f"build: {type(exc).__name__}: {exc}"[:300]
            rows += [{"model": m, "weights": w, "tokens": t, "error": err}
                     for m, w, t in todo if m == name]  # fmt: skip
            print(table_row(rows[-1]), flush=True)
            continue
        module = experts_modules(model)[0]
        for weights in spec.weights:
            if weights == "mxfp4":
                to_mxfp4(model)
            for m, w, t in todo:
                if (m, w) != (name, weights):
                    continue
                row = {"model": name, "weights": weights, "tokens": t}
                try:
                    experts_row(module, model.config.hidden_size, impls, row)
                except Exception as exc:  # noqa: BLE001 - the row keeps the reason
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                    torch.cuda.synchronize()
                rows.append(row)
                print(table_row(row), flush=True)
            if args.model_tokens:
                model_rows.append(model_row(model, spec, weights, args.model_tokens, impls))
        del model, module
        torch.cuda.empty_cache()
    add_mxfp4_ratios(rows)
    for r in model_rows:
        model_summary(r, rows)
    print("\n# whole model (µs per forward; share: experts of the moegemm forward)")
    print(HEADER.replace("xbf16", "share").replace("diff ", "ldiff"))
    for r in model_rows:
        print(model_table_row(r))
    verdicts = targets(rows)
    print()
    for v in verdicts:
        print(f"{v['target']:52} {v['status']:7} judged {v['judged']:3} "
              f"missed {len(v['missed']):3} geomean {v.get('geomean') or 0:.3f}")  # fmt: skip
        for miss in v["missed"][:6]:
            print(f"    missed: {miss}")
    elapsed = time.perf_counter() - t0
    print(f"# {len(rows)} rows in {elapsed:.0f} s")
    if args.json:
        doc = result_json(info, vars(args), notes, rows, model_rows, verdicts, elapsed)
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
