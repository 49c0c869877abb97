"""experts_implementation="moegemm" in tiny transformers models on the H200: every experts
module's output against the FP32 math of its own weights and against "grouped_mm" (inputs where
the experts' output is not negligible), GPT-OSS's MXFP4 experts against the FP8 x FP4 layer's
reference, and `generate` giving the same greedy tokens as "grouped_mm"."""

from __future__ import annotations

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

from transformers.integrations import moe as hf_moe

from moegemm.integrations import transformers as mt
from moegemm.quant import dequantize_mxfp4, quantize_mxfp4
from moegemm.testing import calc_diff
from moegemm.testing.moe_reference import fused_moe_reference_fp8

pytestmark = pytest.mark.gpu
TOL = 1e-5  # against the FP32 math of the same BF16 weights (the fused layer's own bound)
TOL_PEER = 1e-4  # against grouped_mm, which also rounds its [S, 2I] product to BF16
TOL_MXFP4 = 1e-4  # as tests/gpu/test_fused_moe_mxfp4_gpu.py
E, H, I, K = 16, 256, 128, 4
COMMON = {
    "hidden_size": H, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 256, "num_experts_per_tok": K, "head_dim": 64,
}  # fmt: skip


def configs() -> dict[str, transformers.PretrainedConfig]:
    return {
        "qwen3_moe": transformers.Qwen3MoeConfig(
            moe_intermediate_size=I, num_experts=E, intermediate_size=2 * I, **COMMON
        ),
        "mixtral": transformers.MixtralConfig(
            intermediate_size=I, num_local_experts=E, **COMMON
        ),
        "deepseek_v3": transformers.DeepseekV3Config(
            moe_intermediate_size=I, n_routed_experts=E, intermediate_size=2 * I, n_group=1,
            topk_group=1, first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=64,
            qk_rope_head_dim=32, qk_nope_head_dim=32, v_head_dim=64,
            **{k: v for k, v in COMMON.items() if k != "head_dim"},
        ),
        "gpt_oss": transformers.GptOssConfig(
            intermediate_size=I, num_local_experts=E, **COMMON
        ),
    }  # fmt: skip


NAMES = ("qwen3_moe", "mixtral", "deepseek_v3", "gpt_oss")


def tiny_model(name: str, seed: int = 0) -> transformers.PreTrainedModel:
    """A random BF16 model with weights large enough that the experts matter and the greedy
    tokens have clear margins."""
    torch.manual_seed(seed)
    config = configs()[name]
    config.initializer_range = 0.05
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        model.lm_head.weight.mul_(8)
    return model.cuda().eval().requires_grad_(False)


def experts_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m).__name__.endswith("Experts")]


