"""bench_ep.py's cases, buffer sizing and targets: CPU logic, tested in
benchmarks/tests/test_ep_bench.py."""

from __future__ import annotations

import math

from moe_cases import MoeModel, geomean

TOKENS = (1, 8, 32, 128, 512, 2048, 8192)
RANKS = (1, 2, 4)
MODELS = {
    "deepseek-v3": MoeModel("deepseek-v3", 256, 8, 7168, 2048),
    "qwen3-235b": MoeModel("qwen3-235b", 128, 8, 4096, 1536),
}
# EP over NCCL all_to_all_single -> moegemm grouped GEMMs -> NCCL combine (same run).
TARGET_LOW_T, LOW_T_MAX = 1.5, 256
TARGET_HIGH_T, HIGH_T = 1.1, (2048, 8192)
MIN_MAX_M = 64  # a floor under the capacity bound: small T routes unevenly


def max_m_for(model: MoeModel, tokens: int, ranks: int, capacity: float | None) -> int:
    """Rows one local expert can receive: every rank's every token (capacity None), or
    capacity x the uniform mean, at least MIN_MAX_M, never more than every token."""
    every = ranks * tokens
    if capacity is None:
        return every
    mean = tokens * model.top_k * ranks / model.experts
    return max(1, min(every, max(MIN_MAX_M, math.ceil(capacity * mean))))


def target_for(tokens: int) -> float | None:
    """The speed-up over the NCCL path the issue asks for at T tokens per rank."""
    if tokens <= LOW_T_MAX:
        return TARGET_LOW_T
    if HIGH_T[0] <= tokens <= HIGH_T[1]:
        return TARGET_HIGH_T
    return None


def verdicts(rows: list[dict]) -> list[dict]:
    """Per (ranks, weights) and target band: the geometric mean and minimum speed-up, met or
    not. Rows need ranks, weights, tokens, speedup (None: not measured)."""
    out = []
    bands = {TARGET_LOW_T: f"T <= {LOW_T_MAX}", TARGET_HIGH_T: f"T in {HIGH_T}"}
    for key in sorted({(r["ranks"], r["weights"]) for r in rows}):
        for target, label in bands.items():
            ratios = [r["speedup"] for r in rows if (r["ranks"], r["weights"]) == key
                      and target_for(r["tokens"]) == target and r["speedup"] is not None]  # fmt: skip
            if not ratios:
                continue
            out.append({"ranks": key[0], "weights": key[1], "band": label, "target": target,
                        "geomean": geomean(ratios), "min": min(ratios),
                        "met": min(ratios) >= target})  # fmt: skip
    return out


def nvlink_bytes(remote_rows_out: int, remote_rows_back: int, hidden: int, fp8: bool) -> int:
    """Bytes one rank moves over NVLink per forward: its rows to other ranks (BF16, or FP8
    with a 4-byte scale per 128) and the expert rows it returns to other ranks (BF16)."""
    row_out = hidden + 4 * math.ceil(hidden / 128) if fp8 else 2 * hidden
    return remote_rows_out * row_out + remote_rows_back * 2 * hidden


def parse_list(text: str, allowed: tuple | None = None, kind=int) -> list:
    values = [kind(v) for v in text.split(",") if v]
    if allowed is not None:
        bad = [v for v in values if v not in allowed]
        if bad:
            raise ValueError(f"{bad} not among {list(allowed)}")
    return values
