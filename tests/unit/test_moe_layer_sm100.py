"""The fused MoE layer with MXFP4 experts on SM100, on the CPU (no Blackwell GPU here: its
kernels are compiled and statically checked, not run on hardware): the weights' SM100
preparation through prepare_moe_weights, the refusals of weights prepared for another GPU,
the SM100 launcher's bound integers against an independent computation, the warmup's layer
kernels, and the torch.compile op carrying the arch."""

from __future__ import annotations

import pytest
import torch

import moegemm
from moegemm import _C
from moegemm.api.mxfp4_weights import prepare_mxfp4_weights, unprepare_mxfp4_weights
from moegemm.families import kernel_spec, select_config
from moegemm.heuristics import arch_for
from moegemm.launch.plans import bound_integers
from moegemm.moe.mxfp4 import (
    fp8_gemm_problem,
    mxfp4_layer_gemms,
    mxfp4_masked_gemms,
    require_weights_for,
)
from moegemm.moe.weights import kernel_order
from moegemm.quant import quantize_mxfp4

SM100 = arch_for("sm_100f")


def _pair(e: int, n: int, k: int, seed: int):
    w = torch.randn(e, n, k, generator=torch.Generator().manual_seed(seed)) * 0.05
    return quantize_mxfp4(w)


def test_prepare_moe_weights_for_sm100() -> None:
    """H = 2880 (gpt-oss: not a multiple of 128): the codes are padded to Hp, hidden stays H;
    the preparation is prepare_mxfp4_weights(..., arch="sm_100f") of the kernel-ordered rows."""
    e, i, h = 2, 32, 2880
    b, sfb = _pair(e, 2 * i, h, 1)
    p = moegemm.prepare_moe_weights((b, sfb), activation="swiglu_oai", arch="sm_100a")
    assert p.mxfp4_arch == "sm_100f" and p.mxfp4_prepared and p.is_mxfp4
    assert (p.num_experts, p.intermediate, p.hidden) == (e, i, h)
    want = prepare_mxfp4_weights(kernel_order(b, "swiglu_oai"), kernel_order(sfb, "swiglu_oai"),
                                 arch="sm_100f")  # fmt: skip
    assert torch.equal(p.weight, want.b) and torch.equal(p.scales, want.sfb)
    assert p.weight.shape == (e, 2 * i, 2944 // 2)  # Hp = 2944
    codes, scales = unprepare_mxfp4_weights(moegemm.Mxfp4Weights(p.weight, p.scales, True,
                                                                 arch="sm_100f"))  # fmt: skip
    assert torch.equal(codes[..., : h // 2], kernel_order(b, "swiglu_oai"))
    assert torch.equal(scales[..., : h // 32], kernel_order(sfb, "swiglu_oai"))
    # CPU tensors without an arch: Hopper's preparation, as before.
    assert moegemm.prepare_moe_weights((b, sfb)).mxfp4_arch == "sm_90a"


def test_sm100_refusals() -> None:
    e, i, h = 2, 32, 256
    b, sfb = _pair(e, 2 * i, h, 2)
    with pytest.raises(ValueError, match="its own preparation only"):
        moegemm.prepare_moe_weights((b, sfb), mxfp4_layout="raw", arch="sm_100f")
    with pytest.raises(ValueError, match="cannot take the gate/up row order"):
        moegemm.prepare_moe_weights(prepare_mxfp4_weights(b, sfb, arch="sm_100f"))
    with pytest.raises(ValueError, match="arch must be one of"):
        moegemm.prepare_moe_weights((b, sfb), arch="sm_80")
    w13 = moegemm.prepare_moe_weights((b, sfb), arch="sm_100f")
    w2b, w2s = _pair(e, h, i, 3)
    x = torch.zeros(3, h, dtype=torch.bfloat16)
    ids, weights = torch.zeros(3, 2, dtype=torch.int32), torch.zeros(3, 2)
    for w2 in ((w2b, w2s), prepare_mxfp4_weights(w2b, w2s)):  # raw, or prepared for Hopper
        with pytest.raises(ValueError, match="w13 was prepared for sm_100f and w2 for sm_90a"):
            moegemm.fused_moe(x, w13, w2, weights, ids)
    hopper = moegemm.prepare_moe_weights((b, sfb))
    with pytest.raises(ValueError, match="w13 was prepared for sm_90a and w2 for sm_100f"):
        moegemm.fused_moe(x, hopper, prepare_mxfp4_weights(w2b, w2s, arch="sm_100f"), weights, ids)
    short = prepare_mxfp4_weights(w2b[:, :128], w2s[:, :128], arch="sm_100f")
    with pytest.raises(ValueError, match="w2 codes"):
        moegemm.fused_moe(x, w13, short, weights, ids)
    # On the device: the arch the call runs on against the one the experts were prepared for.
    require_weights_for("sm_100f", w13)
    with pytest.raises(ValueError, match="prepared for sm_100f and the call runs on sm_90a"):
        require_weights_for("sm_90a", w13)
    with pytest.raises(ValueError, match="prepared for sm_90a and the call runs on sm_100f"):
        require_weights_for("sm_100f", hopper)


def test_sm100_launcher_integers() -> None:
    """The 14 integers Sm100Fp8Fp4MoeGemmLauncher binds, in csrc's order, read by name from the
    problem of the SM100 layout: codes [E, n, Kp/2] (bytes), scale words [E, Kp/128, Np], sfa
    [rows, ceil(k/128)]."""
    rows, m, n, k, e, lda, ldd = 40, 40, 5760, 2880, 32, 2880, 2880
    problem = fp8_gemm_problem(rows, m, n, k, e, lda, ldd, "sm_100f")
    got = bound_integers(_C.Sm100Fp8Fp4MoeGemmLauncher, problem)
    kp, np_ = 2944, 5760
    assert got == (rows, m, n, k, e, lda, kp // 2, n * kp // 2, ldd, 0, 23, 1, 0, kp // 128 * np_)
    sm90 = bound_integers(
        _C.Sm90Fp8Fp4MoeGemmLauncher, fp8_gemm_problem(rows, m, n, k, e, lda, ldd)
    )
    assert sm90 == (
        rows,
        m,
        n,
        k,
        e,
        lda,
        k // 2,
        n * k // 2,
        ldd,
        0,
        23,
        1,
        0,
        n * k // 32,
        k // 32,
    )


def test_sm100_layer_gemms_and_their_kernels() -> None:
    """Both GEMMs of the SM100 layer: prepared FP8 x FP4 descs with the MoE epilogues, SM100
    kernels with the epilogue compiled in, and every one of them among the warmup's."""
    from moegemm.warmup.layer_specs import layer_specs, model_layer

    model = "gpt_oss_20b"
    e, h, i, top_k, act = model_layer(model)
    w13 = moegemm.moe.PreparedW13(
        torch.empty(e, 2 * i, 2944 // 2, dtype=torch.uint8, device="meta"), None, act,
        torch.empty(1, device="meta"), True, "sm_100f", h,
    )  # fmt: skip
    tokens = [1, 7, 64]
    warmed = set(layer_specs(model, tokens, "sm_100f", 148, weights="mxfp4"))
    names = {s.name for s in warmed}
    assert any(n.startswith("moe_route_gather") and n.endswith("_fp8_ue8m0") for n in names)
    assert any(n.startswith("moe_quantize_rows") and n.endswith("_ue8m0") for n in names)
    assert all(s.arch == "sm_100f" for s in warmed)
    for t in tokens:
        sizes = {"tokens": t, "top_k": top_k, "experts": e, "hidden": h, "intermediate": i}
        gemms = mxfp4_layer_gemms(sizes, w13, True)
        gemms += mxfp4_masked_gemms(e, 16, h, i, 2, w13, True)
        for desc, args in gemms:
            assert len(bound_integers(_C.Sm100Fp8Fp4MoeGemmLauncher, args)) == 14
            assert desc.weights == "prepared"
            config = select_config(desc, SM100)
            assert config.layout.swap_ab and config.layout.block_n == 128
            spec = kernel_spec(desc, config, SM100)
            assert spec.name.startswith("sm100_fp8_fp4_") and spec.name.endswith(desc.epilogue)
            assert "kMoeEpilogue" in spec.source
            if desc.kind == "m_grouped_offsets":
                assert spec in warmed


def test_compile_op_carries_the_arch() -> None:
    """torch.compile's fused_moe_mxfp4 op rebuilds the SM100 operands from its arch argument:
    the fake implementation's checks take the SM100 layout (H from x, codes padded to Hp)."""
    dev, e, i, h = "meta", 4, 64, 160
    w13 = moegemm.prepare_moe_weights(
        (torch.zeros(e, 2 * i, h // 2, dtype=torch.uint8), torch.full((e, 2 * i, h // 32), 127,
                                                                     dtype=torch.uint8)),
        arch="sm_100f",
    )  # fmt: skip
    w13 = moegemm.moe.PreparedW13(w13.weight.to(dev), None, "silu", w13.scales.to(dev), True,
                                  "sm_100f", h)  # fmt: skip
    w2 = prepare_mxfp4_weights(
        torch.zeros(e, h, i // 2, dtype=torch.uint8),
        torch.full((e, h, i // 32), 127, dtype=torch.uint8),
        arch="sm_100f",
    )
    w2 = moegemm.Mxfp4Weights(w2.b.to(dev), w2.sfb.to(dev), True, arch="sm_100f")
    ws = moegemm.MoEWorkspace(5, 2, e, h, i, "mxfp4", device=dev)

    def layer(x, ids, weights):
        return moegemm.fused_moe(x, w13, w2, weights, ids, workspace=ws)

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    args = (torch.zeros(5, h, dtype=torch.bfloat16, device=dev),
            torch.zeros(5, 2, dtype=torch.int32, device=dev), torch.zeros(5, 2, device=dev))  # fmt: skip
    out = torch.compile(layer, fullgraph=True, backend=backend)(*args)
    assert out.shape == (5, h)
    nodes = [n for n in graphs[0].graph.nodes if "moegemm" in str(n.target)]
    assert [str(n.target) for n in nodes] == ["moegemm.fused_moe_mxfp4"]
    assert nodes[0].args[-1] == "sm_100f"
