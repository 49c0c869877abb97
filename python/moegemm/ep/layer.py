"""EPMoE: one MoE layer's routed experts split over the GPUs of one host.

    ep = EPMoE(group, num_experts, top_k, hidden, intermediate, "bf16", max_tokens_per_rank)
    out = ep.forward(x, topk_ids, topk_weights, w13_local, w2_local)    # [T, H], this rank's

Rank r owns experts [r * E_local, (r + 1) * E_local). A forward is three steps on the current
stream, with no host synchronization and no allocation (CUDA-graph capturable; a graph captured
at T serves any routing of T tokens, padding slots marked -1):
  1. dispatch (include/moegemm/ep/dispatch.cuh): counts all-gathered, then each (token, choice)
     row pushed over NVLink into its owner's masked layout x_recv [E_local, max_m, H] (FP8 with
     per-128 scales for MXFP4 experts), with its routing weight and its source slot;
  2. the experts on the masked layout (experts.py: moegemm.fused_moe_masked for BF16);
  3. combine (include/moegemm/ep/combine.cuh): each weighted expert row pushed back into its
     source slot, then each token's rows summed in FP32 in choice order.
Every rank must call forward the same number of times (the signals are epoch-counted); T may
differ per rank, 0 included. A rank that never arrives makes the others' waits time out after
timeout_s: they finish with wrong rows and record which rank it was; `check()` raises it.
Buffers come from torch symmetric memory (one rendezvous at construction); NVLink multicast
stays off (env.py). group=None runs the whole path on one GPU (world size 1: the benchmark's
--ranks 1), with a plain buffer in place of the symmetric one.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..jit.codegen import (
    EP_COMBINE_THREADS,
    EP_DISPATCH_THREADS,
    ep_combine_spec,
    ep_dispatch_spec,
)
from ..jit.runtime import load_kernel
from ..launch import checks, plans
from ..launch.device import arch_for_device
from ..moe.layer import check_any_w2, fused_moe_masked, masked_plan
from ..moe.mxfp4 import require_weights_for
from ..moe.weights import PreparedW13
from ..moe.workspace import MoEWorkspace
from .env import require_multicast_off
from .experts import Mxfp4MaskedExperts
from .plan import EPBufferPlan
from .status import describe_status

WEIGHT_DTYPES = ("bf16", "mxfp4")
ACTIVATIONS = ("silu", "swiglu_oai")
_TORCH_DTYPES = {
    "bf16": torch.bfloat16,
    "fp8": torch.float8_e4m3fn,
    "fp32": torch.float32,
    "int32": torch.int32,
    "uint64": torch.int64,  # the kernels compare them unsigned; torch has no uint64 math
}


def _require_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def check_ep_args(
    world_size: int, num_experts: object, top_k: object, hidden: object, intermediate: object,
    weight_dtype: object, max_tokens_per_rank: object, activation: object, timeout_s: object,
    max_m: object,
) -> None:  # fmt: skip
    """EPMoE's constructor checks (no device work): TypeError for a wrong type, ValueError for
    a wrong value, each naming the argument."""
    e = _require_int("num_experts", num_experts)
    k = _require_int("top_k", top_k)
    h = _require_int("hidden", hidden)
    i = _require_int("intermediate", intermediate)
    _require_int("max_tokens_per_rank", max_tokens_per_rank)
    if max_m is not None:
        _require_int("max_m", max_m)
    if not isinstance(weight_dtype, str):
        raise TypeError(f"weight_dtype must be a str, got {type(weight_dtype).__name__}")
    if weight_dtype not in WEIGHT_DTYPES:
        raise ValueError(f"weight_dtype must be one of {WEIGHT_DTYPES}, got {weight_dtype!r}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)):
        raise TypeError(f"timeout_s must be a number, got {type(timeout_s).__name__}")
    if not 0 < timeout_s <= 3600:
        raise ValueError(f"timeout_s must be in (0, 3600], got {timeout_s}")
    if e % world_size:
        raise ValueError(f"num_experts {e} must be a multiple of the group's {world_size} ranks")
    if k > e:
        raise ValueError(f"top_k {k} exceeds num_experts {e}")
    # MXFP4: K of both GEMMs in whole 32-blocks (gpt-oss's 2880 qualifies); BF16: 16-byte rows.
    align = 32 if weight_dtype == "mxfp4" else 8
    if h % align or i % align:
        raise ValueError(
            f"hidden and intermediate must be multiples of {align} with {weight_dtype} experts, "
            f"got {h} and {i}"
        )


class EPMoE:
    """Expert-parallel routed experts over `group` (a torch.distributed ProcessGroup of the
    GPUs of one host, or None for one GPU). Buffers are allocated here, once."""

    def __init__(
        self,
        group: Any,
        num_experts: int,
        top_k: int,
        hidden: int,
        intermediate: int,
        weight_dtype: str = "bf16",
        max_tokens_per_rank: int = 128,
        *,
        activation: str = "silu",
        max_m: int | None = None,
        timeout_s: float = 10.0,
        sm_budget: int | None = None,
        device: torch.device | int | None = None,
    ) -> None:
        world, rank = _group_size_rank(group)
        check_ep_args(world, num_experts, top_k, hidden, intermediate, weight_dtype,
                      max_tokens_per_rank, activation, timeout_s, max_m)  # fmt: skip
        if sm_budget is not None:
            _require_int("sm_budget", sm_budget)
        if group is not None:
            require_multicast_off()
        self.group, self.world_size, self.rank = group, world, rank
        self.num_experts, self.top_k, self.hidden = num_experts, top_k, hidden
        self.intermediate, self.weight_dtype = intermediate, weight_dtype
        self.max_tokens_per_rank, self.activation = max_tokens_per_rank, activation
        self.timeout_s = float(timeout_s)
        self.fp8 = weight_dtype == "mxfp4"
        self.plan = EPBufferPlan(world, num_experts, top_k, hidden, max_tokens_per_rank,
                                 self.fp8, max_m or 0)  # fmt: skip
        self.experts_per_rank = self.plan.experts_per_rank
        self.max_m = self.plan.max_m
        self.device = _resolve_device(device)
        self._allocate()
        # sm_budget caps the grids: two layers overlapped on two streams (micro-batches) must
        # not fill every SM with CTAs that wait for the other layer's signals.
        self._num_sms = min(self._agreed_num_sms(), sm_budget or 1 << 30)
        # From sizes every rank shares (not the local T): one GEMM plan per layer, the same
        # kernels on every rank, built before the first dispatch (warmup() or the first forward).
        self.expected_m = expected_rows(max_tokens_per_rank, world, top_k, num_experts,
                                        self.max_m)  # fmt: skip
        self._require_same_layout()
        self._plans: dict[tuple, _ForwardPlan] = {}

    # -- construction ------------------------------------------------------------------------

    def _allocate(self) -> None:
        plan, dev = self.plan, self.device
        if self.group is None:
            self.buffer = torch.zeros(plan.nbytes, dtype=torch.uint8, device=dev)
            peers = [self.buffer.data_ptr()]
        else:
            import torch.distributed as dist
            import torch.distributed._symmetric_memory as symm_mem

            self.buffer = symm_mem.empty(plan.nbytes, dtype=torch.uint8, device=dev)
            self.buffer.zero_()  # signals start at epoch 0 on every rank
            handle = symm_mem.rendezvous(self.buffer, self.group)
            _refuse_multicast(handle)
            # buffer_ptrs are the peers' allocation bases; the tensor may sit at an offset in
            # its allocation (a pooled one), the same on every rank (symmetric).
            self._alloc_base = handle.buffer_ptrs[self.rank]
            offset = self.buffer.data_ptr() - self._alloc_base
            peers = [base + offset for base in handle.buffer_ptrs]
            torch.cuda.synchronize(dev)
            dist.barrier(group=self.group)  # no rank signals a peer before its zeroing
        self.peer_base = torch.tensor(peers, dtype=torch.int64, device=dev)
        views = {}
        for name, region in plan.regions.items():
            raw = self.buffer[region.offset : region.offset + region.nbytes]
            views[name] = raw.view(_TORCH_DTYPES[region.dtype]).view(region.shape)
        self.x_recv, self.sfa_recv = views["x_recv"], views["sfa_recv"]
        self.recv_weight, self.recv_src = views["recv_weight"], views["recv_src"]
        self.combine_recv = views["combine_recv"]
        el, m, h, i = self.experts_per_rank, self.max_m, self.hidden, self.intermediate
        rows = el * m
        self.state = torch.zeros(2, dtype=torch.int64, device=dev)  # EpState: epoch, status
        self.masked_m = torch.zeros(el, dtype=torch.int32, device=dev)
        self.slot_dest = torch.full((plan.slots_per_rank,), -1, dtype=torch.int32, device=dev)
        self.y = torch.empty(el, m, h, dtype=torch.bfloat16, device=dev)
        self.h = torch.empty(rows, i, dtype=torch.bfloat16, device=dev)
        self.out = torch.empty(self.max_tokens_per_rank, h, dtype=torch.bfloat16, device=dev)
        if self.fp8:
            self.h8 = torch.empty(rows, i, dtype=torch.float8_e4m3fn, device=dev)
            self.sfa_h = torch.empty(rows, -(-i // 128), dtype=torch.float32, device=dev)
        else:
            # fused_moe_masked reads only the workspace's h (and its device, intermediate);
            # the other buffers are this layer's, named so that nothing is allocated.
            self._ws = MoEWorkspace.of_buffers(
                self.y.view(rows, h), self.h, self.masked_m, self.slot_dest,
                self.recv_weight.view(-1), self.slot_dest, 1,
            )  # fmt: skip

    def _agreed_num_sms(self) -> int:
        """The smallest SM count of the group: the grids (and so the arrive counts) must be
        equal on every rank."""
        num_sms = arch_for_device(self.device.index or 0).num_sms
        if self.group is None:
            return num_sms
        import torch.distributed as dist

        t = torch.tensor([num_sms], dtype=torch.int32, device=self.device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.group)
        return int(t.item())  # construction only

    def _require_same_layout(self) -> None:
        """ValueError unless every rank built the same layout: peers write at offsets and
        compare arrive counts computed from these (construction only: a host sync)."""
        if self.group is None:
            return
        import torch.distributed as dist

        offset = self.buffer.data_ptr() - self._alloc_base
        mine = [self.num_experts, self.top_k, self.hidden, self.intermediate,
                self.max_tokens_per_rank, self.max_m, int(self.fp8), self._num_sms,
                self.plan.nbytes, offset, ACTIVATIONS.index(self.activation)]  # fmt: skip
        local = torch.tensor(mine, dtype=torch.int64, device=self.device)
        every = torch.empty(self.world_size, len(mine), dtype=torch.int64, device=self.device)
        dist.all_gather_into_tensor(every, local, group=self.group)
        rows = every.tolist()
        names = ("num_experts", "top_k", "hidden", "intermediate", "max_tokens_per_rank",
                 "max_m", "mxfp4", "SMs after sm_budget", "symmetric bytes",
                 "symmetric offset", "activation")  # fmt: skip
        for col, name in enumerate(names):
            values = [row[col] for row in rows]
            if len(set(values)) != 1:
                raise ValueError(f"moegemm.ep: the ranks disagree on {name}: {values} (rank "
                                 f"order); every rank must build EPMoE alike")  # fmt: skip

    def warmup(self, w13_local: PreparedW13, w2_local: Any) -> None:
        """Builds (compiles, loads) every kernel forward launches, then waits for the group:
        collective, once, before the first forward, so that no rank compiles while its peers
        wait on its signals (a compile can outlast timeout_s). A host sync: not in forward."""
        x = torch.empty(0, self.hidden, dtype=torch.bfloat16, device=self.device)
        ids = torch.empty(0, self.top_k, dtype=torch.int32, device=self.device)
        w = torch.empty(0, self.top_k, dtype=torch.float32, device=self.device)
        _, ldx, w2_key, _ = self._check_forward(x, ids, w, w13_local, w2_local, None, None)
        key = (0, ldx, w2_key, _w13_form(w13_local))
        self._plans.setdefault(key, _ForwardPlan(self, 0, ldx, w13_local, w2_key))
        if self.group is not None:
            import torch.distributed as dist

            dist.barrier(group=self.group)

    @property
    def nbytes(self) -> int:
        """Device bytes this layer holds per rank (symmetric + local)."""
        return self.plan.nbytes + self.plan.local_nbytes(self.intermediate)

    # -- forward -----------------------------------------------------------------------------

    def forward(
        self,
        x: torch.Tensor,
        topk_ids: torch.Tensor,
        topk_weights: torch.Tensor,
        w13_local: PreparedW13,
        w2_local: Any,
        *,
        w2_bias: torch.Tensor | None = None,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """This rank's [T, H] BF16 combined output (into `out`, or a view of the layer's own
        buffer that the next forward overwrites). x [T, H] BF16, T <= max_tokens_per_rank;
        topk_ids int32 [T, top_k] global expert ids (outside [0, E): dropped); topk_weights
        float32 [T, top_k]; w13_local from prepare_moe_weights over this rank's E_local experts
        (BF16, or MXFP4 for weight_dtype "mxfp4"), w2_local their w2. Collective: every rank of
        the group calls it. Never synchronizes."""
        t, ldx, w2_key, packed = self._check_forward(x, topk_ids, topk_weights, w13_local,
                                                     w2_local, w2_bias, out)  # fmt: skip
        if out is None:
            out = self.out[:t]
        key = (t, ldx, w2_key, _w13_form(w13_local))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = _ForwardPlan(self, t, ldx, w13_local, w2_key)
        w2 = w2_local if packed is None else packed[:2]  # MXFP4: (blocks, scales)
        plan.run(self, x, topk_ids, topk_weights, w13_local, w2, w2_bias, out)
        return out

    __call__ = forward

    def _check_forward(self, x, topk_ids, topk_weights, w13, w2, w2_bias, out) -> tuple:
        checks.require_tensor("x", x, (torch.bfloat16,), 2)
        t, h = x.shape
        if h != self.hidden:
            raise ValueError(f"x has {h} columns, the layer's hidden is {self.hidden}")
        if t > self.max_tokens_per_rank:
            raise ValueError(f"{t} tokens exceed max_tokens_per_rank {self.max_tokens_per_rank}")
        ldx = checks.row_stride("x", x) if t else h
        if t and x.data_ptr() % 16:
            raise ValueError("x must start on a 16-byte boundary")
        for name, tensor, dtype in (("topk_ids", topk_ids, torch.int32),
                                    ("topk_weights", topk_weights, torch.float32)):  # fmt: skip
            checks.require_tensor(name, tensor, (dtype,), 2)
            checks.require_shape(name, tensor, (t, self.top_k))
            checks.require_contiguous(name, tensor)
        if not isinstance(w13, PreparedW13):
            raise TypeError("w13_local must come from moegemm.prepare_moe_weights")
        el = self.experts_per_rank
        if (w13.num_experts, w13.hidden, w13.intermediate) != (el, self.hidden,
                                                               self.intermediate):  # fmt: skip
            raise ValueError(
                f"w13_local holds {w13.num_experts} experts of hidden {w13.hidden}, intermediate "
                f"{w13.intermediate}; this rank owns {el} of {self.hidden}, {self.intermediate}"
            )
        if w13.activation != self.activation:
            raise ValueError(f"w13_local was prepared for {w13.activation!r}, the layer is "
                             f"{self.activation!r}")  # fmt: skip
        if w13.is_mxfp4 != self.fp8:
            raise ValueError(f"the layer's experts are {self.weight_dtype}; w13_local is "
                             f"{'mxfp4' if w13.is_mxfp4 else 'bf16'}")  # fmt: skip
        packed = check_any_w2(w13, w2, w2_bias, el, self.hidden, self.intermediate)
        if w13.is_mxfp4:  # experts prepared for another GPU: a clear error, not a bad bind
            require_weights_for(arch_for_device(self.device.index or 0).name, w13)
        w2_key = (w2.stride(1), w2.stride(0)) if packed is None else ("mxfp4", packed[2])
        if out is not None:
            checks.require_tensor("out", out, (torch.bfloat16,), 2)
            checks.require_shape("out", out, (t, self.hidden))
            checks.require_contiguous("out", out)
        tensors = {"x": x, "topk_ids": topk_ids, "topk_weights": topk_weights, "out": out,
                   "w13_local": w13.weight, "w2_bias": w2_bias}  # fmt: skip
        for name, tensor in tensors.items():
            if tensor is not None and tensor.device != self.device:
                raise ValueError(f"{name} is on {tensor.device}, the layer on {self.device}")
        return t, ldx, w2_key, packed

    # -- status ------------------------------------------------------------------------------

    def status_word(self) -> int:
        """The device status word (a host sync: call it outside forward)."""
        return int(self.state[1].item()) & 0xFFFFFFFF

    def check(self) -> None:
        """RuntimeError if a forward so far timed out waiting for a rank (naming it) or dropped
        rows for capacity. Synchronizes with the device."""
        message = describe_status(self.status_word(), self.timeout_s)
        if message is not None:
            raise RuntimeError(f"moegemm.ep rank {self.rank}: {message}")

    def __repr__(self) -> str:
        return (
            f"EPMoE(rank {self.rank} of {self.world_size}, {self.num_experts} experts "
            f"({self.experts_per_rank} local), top_k={self.top_k}, hidden={self.hidden}, "
            f"intermediate={self.intermediate}, {self.weight_dtype}, max_tokens_per_rank="
            f"{self.max_tokens_per_rank}, max_m={self.max_m}, {self.nbytes / 2**20:.1f} MiB)"
        )


def expected_rows(t: int, world_size: int, top_k: int, num_experts: int, max_m: int) -> int:
    """The rows a local expert holds on average if every rank had this rank's T and routing
    were uniform: the masked GEMMs' expected_m (it steers their tiles, not their result)."""
    return max(1, min(max_m, math.ceil(t * world_size * top_k / num_experts)))


