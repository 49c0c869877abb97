"""moegemm as a transformers experts implementation ("moegemm" in `ExpertsInterface`).

    import moegemm.integrations.transformers  # registers "moegemm" (register() again is harmless)
    model = AutoModelForCausalLM.from_pretrained(..., experts_implementation="moegemm")
    # or: model.set_experts_implementation("moegemm")

Every experts class decorated with `use_experts_implementation` then calls
`moegemm_experts_forward(module, hidden_states, top_k_index, top_k_weights)`, which maps the
module's layout onto `moegemm.fused_moe`:

- concatenated gate/up, `gate_up_proj` [E, 2I, H] (or [E, H, 2I] with `is_transposed`), the
  default gate `act_fn(gate) * up` with SiLU (Qwen2/3-MoE, Mixtral, DeepSeek-V3, ...): "silu";
- GPT-OSS (`is_concatenated=False`, `is_transposed=True`, biases, alpha 1.702, limit 7):
  "swiglu_oai";
- GPT-OSS MXFP4 experts: a module holding the checkpoint's `gate_up_proj_blocks`,
  `gate_up_proj_scales`, `down_proj_blocks`, `down_proj_scales` (see `attach_mxfp4`) runs the
  FP8 x FP4 layer on them instead of its BF16 parameters. On Hopper transformers loads an MXFP4
  checkpoint's experts dequantized to BF16 (its MXFP4 kernels need the `kernels` hub);
  `attach_mxfp4_checkpoint(model, path)` gives every experts module its codes and scales back
  from the checkpoint's safetensors.

The prepared weights are built on a module's first call and rebuilt when a source tensor
changes: a new tensor, a new shape, dtype or device, or an in-place update (the tensor's version
counter). Their memory beside the module's own tensors, per expert (hidden H, intermediate I;
`prepared_nbytes(module)` gives a module's total):

- BF16 experts, w13: `prepare_moe_weights`' reordered copy, 2I x H BF16 = 4*I*H bytes, so w13 is
  held twice (Qwen3-30B-A3B: 6 MiB an expert, 768 MiB a layer of 128). w2: no copy where the
  module stores it [E, H, I] (Qwen2/3-MoE, Mixtral, DeepSeek-V3: fused_moe reads the parameter);
  GPT-OSS stores [E, I, H], so its contiguous [E, H, I] copy adds 2*I*H bytes (6*I*H in all:
  47.5 MiB an expert of GPT-OSS-20B).
- MXFP4 experts (GPT-OSS, H200 layout): w13 codes 2I x Hp/2 bytes and offsets words 2I x 2Hp/128
  int32, 9/8*I*Hp bytes; w2 the same for H x Ip, 9/16*H*Ip bytes; Hp and Ip are H and I rounded
  up to 128 (GPT-OSS-20B: 2944; 13.7 MiB an expert with the biases).
- Biases (GPT-OSS): FP32 copies, 2I x 4 + H x 4 = 8*I + 4*H bytes.

`release_source_weights(model)` drops the source tensors the prepared copy has made redundant
(inference only: no training, no gradients, no fallback, since all of those read the source):
w13 is then held once. A released module runs only from its prepared copy, never rebuilt.

What moegemm cannot run (CPU tensors, a GPU without moegemm kernels, a dtype other than BF16, an
unsupported gate or activation, autograd, sizes the kernels refuse) raises
`UnsupportedExpertsError` naming the module and the reason. `register(fallback="grouped_mm")`
(or `"eager"`, or True for "grouped_mm"; or the environment variable
MOEGEMM_TRANSFORMERS_FALLBACK with the same values) runs the module's own implementation
instead, with a warning once per module: never a silent different answer.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from transformers.integrations import moe as hf_moe

import moegemm
from moegemm.heuristics import arch_for_compute_capability
from moegemm.jit.cache import KernelNotCachedError

NAME = "moegemm"
FALLBACK_ENV = "MOEGEMM_TRANSFORMERS_FALLBACK"
FALLBACKS = ("grouped_mm", "eager")
# moegemm's "swiglu_oai" epilogue hard-codes GPT-OSS's constants.
OAI_ALPHA, OAI_LIMIT = 1.702, 7.0
MXFP4_ATTRS = ("gate_up_proj_blocks", "gate_up_proj_scales", "down_proj_blocks", "down_proj_scales")
# Every tensor a prepared copy stands in for (an MXFP4 module's BF16 parameters included: its
# prepared copy comes from the MXFP4 tensors, so they are never read).
SOURCE_ATTRS = ("gate_up_proj", "down_proj", "gate_up_proj_bias", "down_proj_bias", *MXFP4_ATTRS)
# A module attribute, not a weak-map entry: a copy of a released module has placeholders too and
# must refuse as well.
RELEASED_ATTR = "_moegemm_released_sources"

Pair = tuple[torch.Tensor, torch.Tensor]


class UnsupportedExpertsError(RuntimeError):
    """moegemm cannot run this experts module; the message names the module and the reason."""


@dataclass(frozen=True, eq=False)
class ExpertsOperands:
    """fused_moe's operands in their source layout (views of the module's tensors, any dtype):
    w13 [E, 2I, H] in `activation`'s row order (silu: gate rows then up rows; swiglu_oai:
    interleaved) or MXFP4 (blocks [E, 2I, H/2], scales [E, 2I, H/32]); w2 [E, H, I] or MXFP4
    (blocks [E, H, I/2], scales [E, H, I/32]); biases [E, 2I] and [E, H] or None."""

    w13: torch.Tensor | Pair
    w2: torch.Tensor | Pair
    activation: str
    w13_bias: torch.Tensor | None
    w2_bias: torch.Tensor | None

    @property
    def is_mxfp4(self) -> bool:
        return isinstance(self.w13, tuple)


@dataclass(frozen=True, eq=False)
class PreparedExperts:
    """What fused_moe takes, built once per module and source-tensor state (`key`)."""

    w13: moegemm.PreparedW13
    w2: torch.Tensor | moegemm.Mxfp4Weights | Pair
    w2_bias: torch.Tensor | None
    key: tuple


_prepared: weakref.WeakKeyDictionary[torch.nn.Module, PreparedExperts] = (
    weakref.WeakKeyDictionary()
)  # a weak map, not a module attribute: copies of a module never share or carry the copy
_warned: weakref.WeakSet[torch.nn.Module] = weakref.WeakSet()
_fallback: str | None = None


def describe(module: torch.nn.Module) -> str:
    sizes = [f"{n}={getattr(module, n)}" for n in ("num_experts",) if hasattr(module, n)]
    return f"{type(module).__name__}({', '.join(sizes)})"


def _unsupported(module: torch.nn.Module, reason: str) -> UnsupportedExpertsError:
    return UnsupportedExpertsError(
        f'experts_implementation="{NAME}" cannot run {describe(module)}: {reason} '
        f'(register(fallback="grouped_mm") or {FALLBACK_ENV}=grouped_mm runs the module\'s own '
        f"implementation instead)"
    )


def _flag(module: torch.nn.Module, name: str, default: bool) -> bool:
    return bool(getattr(module, name, default))


def _activation(module: torch.nn.Module) -> str:
    """The fused_moe activation equal to the module's gate, or UnsupportedExpertsError."""
    if not _flag(module, "has_gate", True):
        raise _unsupported(module, "experts without a gate (up_proj only) have no fused layer")
    gate_fn = getattr(type(module), "_apply_gate", hf_moe._default_apply_gate)
    if _flag(module, "is_concatenated", True):
        # Only the default gate is act(gate) * up on [gate; up]; an override may clamp or scale.
        if gate_fn is not hf_moe._default_apply_gate:
            raise _unsupported(module, f"its own gate {gate_fn.__qualname__} is not act(gate) * up")
        act = getattr(module, "act_fn", None)
        silu = isinstance(act, torch.nn.SiLU) or type(act).__name__ == "SiLUActivation"
        if not silu:
            raise _unsupported(module, f"activation {type(act).__name__}: only SiLU is fused")
        return "silu"
    # Interleaved gate/up: GPT-OSS's clamped SwiGLU with its own constants, nothing else.
    alpha, limit = getattr(module, "alpha", None), getattr(module, "limit", None)
    is_oai = gate_fn.__qualname__ == "GptOssExperts._apply_gate"
    if not is_oai or (alpha, limit) != (OAI_ALPHA, OAI_LIMIT):
        raise _unsupported(
            module,
            f"interleaved gate/up with gate {gate_fn.__qualname__} (alpha {alpha}, limit "
            f"{limit}): only GPT-OSS's SwiGLU (alpha {OAI_ALPHA}, limit {OAI_LIMIT}) is fused",
        )
    return "swiglu_oai"


