"""The host-side buffer plan of EPMoE: one symmetric buffer per rank (same size and layout on
every rank, so a region's peer address is peer_base[r] + its offset) plus local buffers, all
allocated once at construction; and the kernels' grids, which depend on the plan alone (never
on one call's T), so that every rank launches the same grids, as the arrive counts require.

Symmetric regions (include/moegemm/common/ep_params.h: EpLayout, in its order):
  x_recv       [E_local, max_m, H]   BF16, or FP8 bytes (MXFP4 experts): the masked layout
  sfa_recv     [E_local, max_m, ceil(H/128)] FP32 (FP8 rows' scales; empty for BF16)
  recv_weight  [E_local, max_m]      FP32 routing weight of each row (GEMM2's row scale)
  recv_src     [E_local, max_m]      int32 src_rank * slots_per_rank + slot
  counts       [R, E]                int32 every rank's per-expert slot counts
  count_flag, dispatch_arrive, combine_arrive  [R] uint64 signals (epoch-valued, never reset)
  combine_recv [max_tokens * top_k, H] BF16 this rank's slots' weighted expert rows
max_m, the rows one local expert can receive, defaults to R * max_tokens_per_rank: every rank's
every token once (router top-k picks distinct experts). A forward that sends an expert more
(duplicate ids in a token's row, or a smaller max_m given to save memory) drops the excess and
records an overflow in the status word.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..jit.codegen import EP_DISPATCH_THREADS

FP8_BLOCK = 128
ALIGN = 128  # every region starts on a 128-byte boundary (16-byte vectors, TMA's 16 bytes)
LAYOUT_ORDER = (
    "x_recv", "sfa_recv", "recv_weight", "recv_src", "counts", "count_flag", "dispatch_arrive",
    "combine_arrive", "combine_recv",
)  # fmt: skip
MAX_EXPERTS = 1024  # the dispatch kernel's shared-memory tables
MAX_RANKS = 64
DISPATCH_MIN_SLOTS_PER_CTA = 64


@dataclass(frozen=True)
class Region:
    offset: int
    shape: tuple[int, ...]
    dtype: str  # "bf16", "fp8", "fp32", "int32", "uint64"
    nbytes: int


_ITEMSIZE = {"bf16": 2, "fp8": 1, "fp32": 4, "int32": 4, "uint64": 8}


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 1:
        raise ValueError(f"{name} must be positive, got {value}")
    return value


@dataclass(frozen=True)
class EPBufferPlan:
    world_size: int
    num_experts: int
    top_k: int
    hidden: int
    max_tokens_per_rank: int
    fp8: bool = False
    max_m: int = 0  # 0: world_size * max_tokens_per_rank
    regions: dict[str, Region] = field(init=False, repr=False)
    nbytes: int = field(init=False)

    def __post_init__(self) -> None:
        r = _positive_int("world_size", self.world_size)
        e = _positive_int("num_experts", self.num_experts)
        k = _positive_int("top_k", self.top_k)
        h = _positive_int("hidden", self.hidden)
        t = _positive_int("max_tokens_per_rank", self.max_tokens_per_rank)
        if r > MAX_RANKS:
            raise ValueError(f"at most {MAX_RANKS} ranks, got {r}")
        if e > MAX_EXPERTS:
            raise ValueError(f"at most {MAX_EXPERTS} experts, got {e}")
        if e % r:
            raise ValueError(f"num_experts {e} must split evenly over {r} ranks")
        if h % 8:
            raise ValueError(f"hidden must be a multiple of 8 (16-byte rows), got {h}")
        if self.fp8 and h % 16:
            raise ValueError(f"hidden must be a multiple of 16 for FP8 rows, got {h}")
        if self.max_m == 0:
            object.__setattr__(self, "max_m", r * t)
        _positive_int("max_m", self.max_m)
        if r * t * k >= 2**31:
            raise ValueError("world_size * max_tokens_per_rank * top_k must fit in int32")
        el, m = e // r, self.max_m
        act = "fp8" if self.fp8 else "bf16"
        blocks = math.ceil(h / FP8_BLOCK) if self.fp8 else 0
        shapes = {
            "count_flag": ((r,), "uint64"),
            "dispatch_arrive": ((r,), "uint64"),
            "combine_arrive": ((r,), "uint64"),
            "counts": ((r, e), "int32"),
            "recv_weight": ((el, m), "fp32"),
            "recv_src": ((el, m), "int32"),
            "sfa_recv": ((el, m, blocks), "fp32"),
            "x_recv": ((el, m, h), act),
            "combine_recv": ((t * k, h), "bf16"),
        }
        regions, offset = {}, 0
        for name, (shape, dtype) in shapes.items():  # signals first: one zeroing covers them
            nbytes = math.prod(shape) * _ITEMSIZE[dtype]
            regions[name] = Region(offset, shape, dtype, nbytes)
            offset += -(-nbytes // ALIGN) * ALIGN
        object.__setattr__(self, "regions", regions)
        object.__setattr__(self, "nbytes", offset)

    @property
    def experts_per_rank(self) -> int:
        return self.num_experts // self.world_size

    @property
    def slots_per_rank(self) -> int:
        return self.max_tokens_per_rank * self.top_k

    @property
    def signal_bytes(self) -> int:
        """The leading bytes holding the signals and counts, zeroed once at construction."""
        return self.regions["recv_weight"].offset

    def offsets(self) -> dict[str, int]:
        """The nine region offsets, named as the launchers bind them (off_<region>)."""
        return {f"off_{name}": self.regions[name].offset for name in LAYOUT_ORDER}

    def local_nbytes(self, intermediate: int) -> int:
        """The per-rank local buffers: y [E_local, max_m, H] BF16 (GEMM2's rows), the GEMM
        intermediate [E_local * max_m, I] BF16 (plus its FP8 copy and scales with FP8 rows),
        the default output [max_tokens, H] BF16, masked_m, slot_dest, the state word and the
        peer table."""
        rows = self.experts_per_rank * self.max_m
        per_row = 2 * self.hidden + 2 * intermediate
        if self.fp8:
            per_row += intermediate + 4 * math.ceil(intermediate / FP8_BLOCK)
        small = 4 * self.experts_per_rank + 4 * self.slots_per_rank + 16 + 8 * self.world_size
        return rows * per_row + 2 * self.max_tokens_per_rank * self.hidden + small

    def dispatch_grid(self, num_sms: int) -> tuple[int, int, int]:
        """(CTAs, slots per CTA, shared-memory bytes) of the dispatch kernel: the same on every
        rank for the same num_sms (EPMoE agrees on the ranks' smallest)."""
        slots = self.slots_per_rank
        ctas = max(1, min(num_sms, math.ceil(slots / DISPATCH_MIN_SLOTS_PER_CTA)))
        spc = math.ceil(slots / ctas)
        smem = 4 * (self.num_experts * (2 + EP_DISPATCH_THREADS // 32) + spc)
        return ctas, spc, smem

    def combine_grid(self, num_sms: int) -> int:
        """CTAs of the combine kernel: at most one per SM, since every CTA waits for every
        other's arrival (all must be resident)."""
        return max(1, min(num_sms, math.ceil(self.slots_per_rank / 8)))