def _refuse_multicast(handle: Any) -> None:
    """RuntimeError if torch symmetric memory set up an NVLink multicast object anyway."""
    # multicast_ptr is 0 unless a multicast object was bound (has_multicast_support is a
    # static method about the device, not about this handle).
    if getattr(handle, "multicast_ptr", 0):
        raise RuntimeError(
            "moegemm.ep keeps NVLink multicast off, but torch symmetric memory created a "
            "multicast object: is TORCH_SYMM_MEM_DISABLE_MULTICAST=1 set in every process?"
        )


def _resolve_device(device: torch.device | int | str | None) -> torch.device:
    """The layer's device: the current CUDA device by default. A CPU device is accepted for
    host-only tests (tests/unit/test_ep_glue.py), whose launchers are recorders."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    if isinstance(device, int):
        return torch.device("cuda", device)
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return dev


def _group_size_rank(group: Any) -> tuple[int, int]:
    if group is None:
        return 1, 0
    import torch.distributed as dist

    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"group must be a torch.distributed ProcessGroup or None, got "
                        f"{type(group).__name__}")  # fmt: skip
    return dist.get_world_size(group), dist.get_rank(group)


def _w13_form(w13: PreparedW13) -> tuple:
    """What of w13 beside the shapes decides GEMM1's kernel: its MXFP4 layout (the experts take
    the table kernels only, windowed or not: experts.py)."""
    return (w13.mxfp4_prepared, w13.mxfp4_arch)


class _ForwardPlan:
    """The bound dispatch and combine launches of one (T, ldx, w2 form), and the experts'
    GEMM plan (MXFP4; BF16 goes through fused_moe_masked's own plan cache)."""

    def __init__(self, ep: EPMoE, t: int, ldx: int, w13: PreparedW13, w2_key: tuple) -> None:
        from .. import _C

        p, dev = ep.plan, ep.device.index or 0
        arch = arch_for_device(dev).name
        timeout_ns = int(ep.timeout_s * 1e9)
        ctas, spc, smem = p.dispatch_grid(ep._num_sms)
        dispatch = _C.EpDispatchLauncher(
            load_kernel(ep_dispatch_spec(arch, ep.fp8)), 1, 1, 1, ctas, EP_DISPATCH_THREADS,
            smem, 1, 1,
        )  # fmt: skip
        shared = {
            "rank": ep.rank, "world_size": ep.world_size, "num_tokens": t, "top_k": ep.top_k,
            "experts_per_rank": ep.experts_per_rank, "hidden": ep.hidden, "max_m": ep.max_m,
            "slots_per_rank": p.slots_per_rank, "timeout_ns": timeout_ns, **p.offsets(),
        }  # fmt: skip
        self.dispatch = plans.bind(dispatch, dev, {
            **shared, "num_experts": ep.num_experts, "ldx": ldx, "slots_per_cta": spc,
        })  # fmt: skip
        combine = _C.EpCombineLauncher(
            load_kernel(ep_combine_spec(arch)), 1, 1, 1, p.combine_grid(ep._num_sms),
            EP_COMBINE_THREADS, 0, 1, 1,
        )  # fmt: skip
        self.combine = plans.bind(combine, dev, {**shared, "ldo": ep.hidden})
        self.expected_m = ep.expected_m
        self.mxfp4 = None
        if not ep.fp8:
            masked_plan(dev, ep.experts_per_rank, ep.max_m, ep.hidden, ep.intermediate,
                        self.expected_m, ep.activation, *w2_key)  # fmt: skip
        if ep.fp8:
            self.mxfp4 = Mxfp4MaskedExperts(
                dev, ep.experts_per_rank, ep.max_m, ep.hidden, ep.intermediate, self.expected_m,
                w13, w2_key[1],
            )  # fmt: skip

    def run(self, ep: EPMoE, x, ids, weights, w13: PreparedW13, w2, w2_bias, out) -> None:
        dev = ep.device.index or 0
        stream = plans.raw_stream(dev)
        state, masked, dest = ep.state.data_ptr(), ep.masked_m.data_ptr(), ep.slot_dest.data_ptr()
        peers = ep.peer_base.data_ptr()
        x_ptr = x.data_ptr() if x.shape[0] else 0  # an empty x's pointer may be unaligned
        launched = self.dispatch(
            x_ptr, ids.data_ptr(), weights.data_ptr(), peers, state, masked, dest, stream
        )
        plans.require_launched(launched, dev)  # nothing after a dispatch that did not launch
        if self.mxfp4 is None:
            fused_moe_masked(
                ep.x_recv, ep.masked_m, w13, w2, self.expected_m, w2_bias=w2_bias, out=ep.y,
                workspace=ep._ws, row_weight=ep.recv_weight,
            )  # fmt: skip
        else:
            w2b, w2s = w2
            bufs = {"x_recv": ep.x_recv, "sfa_recv": ep.sfa_recv, "h": ep.h, "h8": ep.h8,
                    "sfa_h": ep.sfa_h, "y": ep.y, "recv_weight": ep.recv_weight,
                    "masked_m": ep.masked_m}  # fmt: skip
            launched &= self.mxfp4.run(bufs, w13, w2b, w2s, w2_bias, stream)
        launched &= self.combine(
            ep.y.data_ptr(), dest, masked, peers, state, out.data_ptr(), stream
        )
        plans.require_launched(launched, dev)