def _held(module: torch.nn.Module, name: str) -> object:
    """getattr(module, name, None) without nn.Module.__getattr__'s raise and catch for a name the
    module lacks (four a forward call on BF16 experts: 5 us of host time)."""
    for table in (module.__dict__, module._parameters, module._buffers, module._modules):
        if name in table:
            return table[name]
    return getattr(module, name, None) if hasattr(type(module), name) else None


def _mxfp4_pairs(module: torch.nn.Module) -> tuple[Pair, Pair] | None:
    held = [_held(module, name) for name in MXFP4_ATTRS]
    if all(t is None for t in held):
        return None
    if not all(isinstance(t, torch.Tensor) for t in held):
        missing = [n for n, t in zip(MXFP4_ATTRS, held) if not isinstance(t, torch.Tensor)]
        raise _unsupported(module, f"MXFP4 experts without {', '.join(missing)}")
    gb, gs, db, ds = held
    # The checkpoint's [E, N, K/32, 16] view of the [E, N, K/2] codes.
    return (gb.flatten(2), gs), (db.flatten(2), ds)


def experts_operands(module: torch.nn.Module) -> ExpertsOperands:
    """The module's experts as fused_moe's source-layout operands (no copies), or
    UnsupportedExpertsError for a gate or layout fused_moe does not compute."""
    activation = _activation(module)
    has_bias = _flag(module, "has_bias", False)
    b13 = module.gate_up_proj_bias if has_bias else None
    b2 = module.down_proj_bias if has_bias else None
    mxfp4 = _mxfp4_pairs(module)
    if mxfp4 is not None:
        # Checkpoint codes are [out, in] whatever the BF16 parameters' orientation.
        return ExpertsOperands(mxfp4[0], mxfp4[1], activation, b13, b2)
    w13, w2 = _bf16_weights(module)
    return ExpertsOperands(w13, w2, activation, b13, b2)