def routing(t: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(t, H, device="cuda", generator=g).bfloat16()
    ids = torch.rand(t, E, device="cuda", generator=g).argsort(-1)[:, :K]
    weights = torch.rand(t, K, device="cuda", generator=g)
    return x, ids, weights / weights.sum(-1, keepdim=True)


def fp32_eager(module: torch.nn.Module, x, ids, weights) -> torch.Tensor:
    """The module's own loop on its weights in FP32."""
    module32 = copy.deepcopy(module).float()
    return type(module).forward.__wrapped__(module32, x.float(), ids, weights.float())


@pytest.mark.parametrize("t", [1, 7, 300])
@pytest.mark.parametrize("name", NAMES)
def test_experts_match_grouped_mm(name: str, t: int) -> None:
    model = tiny_model(name)
    modules = experts_modules(model)
    assert modules, name
    for layer, module in enumerate(modules):
        x, ids, weights = routing(t, seed=layer)
        out = mt.moegemm_experts_forward(module, x, ids, weights)
        peer = hf_moe.grouped_mm_experts_forward(module, x, ids, weights)
        want = fp32_eager(module, x, ids, weights)
        assert want.abs().mean() > 1e-2 * x.float().abs().mean()  # not negligible
        assert out.dtype == torch.bfloat16 and out.shape == x.shape
        assert calc_diff(out.float(), want) < TOL, (layer, calc_diff(out.float(), want))
        assert calc_diff(out, peer) < TOL_PEER, (layer, calc_diff(out, peer))


def test_gpt_oss_mxfp4_experts() -> None:
    model = tiny_model("gpt_oss")
    for layer, module in enumerate(experts_modules(model)):
        w13 = module.gate_up_proj.transpose(1, 2).float()  # [E, 2I, H], interleaved rows
        w2 = module.down_proj.transpose(1, 2).float()
        (b13, s13), (b2, s2) = quantize_mxfp4(w13), quantize_mxfp4(w2)
        mt.attach_mxfp4(
            module, b13.view(E, 2 * I, H // 32, 16), s13, b2.view(E, H, I // 32, 16), s2
        )
        assert mt.prepared_experts(module).w13.is_mxfp4
        x, ids, weights = routing(33, seed=layer)
        out = mt.moegemm_experts_forward(module, x, ids, weights)
        w13f, w2f = dequantize_mxfp4(b13, s13), dequantize_mxfp4(b2, s2)
        ids32, w32 = mt.routing_operands(ids, weights)
        want = fused_moe_reference_fp8(
            x, w13f, w2f, w32, ids32, "swiglu_oai",
            module.gate_up_proj_bias.float(), module.down_proj_bias.float(),
        )  # fmt: skip
        assert calc_diff(out.float(), want) < TOL_MXFP4, (layer, calc_diff(out.float(), want))


def test_gpt_oss_mxfp4_from_a_checkpoint(tmp_path) -> None:
    """attach_mxfp4_checkpoint onto a model on the GPU: the modules take the file's tensors onto
    their device and compute what attach_mxfp4 of the same tensors computes, bit for bit."""
    from safetensors.torch import save_file

    model, twin = tiny_model("gpt_oss"), tiny_model("gpt_oss")
    tensors = {}
    named = [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("Experts")]
    for (name, module), other in zip(named, experts_modules(twin)):
        (b13, s13) = quantize_mxfp4(module.gate_up_proj.transpose(1, 2).float())
        (b2, s2) = quantize_mxfp4(module.down_proj.transpose(1, 2).float())
        held = (b13.view(E, 2 * I, H // 32, 16), s13, b2.view(E, H, I // 32, 16), s2)
        tensors.update({f"{name}.{a}": t.cpu() for a, t in zip(mt.MXFP4_ATTRS, held)})
        mt.attach_mxfp4(other, *held)
    save_file(tensors, str(tmp_path / "experts.safetensors"))
    names = mt.attach_mxfp4_checkpoint(model, tmp_path / "experts.safetensors")
    assert len(names) == len(experts_modules(model)) > 0
    for layer, (module, other) in enumerate(zip(experts_modules(model), experts_modules(twin))):
        assert module.gate_up_proj_blocks.is_cuda
        x, ids, weights = routing(40, seed=layer)
        out = mt.moegemm_experts_forward(module, x, ids, weights)
        assert torch.equal(out, mt.moegemm_experts_forward(other, x, ids, weights)), layer


def test_rebuilt_after_an_in_place_update() -> None:
    model = tiny_model("qwen3_moe")
    module = experts_modules(model)[0]
    x, ids, weights = routing(16, seed=1)
    before = mt.moegemm_experts_forward(module, x, ids, weights)
    with torch.no_grad():
        module.down_proj.mul_(2)
    after = mt.moegemm_experts_forward(module, x, ids, weights)
    assert calc_diff(after.float(), 2 * before.float()) < TOL


# A greedy step whose top two logits (grouped_mm's) lie closer than this is a tie that BF16
# rounding may break either way: tokens are compared up to the first such step.
TIE_MARGIN = 0.25


@pytest.mark.parametrize("name", NAMES)
def test_generate_gives_the_same_tokens(name: str) -> None:
    """Greedy generation gives grouped_mm's tokens up to the first step grouped_mm itself
    decides by less than TIE_MARGIN (tiny random models have near-ties; at least the first step
    must be compared)."""
    model = tiny_model(name)
    g = torch.Generator(device="cuda").manual_seed(0)
    prompt = torch.randint(0, 256, (2, 12), device="cuda", generator=g)
    runs = {}
    for impl in ("grouped_mm", "moegemm"):
        model.set_experts_implementation(impl)
        torch.manual_seed(0)
        with torch.no_grad():
            runs[impl] = model.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0,
                                        output_scores=True, return_dict_in_generate=True)  # fmt: skip
    ref, got = runs["grouped_mm"], runs["moegemm"]
    new_ref, new_got = (r.sequences[:, prompt.shape[1] :] for r in (ref, got))
    for row in range(prompt.shape[0]):
        steps = 0
        for step, scores in enumerate(ref.scores):
            top2 = scores[row].float().topk(2).values
            if top2[0] - top2[1] < TIE_MARGIN:
                break
            steps = step + 1
        assert steps >= 1, f"{name}: grouped_mm's first step is a near-tie; reseed the prompt"
        margins = [float(sc[row].float().topk(2).values.diff().abs()) for sc in ref.scores]
        assert torch.equal(new_got[row, :steps], new_ref[row, :steps]), (name, row, steps,
                                                                        margins, new_ref, new_got)  # fmt: skip
