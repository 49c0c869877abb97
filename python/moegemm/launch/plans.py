"""Signature-keyed plans: what a call of one operand signature launches, and the entry protocol
every public function and fused layer follows.

Every public function keeps one `PlanCache` from the call's *signature* to a `Plan`. The signature is
a tuple of each operand's (type, shape, stride, dtype, device), plus the non-tensor arguments
the checks read (presence of `c`, `expected_m`, which of `m_indices`/`offs`): everything the
full argument checks look at except the data pointers and the current device. So

- on a miss, the full checks run (they alone produce error messages); a call that passes them
  and launches a kernel stores its plan under its signature;
- on a hit, only what can differ between calls of one signature is checked: every TMA
  operand's base on a 16-byte boundary and the current CUDA device being the operands' one.
  The plan's bound launch (`_C`'s `launcher.bind`) checks both and returns False, having done
  nothing, where they fail; the call then takes the full checks, which raise the error. A hit
  therefore accepts exactly what the full checks would accept for that call.

Calls that launch nothing (empty problems, K = 0) store no plan and always take the full
checks: a few microseconds, and no launch follows. Plans depend on the SM count, so
`set_num_sms` clears every cache made here; a forced `config=` neither reads nor fills them.

The protocol, in a public function:
    key = signature(a, b, d, info)                      # None: not all strided tensors
    plan = cache.find(key, config)                      # None: a miss or a forced config
    if plan is not None and plan.launch(*pointers, raw_stream(plan.device)):
        return d                                        # the hit path: nothing else runs
    problem = check_...(...)                            # the full checks (every error)
    cache.launch(key, desc, problem, pointers, config)  # plan built, stored, launched
A problem record (a NamedTuple of the family's launch integers, named as its `_C` launcher
names them, plus `device`) becomes the launcher's bound integers by name (`bound_integers`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from ..families import kernel_spec, lookup, select_config  # the warmup builds the same kernels
from ..heuristics import GemmConfig, GemmDesc
from ..jit.runtime import load_kernel
from .device import arch_for_device, register_plan_cache

TMA_ALIGN_MASK = 15  # TMA bases are 16-byte aligned: ptr & 15 == 0

# The C-level getters cost a fraction of their torch.cuda wrappers; CPU builds of torch lack
# them (no plan can exist there: the full checks refuse every non-CUDA operand).
current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)
raw_stream = getattr(
    torch._C, "_cuda_getCurrentRawStream", lambda i: torch.cuda.current_stream(i).cuda_stream
)


class Plan:
    """What a hit launches: a bound launch and what it was made from.

    device: the CUDA device index of the operands (a hit requires it to be current);
    launch: the per-call entry, `launch(*pointers, stream) -> bool`: a `_C` bound launch (its
    device and integers bound at plan time, so a call converts only the pointers and the
    stream; False where an operand base is off a 16-byte boundary or another device is
    current) or a stand-in in tests; args: those bound integers, in the launcher's order (for
    tools and tests; the hot path never reads them); launcher: the `_C` launcher the launch was bound from
    (`launcher.num_blocks`)."""

    __slots__ = ("args", "config", "device", "launch", "launcher")

    def __init__(
        self,
        device: int,
        launch: Any,
        args: tuple[int, ...],
        config: GemmConfig | None,
        launcher: Any = None,
    ):
        self.device = device
        self.launch = launch
        self.args = args
        self.config = config
        self.launcher = launcher

    def __repr__(self) -> str:
        return f"Plan(device={self.device}, args={self.args}, config={self.config})"


class PlanCache(dict):
    """One entry point's signature -> Plan dict, cleared by `set_num_sms`."""

    def __init__(self) -> None:
        super().__init__()
        register_plan_cache(self)

    def find(self, key: tuple | None, config: GemmConfig | None = None) -> Plan | None:
        """The plan of a signature; None without one, on a miss, or when a config is forced."""
        return self.get(key) if key is not None and config is None else None

    def launch(
        self,
        key: tuple | None,
        desc: GemmDesc,
        problem: tuple,
        pointers: tuple[int, ...],
        config: GemmConfig | None = None,
    ) -> Plan:
        """A miss after the full checks: the plan of `problem` (a record with `device`) is
        built, stored under `key` unless the config was forced, and launched with `pointers`."""
        device = problem.device
        plan = make_plan(device, desc, problem, config)
        if config is None and key is not None:
            self[key] = plan
        require_launched(plan.launch(*pointers, raw_stream(device)), device)
        return plan


def new_plan_cache() -> PlanCache:
    """A signature -> Plan dict that `set_num_sms` clears."""
    return PlanCache()


def signature(*operands: object) -> tuple | None:
    """The plan key of a call's operand tensors (None where absent): each one's type, shape,
    strides, dtype and device. None where an operand is no strided tensor (nested, sparse, not
    a tensor): the call then takes the full checks, which name it."""
    key: tuple = ()
    try:
        for t in operands:
            key += (None,) if t is None else (type(t), t.shape, t.stride(), t.dtype, t.device)
    except (AttributeError, TypeError, RuntimeError):
        return None
    return key