def _bf16_weights(module: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's w13 [E, 2I, H] and w2 [E, H, I] (views) whatever its orientation."""
    w13, w2 = module.gate_up_proj, module.down_proj
    if _flag(module, "is_transposed", False):  # [E, H, 2I] and [E, I, H]
        w13, w2 = w13.transpose(1, 2), w2.transpose(1, 2)
    return w13, w2


def _tensors(ops: ExpertsOperands) -> list[torch.Tensor]:
    flat: list[torch.Tensor] = []
    for item in (ops.w13, ops.w2, ops.w13_bias, ops.w2_bias):
        if isinstance(item, tuple):
            flat.extend(item)
        elif item is not None:
            flat.append(item)
    return flat


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # an inference tensor has no version counter (and cannot be updated)
        return -1


def _state_key(ops: ExpertsOperands) -> tuple:
    """What changes when a source tensor does: its storage, its in-place updates (the version
    counter of the tensor or view), its shape, dtype and device."""
    parts: list = [ops.activation]
    for t in _tensors(ops):
        parts.append((t.data_ptr(), _version(t), tuple(t.shape), t.stride(), t.dtype, t.device))
    return tuple(parts)


def _mxfp4_arch(device: torch.device) -> str:
    if device.type != "cuda":
        return "sm_90a"  # the preparation is plain torch; a CPU call is refused before launch
    return arch_for_compute_capability(*torch.cuda.get_device_capability(device))


def prepare_operands(ops: ExpertsOperands, key: tuple = ()) -> PreparedExperts:
    """prepare_moe_weights and a fused_moe-ready w2 and w2 bias (plain torch: runs on CPU too).
    Raises TypeError or ValueError for what the layer refuses (dtype, sizes)."""
    b2 = None if ops.w2_bias is None else ops.w2_bias.detach().float().contiguous()
    b13 = None if ops.w13_bias is None else ops.w13_bias.detach()
    if ops.is_mxfp4:
        w13 = moegemm.prepare_moe_weights(
            tuple(t.detach() for t in ops.w13), activation=ops.activation, w13_bias=b13
        )
        blocks, scales = (t.detach().contiguous() for t in ops.w2)
        arch = _mxfp4_arch(blocks.device)
        w2 = moegemm.prepare_mxfp4_weights(blocks, scales, arch=arch)
        return PreparedExperts(w13, w2, b2, key)
    if ops.w13.dtype != torch.bfloat16 or ops.w2.dtype != torch.bfloat16:
        raise TypeError(
            f"the experts' weights are {ops.w13.dtype} and {ops.w2.dtype}: fused_moe takes "
            f"bfloat16 (or MXFP4) experts"
        )
    w13 = moegemm.prepare_moe_weights(ops.w13.detach(), activation=ops.activation, w13_bias=b13)
    return PreparedExperts(w13, ops.w2.detach().contiguous(), b2, key)


def released(module: torch.nn.Module) -> bool:
    """Whether release_source_weights replaced this module's source tensors by placeholders."""
    return bool(getattr(module, RELEASED_ATTR, ()))


def _released_error(module: torch.nn.Module, what: str) -> UnsupportedExpertsError:
    return UnsupportedExpertsError(
        f"{describe(module)}'s source weights were released (release_source_weights) and {what}"
    )


def prepared_experts(
    module: torch.nn.Module, ops: ExpertsOperands | None = None
) -> PreparedExperts:
    """The module's prepared weights, built on first use and whenever a source tensor changed
    (a released module's are never rebuilt: its tensors are placeholders). `ops`: the module's
    experts_operands where the caller has them already."""
    if released(module):
        cached = _prepared.get(module)
        if cached is None:
            raise _released_error(
                module, "it holds no prepared copy (a copy of a released module carries none)"
            )
        return cached
    ops = experts_operands(module) if ops is None else ops
    key = _state_key(ops)
    cached = _prepared.get(module)
    if cached is not None and cached.key == key:
        return cached
    _prepared.pop(module, None)  # drop the stale copy before allocating the new one
    try:
        prepared = prepare_operands(ops, key)
    except (TypeError, ValueError) as e:
        raise _unsupported(module, str(e)) from e
    _prepared[module] = prepared
    return prepared


def routing_operands(top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> Pair:
    """transformers' routing (int64 ids, router-dtype weights) as fused_moe's int32 ids and
    FP32 weights. An id outside [0, E) (expert parallelism's sentinel E) is dropped by both."""
    ids = top_k_index.reshape(-1, top_k_index.shape[-1]).to(torch.int32).contiguous()
    weights = top_k_weights.reshape(ids.shape).to(torch.float32).contiguous()
    return ids, weights


@functools.cache
def _cuda_device_reason(index: int) -> str | None:
    try:
        arch_for_compute_capability(*torch.cuda.get_device_capability(index))
    except ValueError as e:
        return f"no moegemm kernels for this GPU: {e}"
    return None


def _device_reason(device: torch.device) -> str | None:
    if device.type != "cuda":
        return f"the tensors are on {device}: moegemm runs on CUDA GPUs"
    return _cuda_device_reason(
        torch.cuda.current_device() if device.index is None else device.index
    )


def _call_reason(module: torch.nn.Module, ops: ExpertsOperands, x: torch.Tensor) -> str | None:
    """Why fused_moe cannot take this call (None if it can), checked before anything is
    prepared: dtypes, autograd, then the device."""
    if x.dtype != torch.bfloat16:
        return f"hidden_states are {x.dtype}: fused_moe takes bfloat16"
    if not ops.is_mxfp4 and (ops.w13.dtype, ops.w2.dtype) != (torch.bfloat16, torch.bfloat16):
        return f"the experts' weights are {ops.w13.dtype}: fused_moe takes bfloat16 or MXFP4"
    if torch.is_grad_enabled() and (x.requires_grad or any(t.requires_grad for t in _tensors(ops))):
        # fused_moe has no backward: running it would silently cut the gradients.
        return (
            "autograd is on and fused_moe has no backward (run under torch.no_grad() or "
            "torch.inference_mode(), or call model.requires_grad_(False))"
        )
    return _device_reason(x.device)


def _fallback_forward(module: torch.nn.Module, mode: str, *args: torch.Tensor) -> torch.Tensor:
    original = getattr(type(module).forward, "__wrapped__", None)  # the class's eager forward
    if mode == "eager" and original is not None:
        return original(module, *args)
    return hf_moe.ALL_EXPERTS_FUNCTIONS["grouped_mm"](module, *args)


def _fallback_mode() -> str | None:
    if _fallback is not None:
        return _fallback or None
    return _parse_fallback(os.environ.get(FALLBACK_ENV, ""), FALLBACK_ENV) or None


def moegemm_experts_forward(
    self: torch.nn.Module,
    hidden_states: torch.Tensor,
    top_k_index: torch.Tensor,
    top_k_weights: torch.Tensor,
) -> torch.Tensor:
    """The experts' output [T, H] through moegemm.fused_moe (the ExpertsInterface signature)."""
    try:
        ops = experts_operands(self)
        reason = _call_reason(self, ops, hidden_states)
        if reason is not None:
            raise _unsupported(self, reason)
        prepared = prepared_experts(self, ops)
        x = hidden_states.reshape(-1, hidden_states.shape[-1]).contiguous()
        ids, weights = routing_operands(top_k_index, top_k_weights)
        try:
            # fused_moe checks everything before it launches: a refusal has changed nothing.
            out = moegemm.fused_moe(
                x, prepared.w13, prepared.w2, weights, ids, w2_bias=prepared.w2_bias
            )
        except (TypeError, ValueError, KernelNotCachedError) as e:
            raise _unsupported(self, str(e)) from e
    except UnsupportedExpertsError as e:
        mode = _fallback_mode()
        if mode is None:
            raise
        if released(self):  # the fallback would compute from the placeholders
            raise _released_error(self, f'the "{mode}" fallback cannot run ({e})') from e
        if self not in _warned:
            _warned.add(self)
            warnings.warn(f"{e}; running {mode} instead", RuntimeWarning, stacklevel=2)
        return _fallback_forward(self, mode, hidden_states, top_k_index, top_k_weights)
    return out.view(hidden_states.shape)


def attach_mxfp4(
    module: torch.nn.Module,
    gate_up_blocks: torch.Tensor,
    gate_up_scales: torch.Tensor,
    down_blocks: torch.Tensor,
    down_scales: torch.Tensor,
) -> None:
    """Give a GPT-OSS experts module its checkpoint's MXFP4 tensors (uint8: gate_up blocks
    [E, 2I, H/32, 16] with interleaved gate/up rows, scales [E, 2I, H/32]; down blocks
    [E, H, I/32, 16], scales [E, H, I/32]) as non-persistent buffers, so that `.to()` moves them;
    "moegemm" then runs the FP8 x FP4 layer on them. The BF16 parameters may be dropped
    (e.g. left on the meta device) since they are no longer read."""
    tensors = (gate_up_blocks, gate_up_scales, down_blocks, down_scales)
    for name, t in zip(MXFP4_ATTRS, tensors):
        module.register_buffer(name, t, persistent=False)


def _checkpoint_files(checkpoint: str | os.PathLike) -> dict[str, str]:
    """{tensor name: safetensors file} of a checkpoint: one file, or a folder with an index
    (model.safetensors.index.json) or its *.safetensors files."""
    path = Path(checkpoint)
    if path.is_file():
        files = [path]
    elif (path / "model.safetensors.index.json").is_file():
        weight_map = json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
        return {name: str(path / file) for name, file in weight_map.items()}
    elif path.is_dir():
        files = sorted(path.glob("*.safetensors"))
    else:
        raise ValueError(f"attach_mxfp4_checkpoint: {checkpoint} is neither a file nor a folder")
    if not files:
        raise ValueError(f"attach_mxfp4_checkpoint: no *.safetensors in {checkpoint}")
    names = {}
    for file in files:
        with safe_open(str(file), framework="pt") as f:
            names.update(dict.fromkeys(f.keys(), str(file)))
    return names


def _expected_mxfp4_shapes(module: torch.nn.Module) -> list[tuple[int, ...]]:
    """The checkpoint shapes of MXFP4_ATTRS for the module's BF16 parameters."""
    w13, w2 = _bf16_weights(module)
    (e, n13, k13), (_, n2, k2) = w13.shape, w2.shape
    return [(e, n13, k13 // 32, 16), (e, n13, k13 // 32), (e, n2, k2 // 32, 16), (e, n2, k2 // 32)]


def attach_mxfp4_checkpoint(
    model: torch.nn.Module, checkpoint: str | os.PathLike, device: torch.device | str | None = None
) -> list[str]:
    """attach_mxfp4 from an MXFP4 checkpoint (GPT-OSS: `<module>.gate_up_proj_blocks`, `_scales`,
    `down_proj_blocks`, `_scales` in safetensors): every experts module under `model` whose four
    tensors the checkpoint holds gets them, on `device` (default: the module's gate_up_proj's;
    a meta parameter needs `device`). For a model transformers loaded with its experts
    dequantized to BF16 (no MXFP4 kernels for it on Hopper): "moegemm" then runs the FP8 x FP4
    layer on the checkpoint's own codes, and `release_source_weights` can drop the BF16 copy.
    Returns the modules' names. ValueError, before any module changes, for a checkpoint without
    such tensors, a module with only some of them, or shapes that are not the module's."""
    where = _checkpoint_files(checkpoint)
    plan: list[tuple[str, torch.nn.Module, list[str]]] = []
    for name, module in model.named_modules():
        if not _is_experts(module):
            continue
        keys = [f"{name}.{attr}" if name else attr for attr in MXFP4_ATTRS]
        held = [k in where for k in keys]
        if not any(held):
            continue
        if not all(held):
            missing = ", ".join(k for k, h in zip(keys, held) if not h)
            raise ValueError(f"attach_mxfp4_checkpoint: {checkpoint} lacks {missing}")
        plan.append((name, module, keys))
    if not plan:
        raise ValueError(
            f"attach_mxfp4_checkpoint: {checkpoint} holds no MXFP4 experts tensors "
            f"({', '.join(MXFP4_ATTRS)}) of this model's experts modules"
        )
    loaded = []
    with contextlib.ExitStack() as stack:  # each file opened once
        files = {f: stack.enter_context(safe_open(f, framework="pt")) for f in set(where.values())}
        for name, module, keys in plan:
            loaded.append((name, module, _load_mxfp4(module, keys, files, where, device)))
    for _, module, tensors in loaded:
        attach_mxfp4(module, *tensors)
    return [name for name, _, _ in loaded]


def _load_mxfp4(
    module: torch.nn.Module,
    keys: list[str],
    files: dict[str, object],
    where: dict[str, str],
    device: torch.device | str | None,
) -> list[torch.Tensor]:
    """One module's four checkpoint tensors, checked against its shapes, on its device."""
    target = device if device is not None else module.gate_up_proj.device
    if torch.device(target).type == "meta":  # refused before anything is read
        raise ValueError(
            f"attach_mxfp4_checkpoint: {describe(module)} is on the meta device: pass device="
        )
    tensors = []
    for key, shape in zip(keys, _expected_mxfp4_shapes(module)):
        t = files[where[key]].get_tensor(key)
        if t.dtype != torch.uint8 or tuple(t.shape) != shape:
            raise ValueError(
                f"attach_mxfp4_checkpoint: {key} is {t.dtype} {tuple(t.shape)}; "
                f"{describe(module)} takes uint8 {shape}"
            )
        tensors.append(t)
    return [t.to(target) for t in tensors]


def _source_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: t for n in SOURCE_ATTRS if isinstance(t := getattr(module, n, None), torch.Tensor)}


def _storages(tensors) -> dict[tuple, int]:
    """{(device, storage address): bytes} of the tensors that hold memory."""
    out = {}
    for t in tensors:
        if t is not None and t.device.type != "meta":
            storage = t.untyped_storage()
            out[(t.device, storage.data_ptr())] = storage.nbytes()
    return out


def _prepared_tensors(prepared: PreparedExperts) -> list[torch.Tensor | None]:
    w2 = prepared.w2
    if isinstance(w2, moegemm.Mxfp4Weights):
        w2 = (w2.b, w2.sfb)
    w2s = list(w2) if isinstance(w2, tuple) else [w2]
    w13 = prepared.w13
    return [w13.weight, w13.bias, w13.scales, *w2s, prepared.w2_bias]


def prepared_nbytes(module: torch.nn.Module) -> int:
    """Bytes the module's prepared copy holds beyond the module's own tensors (0 before its
    first call); the module doc gives them per expert."""
    prepared = _prepared.get(module)
    if prepared is None:
        return 0
    own = _storages(list(module.parameters(recurse=False)) + list(module.buffers(recurse=False)))
    mine = _storages(_prepared_tensors(prepared))
    return sum(n for key, n in mine.items() if key not in own)


def _is_experts(module: torch.nn.Module) -> bool:
    """A class decorated with `use_experts_implementation` (it sets these flags)."""
    return hasattr(module, "is_concatenated") and hasattr(type(module).forward, "__wrapped__")


def release_source_weights(model: torch.nn.Module, prepare: bool = False) -> int:
    """Replace the source tensors of every prepared experts module under `model` (itself
    included) by meta placeholders of the same shape and dtype, so that the experts are held once,
    as the prepared copy; returns the bytes the modules no longer hold (a source tensor that the
    prepared copy aliases, such as a [E, H, I] w2, stays alive through it).

    prepare=True first prepares the experts modules that have not run yet (on their tensors'
    device); otherwise those are left as they are. A stale copy is rebuilt first. Afterwards a
    released module runs only from its prepared copy (the GPU path): it is never rebuilt, a
    fallback refuses, and `.to()` to another device or dtype fails on the placeholders (move the
    model before releasing). Refused (RuntimeError, nothing changed) where a source tensor is
    still needed: a module in training mode or with a tensor that requires grad, or a fallback
    chosen (register(fallback=...) or MOEGEMM_TRANSFORMERS_FALLBACK), which runs on the source.
    """
    mode = _fallback_mode()
    if mode is not None:
        raise RuntimeError(
            f'release_source_weights: the "{mode}" fallback is on and would run on the source '
            f"weights (register(fallback=False) and unset {FALLBACK_ENV} first)"
        )
    experts = [m for m in model.modules() if _is_experts(m) and not released(m)]
    targets = experts if prepare else [m for m in experts if m in _prepared]
    for m in targets:
        if m.training:
            raise RuntimeError(
                f"release_source_weights: {describe(m)} is in training mode, which updates the "
                f"source weights (call model.eval() first)"
            )
        grads = [n for n, t in _source_tensors(m).items() if t.requires_grad]
        if grads:
            raise RuntimeError(
                f"release_source_weights: {describe(m)}'s {', '.join(grads)} require grad "
                f"(call model.requires_grad_(False) first)"
            )
    if not targets and not any(released(m) for m in model.modules()):
        raise RuntimeError(
            "release_source_weights: no prepared experts module (run a forward with "
            'experts_implementation="moegemm" first, or pass prepare=True)'
        )
    prepared = [prepared_experts(m) for m in targets]  # builds or refreshes before any change
    freed = 0
    for m, p in zip(targets, prepared):
        sources = _source_tensors(m)
        kept = _storages(_prepared_tensors(p))
        freed += sum(n for key, n in _storages(sources.values()).items() if key not in kept)
        for name, t in sources.items():
            placeholder = torch.empty(t.shape, dtype=t.dtype, device="meta")
            if name in m._parameters:
                m._parameters[name] = torch.nn.Parameter(placeholder, requires_grad=False)
            elif name in m._buffers:  # attach_mxfp4's, kept in its slot: still non-persistent
                m._buffers[name] = placeholder
            else:  # a plain tensor attribute
                setattr(m, name, placeholder)
        setattr(m, RELEASED_ATTR, tuple(sources))
    return freed


def _parse_fallback(value: bool | str | None, what: str) -> str:
    """'' for no fallback, else one of FALLBACKS."""
    if value is None or value is False or value in ("", "0", "false", "none"):
        return ""
    if value is True or value in ("1", "true"):
        return "grouped_mm"
    if value in FALLBACKS:
        return value
    raise ValueError(f"{what} must be a bool or one of {FALLBACKS}, got {value!r}")


def register(fallback: bool | str | None = None) -> None:
    """Add "moegemm" to transformers' ExpertsInterface (every model's, at once). fallback:
    None keeps the current choice (from MOEGEMM_TRANSFORMERS_FALLBACK unless set here before);
    False raises UnsupportedExpertsError on what moegemm cannot run; True or "grouped_mm" runs
    transformers' grouped_mm there instead, "eager" the class's own forward."""
    global _fallback
    if fallback is not None:
        _fallback = _parse_fallback(fallback, "fallback")
    hf_moe.ExpertsInterface.register(NAME, moegemm_experts_forward)


register()
