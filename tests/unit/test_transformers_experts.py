"""moegemm.integrations.transformers on the CPU: the registration, each experts layout mapped onto
fused_moe's operands and checked through the layer's FP32 reference against the module's own
eager and grouped_mm forwards (fresh random weights, tiny configs), the rebuild of the prepared
weights when a parameter changes, every refusal and the opt-in fallbacks."""

from __future__ import annotations

import copy
import gc
import subprocess
import sys
import weakref

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers.integrations import moe as hf_moe
from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3Experts
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts
from transformers.models.mixtral.modeling_mixtral import MixtralExperts
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeExperts
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeExperts

from moegemm.integrations import transformers as mt
from moegemm.moe.weights import source_order
from moegemm.quant import dequantize_mxfp4, quantize_mxfp4
from moegemm.testing import calc_diff
from moegemm.testing.moe_reference import fused_moe_reference

TOL = 1e-5
E, H, I, K, T = 8, 64, 32, 2, 24


def qwen3_config(**kw) -> transformers.Qwen3MoeConfig:
    kw = {"moe_intermediate_size": I, **kw}
    return transformers.Qwen3MoeConfig(hidden_size=H, num_experts=E, num_experts_per_tok=K, **kw)


def mixtral_config(**kw) -> transformers.MixtralConfig:
    return transformers.MixtralConfig(
        hidden_size=H, intermediate_size=I, num_local_experts=E, num_experts_per_tok=K, **kw
    )


def qwen2_config(**kw) -> transformers.Qwen2MoeConfig:
    return transformers.Qwen2MoeConfig(
        hidden_size=H, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=K, **kw
    )


def deepseek_config(**kw) -> transformers.DeepseekV3Config:
    return transformers.DeepseekV3Config(
        hidden_size=H, moe_intermediate_size=I, n_routed_experts=E, num_experts_per_tok=K,
        n_group=1, topk_group=1, **kw,
    )  # fmt: skip


def gpt_oss_config(**kw) -> transformers.GptOssConfig:
    return transformers.GptOssConfig(
        hidden_size=H, intermediate_size=I, num_local_experts=E, num_experts_per_tok=K, **kw
    )


CASES = {
    "qwen3_moe": (Qwen3MoeExperts, qwen3_config),
    "qwen2_moe": (Qwen2MoeExperts, qwen2_config),
    "mixtral": (MixtralExperts, mixtral_config),
    "deepseek_v3": (DeepseekV3Experts, deepseek_config),
    "gpt_oss": (GptOssExperts, gpt_oss_config),
}


def build(name: str, seed: int, dtype: torch.dtype = torch.float32, **kw) -> torch.nn.Module:
    """The experts module of a tiny config with fresh random weights; GPT-OSS's are large
    enough that its clamps (limit 7) bite."""
    cls, config = CASES[name]
    module = cls(config(**kw))
    g = torch.Generator().manual_seed(seed)
    scale = 4.0 if name == "gpt_oss" else 1.0
    with torch.no_grad():
        for pname, p in module.named_parameters():
            fan_in = H if pname.startswith("gate_up") else I
            std = 0.1 if pname.endswith("bias") else scale / fan_in**0.5
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return module.to(dtype).requires_grad_(False)


def routing(seed: int, t: int = T) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x [t, H], distinct top-k ids per token (int64, as the routers give) and their weights."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, H, generator=g)
    ids = torch.stack([torch.randperm(E, generator=g)[:K] for _ in range(t)])
    weights = torch.rand(t, K, generator=g)
    return x, ids, weights / weights.sum(-1, keepdim=True)


def eager(module: torch.nn.Module, *args: torch.Tensor) -> torch.Tensor:
    return type(module).forward.__wrapped__(module, *args)  # the class's own loop


def reference(ops: mt.ExpertsOperands, x, ids, weights) -> torch.Tensor:
    """fused_moe's FP32 math on source-layout operands."""
    w13, w2 = ops.w13, ops.w2
    if ops.is_mxfp4:
        w13, w2 = dequantize_mxfp4(*w13), dequantize_mxfp4(*w2)
    b13 = None if ops.w13_bias is None else ops.w13_bias.float()
    b2 = None if ops.w2_bias is None else ops.w2_bias.float()
    ids32, w32 = mt.routing_operands(ids, weights)
    return fused_moe_reference(x, w13.float(), w2.float(), w32, ids32, ops.activation, b13, b2)