def max_ctas(desc: GemmDesc, config: GemmConfig) -> int:
    """CTAs worth launching: the tile count where the host knows it, else an upper bound."""
    lay = config.layout
    # CTAs per row of cluster tiles, and the rows of one cluster tile.
    n_blocks = math.ceil(desc.n / (lay.block_n * lay.cluster_n)) * lay.cluster_size
    rows = lay.block_m * lay.cluster_m
    if desc.kind in ("bf16_gemm_nt", "m_grouped_contiguous"):
        return math.ceil(desc.m / rows) * n_blocks
    if desc.kind == "m_grouped_offsets":  # each group may end in a partial block
        return (math.ceil(desc.m / rows) + desc.num_groups) * n_blocks
    return desc.num_groups * math.ceil(desc.m / rows) * n_blocks  # masked, k_grouped


def build_launcher(device: int, desc: GemmDesc, config: GemmConfig | None = None) -> tuple:
    """(config, launcher): the heuristics' config for `desc` (or the given one, ValueError
    where it does not compute `desc`), compiled, loaded and bound to its launch shape."""
    from .. import _C

    arch = arch_for_device(device)
    family = lookup(arch, desc)
    if config is None:
        config = select_config(desc, arch)
    elif not family.heuristics.is_legal(config, desc, arch):
        raise ValueError(f"config {config.short_name()} does not compute {desc} on {arch.name}")
    lay = config.layout
    kernel = load_kernel(kernel_spec(desc, config, arch))
    launcher_type = getattr(_C, family.launcher_name(desc, config))
    # Persistent CTAs, whole clusters of them (a cluster's CTAs share an operand of each tile).
    cluster = lay.cluster_m * lay.cluster_n
    wanted = -(-max_ctas(desc, config) // cluster) * cluster
    num_blocks = max(cluster, min(arch.num_sms, wanted) // cluster * cluster)
    launcher = launcher_type(
        kernel,
        lay.block_m,
        lay.block_n,
        lay.block_k,
        num_blocks,
        config.launch.num_threads,
        config.pipeline.smem_bytes,
        lay.cluster_m,
        lay.cluster_n,
        **config.storage.launcher_kwargs(),
    )
    return config, launcher


def bound_integers(launcher_type: type, problem: object) -> tuple[int, ...]:
    """The launcher's bound integers (`bind_args`, its csrc names in order) read by name from a
    problem record (problems.py) or a mapping."""
    names = launcher_type.bind_args
    try:
        if isinstance(problem, Mapping):
            return tuple(problem[name] for name in names)
        return tuple(getattr(problem, name) for name in names)
    except (AttributeError, KeyError) as missing:
        raise TypeError(
            f"{type(problem).__name__} does not name every integer {launcher_type.__name__} "
            f"binds ({', '.join(names)}): {missing} is missing"
        ) from None


def bind(launcher: Any, device: int, problem: object) -> Any:
    """`launcher.bind` on device with its integers taken by name from `problem`."""
    return launcher.bind(device, *bound_integers(type(launcher), problem))


def make_plan(
    device: int, desc: GemmDesc, problem: tuple, config: GemmConfig | None = None
) -> Plan:
    """The plan of one signature (a forced `config` bypasses the heuristics): its launcher with
    the problem's launch integers bound (checked here, so a bad one raises before any launch)."""
    config, launcher = build_launcher(device, desc, config)
    args = bound_integers(type(launcher), problem)
    launch = launcher.bind(device, *args)
    sizes = lookup(arch_for_device(device), desc).workspace(desc, config)
    if sizes is not None:
        launch = with_workspace(launch, device, *sizes)
    return Plan(device, launch, args, config, launcher)


def with_workspace(launch: Any, device: int, nbytes: int, flag_words: int) -> Any:
    """A bound launch whose kernel takes a scratch buffer and zeroed int32 flags after the
    operands' pointers: both allocated each call from torch's caching allocator on torch's
    current stream, which every caller launches on (`raw_stream(device)`), so they are
    stream-ordered, captured into a CUDA graph's pool under capture, and freed for reuse once
    the call returns (the kernel runs before any later use on that stream)."""
    cuda = torch.device("cuda", device)

    def launch_with_workspace(*call: int) -> bool:
        scratch = torch.empty(nbytes, dtype=torch.uint8, device=cuda)
        flags = torch.zeros(flag_words, dtype=torch.int32, device=cuda)
        return launch(*call[:-1], scratch.data_ptr(), flags.data_ptr(), call[-1])

    return launch_with_workspace


def require_launched(launched: bool, device: int) -> None:
    """A launch after the full checks: they passed, so a bound launch refuses only where the CUDA
    context current on this thread is on another device than torch's current one (a context
    made current through the driver API behind torch's back)."""
    if not launched:
        raise RuntimeError(
            f"moegemm: the CUDA context current on this thread is not on cuda:{device}, torch's "
            "current device; make torch's device current (torch.cuda.set_device) before the call"
        )


def build_plan(device: int, desc: GemmDesc, config: GemmConfig | None = None) -> Plan:
    """A plan without bound arguments, for tools that inspect a launcher (`plan.launcher
    .num_blocks`) or call it with arguments of their own: `plan.launch` is the launcher itself,
    called with the pointers, the integers and the stream."""
    config, launcher = build_launcher(device, desc, config)
    return Plan(device, launcher, (), config, launcher)
