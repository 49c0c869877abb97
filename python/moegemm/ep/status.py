"""The device status word of the expert-parallel kernels (include/moegemm/common/ep_params.h:
EpState::status): 0, or the first failure as code << 24 | phase << 16 | rank. A wait that
times out records it and gives up, so a rank that died or never arrived gives an error on the
others instead of a hang; EPMoE.check() reads it (a host sync, outside forward)."""

from __future__ import annotations

STATUS_TIMEOUT = 1
STATUS_OVERFLOW = 2
PHASES = {1: "the counts exchange", 2: "the dispatch", 3: "the combine"}


def encode_status(code: int, phase: int, rank: int) -> int:
    """The word the kernels write (tests)."""
    return (code << 24) | (phase << 16) | (rank & 0xFFFF)


def describe_status(word: int, timeout_s: float) -> str | None:
    """None for 0, else one sentence naming what failed and where."""
    if word == 0:
        return None
    code, phase, who = word >> 24, (word >> 16) & 0xFF, word & 0xFFFF
    if code == STATUS_TIMEOUT:
        where = PHASES.get(phase, f"phase {phase}")
        return (
            f"rank {who} never arrived in {where} within {timeout_s:g} s (it died, hung, or "
            "skipped the forward); this forward's output is wrong"
        )
    if code == STATUS_OVERFLOW:
        return (
            f"expert {who} received more rows than max_m; the excess rows were dropped (raise "
            "max_m, or the EPMoE's max_tokens_per_rank)"
        )
    return f"unknown status word {word:#010x}"