def prepared_reference(prepared: mt.PreparedExperts, x, ids, weights) -> torch.Tensor:
    """fused_moe's FP32 math on the prepared BF16 operands, back in source order."""
    act = prepared.w13.activation
    w13 = source_order(prepared.w13.weight, act).float()
    b13 = None if prepared.w13.bias is None else source_order(prepared.w13.bias, act)
    ids32, w32 = mt.routing_operands(ids, weights)
    return fused_moe_reference(x, w13, prepared.w2.float(), w32, ids32, act, b13, prepared.w2_bias)


# ---- registration ----------------------------------------------------------------------------


def test_registered_in_the_experts_interface() -> None:
    assert hf_moe.ALL_EXPERTS_FUNCTIONS["moegemm"] is mt.moegemm_experts_forward
    assert "moegemm" in hf_moe.ExpertsInterface().valid_keys()
    mt.register()  # again: harmless
    assert hf_moe.ALL_EXPERTS_FUNCTIONS["moegemm"] is mt.moegemm_experts_forward


def test_importing_moegemm_does_not_import_transformers() -> None:
    code = (
        "import sys, moegemm, moegemm.integrations\n"
        "assert 'transformers' not in sys.modules, 'transformers imported'\n"
        "import moegemm.integrations.transformers\n"
        "from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS\n"
        "assert 'moegemm' in ALL_EXPERTS_FUNCTIONS\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_a_model_selects_it_by_name() -> None:
    config = qwen3_config(
        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
        intermediate_size=64, head_dim=16,
    )  # fmt: skip
    model = transformers.Qwen3MoeForCausalLM(config)
    model.set_experts_implementation("moegemm")
    assert model.config._experts_implementation == "moegemm"
    with torch.no_grad(), pytest.raises(mt.UnsupportedExpertsError, match="Qwen3MoeExperts"):
        model(torch.tensor([[1, 2, 3]]))


# ---- layouts ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(CASES))
def test_source_operands_match_the_module(name: str) -> None:
    """FP32 weights: the mapped operands through fused_moe's math equal the module's forwards."""
    seed = 100 * sorted(CASES).index(name)  # fresh weights and tokens per class
    module = build(name, seed=seed + 1)
    x, ids, weights = routing(seed=seed + 2)
    ops = mt.experts_operands(module)
    assert ops.activation == ("swiglu_oai" if name == "gpt_oss" else "silu")
    ref = reference(ops, x, ids, weights)
    own = eager(module, x, ids, weights)
    assert own.abs().mean() > 0.1  # not a trivially small output
    assert calc_diff(ref, own) < TOL
    assert calc_diff(ref, hf_moe.grouped_mm_experts_forward(module, x, ids, weights)) < TOL


@pytest.mark.parametrize("name", sorted(CASES))
def test_prepared_operands_match_the_module(name: str) -> None:
    """BF16 module: what fused_moe would get (prepare_moe_weights' order, contiguous w2, FP32
    w2 bias) through its math equals the module's eager forward on the same weights in FP32."""
    seed = 100 * sorted(CASES).index(name)
    module = build(name, seed=seed + 3, dtype=torch.bfloat16)
    x, ids, weights = routing(seed=seed + 4)
    prepared = mt.prepared_experts(module)
    assert prepared.w13.weight.dtype == torch.bfloat16 and prepared.w2.is_contiguous()
    assert prepared.w2.shape == (E, H, I)
    assert (prepared.w2_bias is not None) == (name == "gpt_oss")
    ref = prepared_reference(prepared, x, ids, weights)
    own = eager(copy.deepcopy(module).float(), x, ids, weights)
    diff = calc_diff(ref, own)
    assert diff < TOL, diff


def test_gpt_oss_mxfp4_operands() -> None:
    """A GPT-OSS module given its checkpoint's MXFP4 tensors maps them as (blocks, scales) pairs
    (interleaved w13 [E, 2I, H/2], w2 [E, H, I/2]) whose dequantized math equals the module on
    the dequantized weights; their preparation (plain torch) succeeds."""
    module = build("gpt_oss", seed=5)
    w13 = module.gate_up_proj.transpose(1, 2).contiguous()  # [E, 2I, H], interleaved rows
    w2 = module.down_proj.transpose(1, 2).contiguous()  # [E, H, I]
    (b13, s13), (b2, s2) = quantize_mxfp4(w13), quantize_mxfp4(w2)
    with torch.no_grad():  # the module's BF16 path now computes on the dequantized weights
        module.gate_up_proj.copy_(dequantize_mxfp4(b13, s13).transpose(1, 2))
        module.down_proj.copy_(dequantize_mxfp4(b2, s2).transpose(1, 2))
    mt.attach_mxfp4(module, b13.view(E, 2 * I, H // 32, 16), s13, b2.view(E, H, I // 32, 16), s2)
    ops = mt.experts_operands(module)
    assert ops.is_mxfp4 and ops.activation == "swiglu_oai"
    assert torch.equal(ops.w13[0], b13) and torch.equal(ops.w2[0], b2)
    x, ids, weights = routing(seed=6)
    diff = calc_diff(reference(ops, x, ids, weights), eager(module, x, ids, weights))
    assert diff < TOL, diff
    prepared = mt.prepared_experts(module)
    assert prepared.w13.is_mxfp4 and prepared.w13.activation == "swiglu_oai"
    assert prepared.w2.prepared and prepared.w2_bias.dtype == torch.float32


def test_sentinel_ids_are_dropped() -> None:
    """Expert parallelism's sentinel id E: fused_moe drops a slot whose id is outside [0, E),
    the same output as that slot routed anywhere with weight 0. (transformers' grouped_mm gives
    such slots no defined result across versions: 5.25 reads past the experts, so it is no
    reference here.)"""
    module = build("qwen3_moe", seed=7)
    x, ids, weights = routing(seed=8)
    ids[::3, 1] = E
    ref = reference(mt.experts_operands(module), x, ids, weights)
    dropped = ids == E
    zeroed = reference(mt.experts_operands(module), x, ids.masked_fill(dropped, 0),
                       weights.masked_fill(dropped, 0.0))  # fmt: skip
    assert dropped.any() and calc_diff(ref, zeroed) < TOL
    assert calc_diff(ref, reference(mt.experts_operands(module), x, ids, weights * 2)) > TOL


def test_routing_operands() -> None:
    ids = torch.tensor([[3, 1], [0, 8]])
    weights = torch.tensor([[0.25, 0.75], [1.0, 0.0]], dtype=torch.bfloat16)
    ids32, w32 = mt.routing_operands(ids, weights)
    assert ids32.dtype == torch.int32 and w32.dtype == torch.float32
    assert ids32.is_contiguous() and w32.is_contiguous()
    assert ids32.tolist() == ids.tolist() and w32.tolist() == weights.float().tolist()


# ---- preparation cache -----------------------------------------------------------------------


def test_prepared_weights_rebuilt_when_a_parameter_changes() -> None:
    module = build("mixtral", seed=9, dtype=torch.bfloat16)
    first = mt.prepared_experts(module)
    assert mt.prepared_experts(module) is first  # built once

    with torch.no_grad():  # in place (load_state_dict does this)
        module.gate_up_proj.mul_(2)
    second = mt.prepared_experts(module)
    assert second is not first
    assert torch.equal(second.w13.weight, first.w13.weight * 2)

    with torch.no_grad():
        module.down_proj[0].zero_()  # in place through a view
    third = mt.prepared_experts(module)
    assert third is not second and torch.count_nonzero(third.w2[0]) == 0

    module.down_proj = torch.nn.Parameter(module.down_proj.detach() + 1, requires_grad=False)
    fourth = mt.prepared_experts(module)
    assert fourth is not third and torch.equal(fourth.w2, module.down_proj)
    assert mt.prepared_experts(module) is fourth


def test_copies_do_not_share_prepared_weights() -> None:
    module = build("qwen3_moe", seed=10, dtype=torch.bfloat16)
    prepared = mt.prepared_experts(module)
    clone = copy.deepcopy(module)
    assert mt.prepared_experts(clone) is not prepared


# ---- refusals and fallbacks ------------------------------------------------------------------


def call(module: torch.nn.Module, x: torch.Tensor, seed: int = 11) -> torch.Tensor:
    _, ids, weights = routing(seed, t=x.shape[0])
    with torch.no_grad():
        return mt.moegemm_experts_forward(module, x, ids, weights)


@pytest.fixture
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(mt.FALLBACK_ENV, raising=False)
    monkeypatch.setattr(mt, "_fallback", None)


def test_cpu_tensors_refused(no_fallback) -> None:
    module = build("qwen3_moe", seed=12, dtype=torch.bfloat16)
    with pytest.raises(mt.UnsupportedExpertsError, match=r"Qwen3MoeExperts.*on cpu.*CUDA"):
        call(module, torch.randn(4, H).bfloat16())


def test_dtypes_refused(no_fallback) -> None:
    module = build("mixtral", seed=13, dtype=torch.bfloat16)
    with pytest.raises(mt.UnsupportedExpertsError, match=r"MixtralExperts.*hidden_states.*float32"):
        call(module, torch.randn(4, H))
    with pytest.raises(mt.UnsupportedExpertsError, match=r"weights are torch.float32"):
        call(build("mixtral", seed=13), torch.randn(4, H).bfloat16())


def test_autograd_refused(no_fallback) -> None:
    module = build("qwen3_moe", seed=14, dtype=torch.bfloat16).requires_grad_(True)
    _, ids, weights = routing(14, t=4)
    with pytest.raises(mt.UnsupportedExpertsError, match="no backward"):
        mt.moegemm_experts_forward(module, torch.randn(4, H).bfloat16(), ids, weights)


def test_activations_refused(no_fallback) -> None:
    with pytest.raises(mt.UnsupportedExpertsError, match=r"GELU.*only SiLU"):
        mt.experts_operands(build("qwen3_moe", seed=15, hidden_act="gelu"))

    class ClampedExperts(Qwen3MoeExperts):  # an override of the default gate
        def _apply_gate(self, gate_up: torch.Tensor) -> torch.Tensor:
            gate, up = gate_up.chunk(2, dim=-1)
            return self.act_fn(gate.clamp(max=5)) * up

    with pytest.raises(mt.UnsupportedExpertsError, match="ClampedExperts._apply_gate"):
        mt.experts_operands(ClampedExperts(qwen3_config()))

    module = build("gpt_oss", seed=16)
    module.limit = 5.0
    with pytest.raises(mt.UnsupportedExpertsError, match=r"GptOssExperts.*limit 5.0"):
        mt.experts_operands(module)

    module = build("qwen3_moe", seed=17)
    module.has_gate = False
    with pytest.raises(mt.UnsupportedExpertsError, match="without a gate"):
        mt.experts_operands(module)


def test_incomplete_mxfp4_refused(no_fallback) -> None:
    module = build("gpt_oss", seed=18)
    module.gate_up_proj_blocks = torch.zeros(E, 2 * I, H // 32, 16, dtype=torch.uint8)
    with pytest.raises(mt.UnsupportedExpertsError, match="without gate_up_proj_scales"):
        mt.experts_operands(module)


def test_sizes_the_layer_refuses(no_fallback) -> None:
    module = Qwen3MoeExperts(qwen3_config(moe_intermediate_size=4))
    module.to(torch.bfloat16)
    with pytest.raises(mt.UnsupportedExpertsError, match=r"Qwen3MoeExperts.*multiple of 16"):
        mt.prepared_experts(module)


def test_gpu_without_kernels_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # A device's answer is cached (its capability cannot change in a process): two GPUs here.
    mt._cuda_device_reason.cache_clear()
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    reason = mt._device_reason(torch.device("cuda", 0))
    assert reason is not None and "no moegemm kernels" in reason and "sm_80" in reason
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    assert mt._device_reason(torch.device("cuda", 0)) == reason  # cached
    assert mt._device_reason(torch.device("cuda", 1)) is None
    mt._cuda_device_reason.cache_clear()


@pytest.mark.parametrize("mode", ["grouped_mm", "eager", True])
def test_fallback_runs_the_module_implementation(no_fallback, mode) -> None:
    module = build("gpt_oss", seed=19, dtype=torch.bfloat16)
    x, ids, weights = routing(seed=20)
    x = x.bfloat16()
    mt.register(fallback=mode)
    with torch.no_grad(), pytest.warns(RuntimeWarning, match=r"GptOssExperts.*on cpu"):
        out = mt.moegemm_experts_forward(module, x, ids, weights)
    with torch.no_grad():
        if mode == "eager":
            expected = eager(module, x, ids, weights)
        else:
            expected = hf_moe.grouped_mm_experts_forward(module, x, ids, weights)
    assert torch.equal(out, expected)


def test_fallback_from_the_environment(no_fallback, monkeypatch: pytest.MonkeyPatch) -> None:
    module = build("deepseek_v3", seed=21, dtype=torch.bfloat16)
    monkeypatch.setenv(mt.FALLBACK_ENV, "grouped_mm")
    with pytest.warns(RuntimeWarning, match="DeepseekV3Experts"):
        call(module, torch.randn(4, H).bfloat16())
    mt.register(fallback=False)  # an explicit choice wins over the environment
    with pytest.raises(mt.UnsupportedExpertsError):
        call(module, torch.randn(4, H).bfloat16())
    with pytest.raises(ValueError, match="fallback"):
        mt.register(fallback="batched")


def test_model_with_fallback_equals_grouped_mm(no_fallback) -> None:
    config = mixtral_config(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
        head_dim=16,
    )  # fmt: skip
    torch.manual_seed(22)
    model = transformers.MixtralForCausalLM(config).bfloat16().eval()
    tokens = torch.tensor([[1, 5, 9, 2, 7]])
    with torch.no_grad():
        model.set_experts_implementation("grouped_mm")
        expected = model(tokens).logits
        model.set_experts_implementation("moegemm")
        mt.register(fallback="grouped_mm")
        with pytest.warns(RuntimeWarning, match="MixtralExperts"):
            got = model(tokens).logits
    assert torch.equal(got, expected)


# ---- prepared memory and released sources ---------------------------------------------------


def mxfp4_module(seed: int) -> torch.nn.Module:
    """A BF16 GPT-OSS module given MXFP4 tensors of its own weights (attach_mxfp4)."""
    module = build("gpt_oss", seed=seed, dtype=torch.bfloat16)
    (b13, s13) = quantize_mxfp4(module.gate_up_proj.transpose(1, 2).float())
    (b2, s2) = quantize_mxfp4(module.down_proj.transpose(1, 2).float())
    mt.attach_mxfp4(module, b13.view(E, 2 * I, H // 32, 16), s13, b2.view(E, H, I // 32, 16), s2)
    return module


def test_prepared_bytes_per_expert_as_documented() -> None:
    """The module doc's bytes per expert, on the tensors the preparation allocates."""
    hp = ip = 128  # H = 64 and I = 32 rounded up to 128
    bias = 8 * I + 4 * H
    expected = {
        "qwen3_moe": 4 * I * H,  # w13 reordered; w2 is the parameter itself
        "gpt_oss": 6 * I * H + bias,  # and w2's contiguous [E, H, I] copy
        "mxfp4": 9 * I * hp // 8 + 9 * H * ip // 16 + bias,
    }
    for name, per_expert in expected.items():
        module = mxfp4_module(23) if name == "mxfp4" else build(name, 23, torch.bfloat16)
        assert mt.prepared_nbytes(module) == 0  # nothing before the first call
        mt.prepared_experts(module)
        assert mt.prepared_nbytes(module) == E * per_expert, name


def snapshot(prepared: mt.PreparedExperts) -> list[torch.Tensor]:
    return [t.clone() for t in mt._prepared_tensors(prepared) if t is not None]


@pytest.mark.parametrize("name", ["qwen3_moe", "gpt_oss", "mxfp4"])
def test_release_keeps_the_prepared_copy_and_drops_the_source(no_fallback, name) -> None:
    module = mxfp4_module(24) if name == "mxfp4" else build(name, 24, torch.bfloat16)
    module.eval()
    prepared = mt.prepared_experts(module)
    before = snapshot(prepared)
    sources = mt._source_tensors(module)
    shapes = {n: (t.shape, t.dtype) for n, t in sources.items()}
    owned = sum(mt._storages(sources.values()).values())
    aliased = module.down_proj.untyped_storage().nbytes() if name == "qwen3_moe" else 0
    gone = [weakref.ref(t) for n, t in sources.items() if not (aliased and n == "down_proj")]
    del sources

    freed = mt.release_source_weights(module)
    assert freed == owned - aliased  # a [E, H, I] w2 lives on as the prepared w2
    gc.collect()
    assert all(ref() is None for ref in gone)  # the source memory is gone
    for n, (shape, dtype) in shapes.items():
        t = getattr(module, n)
        assert t.device.type == "meta" and t.shape == shape and t.dtype == dtype, n
    assert mt.released(module)
    assert mt.prepared_experts(module) is prepared  # never rebuilt from the placeholders
    after = snapshot(prepared)
    assert all(torch.equal(a, b) for a, b in zip(before, after))
    assert mt.release_source_weights(module) == 0  # again: nothing left to release


def test_a_released_module_refuses_on_cpu_and_in_the_fallback(no_fallback) -> None:
    module = build("mixtral", seed=25, dtype=torch.bfloat16).eval()
    mt.prepared_experts(module)
    mt.release_source_weights(module)
    x = torch.randn(4, H).bfloat16()
    with pytest.raises(mt.UnsupportedExpertsError, match=r"MixtralExperts.*on cpu"):
        call(module, x)
    mt.register(fallback="grouped_mm")  # chosen after the release: the fallback refuses
    with pytest.raises(mt.UnsupportedExpertsError, match=r"released.*grouped_mm.*fallback"):
        call(module, x)
    clone = copy.deepcopy(module)  # placeholders but no prepared copy
    mt.register(fallback=False)
    with pytest.raises(mt.UnsupportedExpertsError, match="no prepared copy"):
        mt.prepared_experts(clone)


def test_release_refusals(no_fallback, monkeypatch: pytest.MonkeyPatch) -> None:
    module = build("qwen3_moe", seed=26, dtype=torch.bfloat16)
    mt.prepared_experts(module)
    with pytest.raises(RuntimeError, match="training mode"):
        mt.release_source_weights(module.train())
    module.eval().requires_grad_(True)
    with pytest.raises(RuntimeError, match="gate_up_proj, down_proj require grad"):
        mt.release_source_weights(module)
    module.requires_grad_(False)
    monkeypatch.setenv(mt.FALLBACK_ENV, "eager")
    with pytest.raises(RuntimeError, match='"eager" fallback is on'):
        mt.release_source_weights(module)
    monkeypatch.delenv(mt.FALLBACK_ENV)
    assert not mt.released(module) and module.gate_up_proj.device.type == "cpu"  # unchanged
    with pytest.raises(RuntimeError, match="no prepared experts module"):
        mt.release_source_weights(build("qwen3_moe", seed=27, dtype=torch.bfloat16).eval())


def test_release_a_model(no_fallback) -> None:
    """Over a model: prepare=True prepares every experts module first; the rest keeps its
    tensors."""
    config = qwen3_config(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=64,
        intermediate_size=64, head_dim=16,
    )  # fmt: skip
    model = transformers.Qwen3MoeForCausalLM(config).bfloat16().eval().requires_grad_(False)
    experts = [m for m in model.modules() if isinstance(m, Qwen3MoeExperts)]
    freed = mt.release_source_weights(model, prepare=True)
    assert freed == len(experts) * E * 2 * I * H * 2  # w13 of each; w2 lives on as prepared
    assert all(mt.released(m) for m in experts)
    assert model.model.embed_tokens.weight.device.type == "cpu"


# ---- MXFP4 tensors from a checkpoint -----------------------------------------------------------


def gpt_oss_model() -> torch.nn.Module:
    torch.manual_seed(41)
    config = gpt_oss_config(
        num_hidden_layers=2, vocab_size=64, num_attention_heads=2, num_key_value_heads=1,
        head_dim=16, layer_types=["full_attention"] * 2,
    )  # fmt: skip
    return transformers.GptOssForCausalLM(config).eval()


def save_mxfp4_checkpoint(model: torch.nn.Module, folder, split: bool, drop: str = "") -> dict:
    """The experts' weights as an MXFP4 checkpoint (GPT-OSS names and shapes) in safetensors:
    one file, or two with an index; `drop` leaves one tensor out."""
    import json

    from safetensors.torch import save_file

    tensors = {}
    for name, module in model.named_modules():
        if isinstance(module, GptOssExperts):
            b13, s13 = quantize_mxfp4(module.gate_up_proj.detach().transpose(1, 2).float())
            b2, s2 = quantize_mxfp4(module.down_proj.detach().transpose(1, 2).float())
            e = b13.shape[0]
            tensors[f"{name}.gate_up_proj_blocks"] = b13.reshape(e, 2 * I, H // 32, 16)
            tensors[f"{name}.gate_up_proj_scales"] = s13
            tensors[f"{name}.down_proj_blocks"] = b2.reshape(e, H, I // 32, 16)
            tensors[f"{name}.down_proj_scales"] = s2
    tensors.pop(drop, None)
    folder.mkdir(exist_ok=True)
    names = sorted(tensors)
    if not split:
        save_file({n: tensors[n].contiguous() for n in names}, str(folder / "model.safetensors"))
        return tensors
    halves = {"a.safetensors": names[::2], "b.safetensors": names[1::2]}
    weight_map = {}
    for file, part in halves.items():
        save_file({n: tensors[n].contiguous() for n in part}, str(folder / file))
        weight_map.update(dict.fromkeys(part, file))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return tensors


@pytest.mark.parametrize("split", [False, True], ids=["one-file", "indexed"])
def test_attach_mxfp4_checkpoint(tmp_path, split: bool) -> None:
    """Every GPT-OSS experts module takes its own tensors from the checkpoint, and its layer
    math on them equals the module on the dequantized weights."""
    model = gpt_oss_model()
    tensors = save_mxfp4_checkpoint(model, tmp_path / "ckpt", split)
    names = mt.attach_mxfp4_checkpoint(model, tmp_path / "ckpt")
    assert names == ["model.layers.0.mlp.experts", "model.layers.1.mlp.experts"]
    for name in names:
        module = model.get_submodule(name)
        for attr in mt.MXFP4_ATTRS:
            assert torch.equal(getattr(module, attr), tensors[f"{name}.{attr}"]), (name, attr)
    module = model.get_submodule(names[1])
    ops = mt.experts_operands(module)
    assert ops.is_mxfp4
    with torch.no_grad():  # the module's own path on the dequantized weights
        module.gate_up_proj.copy_(dequantize_mxfp4(*ops.w13).transpose(1, 2))
        module.down_proj.copy_(dequantize_mxfp4(*ops.w2).transpose(1, 2))
    x, ids, weights = routing(seed=42)
    with torch.no_grad():
        diff = calc_diff(reference(ops, x, ids, weights), eager(module, x, ids, weights))
    assert diff < TOL, diff


def test_attach_mxfp4_checkpoint_refusals(tmp_path) -> None:
    """A missing tensor, a wrong shape, a checkpoint without MXFP4 experts and a path that is
    not there: ValueError naming it, and no module changed."""
    from safetensors.torch import save_file

    model = gpt_oss_model()
    key = "model.layers.1.mlp.experts.down_proj_scales"
    save_mxfp4_checkpoint(model, tmp_path / "missing", split=True, drop=key)
    with pytest.raises(ValueError, match=f"lacks {key}"):
        mt.attach_mxfp4_checkpoint(model, tmp_path / "missing")
    tensors = save_mxfp4_checkpoint(model, tmp_path / "shape", split=False)
    tensors[key] = tensors[key][:, :-1].contiguous()  # one weight row short
    save_file({n: t.contiguous() for n, t in tensors.items()}, str(tmp_path / "shape.safetensors"))
    with pytest.raises(ValueError, match=f"{key} is torch.uint8 .* takes uint8"):
        mt.attach_mxfp4_checkpoint(model, tmp_path / "shape.safetensors")
    save_file({"lm_head.weight": torch.zeros(2, 2)}, str(tmp_path / "plain.safetensors"))
    with pytest.raises(ValueError, match="holds no MXFP4 experts tensors"):
        mt.attach_mxfp4_checkpoint(model, tmp_path / "plain.safetensors")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no \\*.safetensors"):
        mt.attach_mxfp4_checkpoint(model, tmp_path / "empty")
    with pytest.raises(ValueError, match="neither a file nor a folder"):
        mt.attach_mxfp4_checkpoint(model, tmp_path / "nowhere")
    for module in model.modules():
        assert not any(hasattr(module, attr) for attr in mt.MXFP4_ATTRS)


def test_held_reads_what_getattr_reads() -> None:
    """The forward's attribute probe (no raise and catch for a missing name) sees parameters,
    buffers, submodules, plain and class attributes as getattr does, and None for the rest."""

    class Probe(torch.nn.Module):
        @property
        def computed(self) -> str:
            return "property"

    probe = Probe()
    probe.param = torch.nn.Parameter(torch.zeros(1))
    probe.register_buffer("buf", torch.ones(1))
    probe.register_buffer("empty", None)
    probe.child = torch.nn.Linear(1, 1)
    probe.plain = torch.full((1,), 2.0)
    for name in ("param", "buf", "empty", "child", "plain", "computed", "missing", "forward"):
        assert mt._held(probe, name) is getattr(probe, name, None) or (
            name == "forward" and mt._held(probe, name) == getattr(probe, name)
        ), name
