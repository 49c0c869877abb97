"""The fused MoE layer benchmark's cases, metrics and targets (bench_moe.py): CPU logic, tested
in benchmarks/tests/test_bench_moe.py."""

from __future__ import annotations

import math
from dataclasses import dataclass

TOKENS = (1, 8, 32, 128, 512, 2048, 8192)
DECODE_MAX_T, PREFILL_MIN_T = 32, 2048
TARGET_X_TORCH, TARGET_PCT_COPY, TARGET_PCT_CUBLAS = 1.5, 0.85, 0.90


@dataclass(frozen=True)
class MoeModel:
    """A model's routed experts: E experts of hidden H and intermediate I, top_k per token."""

    name: str
    experts: int
    top_k: int
    hidden: int
    intermediate: int
    activation: str = "silu"
    bias: bool = False

    def expert_bytes(self, weights: str = "bf16") -> float:
        """Bytes of one expert's w13 and w2: BF16, or MXFP4 (half a byte a weight and a scale
        byte per 32)."""
        per_weight = 2.0 if weights == "bf16" else 0.5 + 1 / 32
        return per_weight * 3 * self.hidden * self.intermediate

    def flops(self, kept_slots: int) -> float:
        """Real FLOPs of the layer's two GEMMs for kept (token, choice) slots."""
        return 2.0 * kept_slots * 3 * self.hidden * self.intermediate


MODELS = {
    "mixtral-8x7b": MoeModel("mixtral-8x7b", 8, 2, 4096, 14336),
    "deepseek-v3": MoeModel("deepseek-v3", 256, 8, 7168, 2048),
    "qwen3-30b-a3b": MoeModel("qwen3-30b-a3b", 128, 8, 2048, 768),
    "gpt-oss-20b": MoeModel("gpt-oss-20b", 32, 4, 2880, 2880, "swiglu_oai", True),
    "gpt-oss-120b": MoeModel("gpt-oss-120b", 128, 4, 2880, 2880, "swiglu_oai", True),
}


def regime_for(tokens: int) -> str:
    if tokens <= DECODE_MAX_T:
        return "decode"
    return "prefill" if tokens >= PREFILL_MIN_T else "mid"


def add_metrics(row: dict, copy_gbps: float, cublas_tflops: float) -> None:
    """Ratios and shares of one (model, T) row: ours against the torch and moegemm
    compositions, touched weight bytes per second against the copy ceiling (decode), TFLOP/s of
    the real FLOPs against cuBLAS (prefill)."""
    us = row.get("ours_us")
    if not us:
        return
    for peer in ("torch_us", "moegemm_comp_us"):
        if row.get(peer):
            row["x_" + peer[:-3]] = row[peer] / us
    row["gbps_weights"] = row["touched_bytes"] / us / 1e3
    row["pct_copy"] = row["gbps_weights"] / copy_gbps
    row["tflops"] = row["flops"] / us / 1e6
    row["pct_cublas"] = row["tflops"] / cublas_tflops


def geomean(values: list[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in vals) / len(vals)) if vals else None


def targets(rows: list[dict]) -> list[dict]:
    """The issue's targets over the rows: met where every judged row meets it."""
    judged = [r for r in rows if r.get("ours_us") and not r.get("error")]
    specs = [
        ("x torch composition >= 1.5 at every T", "x_torch", TARGET_X_TORCH, judged),
        ("decode: >= 85% of copy on touched weights", "pct_copy", TARGET_PCT_COPY,
         [r for r in judged if regime_for(r["tokens"]) == "decode"]),
        ("prefill: >= 90% of cuBLAS TFLOP/s", "pct_cublas", TARGET_PCT_CUBLAS,
         [r for r in judged if regime_for(r["tokens"]) == "prefill"]),
    ]  # fmt: skip
    out = []
    for name, column, threshold, subset in specs:
        values = [r.get(column) for r in subset]
        missed = [f"{r['model']} T{r['tokens']} {r.get(column, 0):.2f}" for r in subset
                  if not (r.get(column) or 0) >= threshold]  # fmt: skip
        out.append({
            "target": name, "judged": len(subset), "missed": missed,
            "worst": min((v for v in values if v), default=None), "geomean": geomean(values),
            "status": "met" if subset and not missed else "missed",
        })  # fmt: skip
    errors = [r for r in rows if r.get("error")]
    out.append({"target": "correct: calc_diff < 1e-5 on every row", "judged": len(rows),
                "missed": [f"{r['model']} T{r['tokens']}: {r['error']}" for r in errors],
                "status": "met" if rows and not errors else "missed"})  # fmt: skip
    return out
