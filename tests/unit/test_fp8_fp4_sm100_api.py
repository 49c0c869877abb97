"""The SM100 side of the FP8 x FP4 API on the CPU (no Blackwell GPU here; the kernels are
compiled and statically checked, not run on hardware): prepare_mxfp4_weights(..., arch=
"sm_100f") against an independent index computation, and the refusals of an SM100 device
(simulated: fp8_fp4._device_arch patched) for raw or Hopper-prepared weights."""

from __future__ import annotations

import pytest
import torch

from moegemm.api import fp8_fp4
from moegemm.api.mxfp4_weights import (
    Mxfp4Weights,
    prepare_mxfp4_weights,
    unprepare_mxfp4_weights,
)
from moegemm.heuristics import SM100


def _weights(g: int, n: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    b = torch.randint(0, 256, (g, n, k // 2), generator=gen, dtype=torch.uint8)
    sfb = torch.randint(100, 140, (g, n, k // 32), generator=gen, dtype=torch.uint8)
    return b, sfb


@pytest.mark.parametrize(("n", "k"), [(128, 128), (200, 2880), (8, 32)])
def test_sm100_preparation_layout(n: int, k: int) -> None:
    g = 2
    b, sfb = _weights(g, n, k, seed=n + k)
    w = prepare_mxfp4_weights(b, sfb, arch="sm_100f")
    assert isinstance(w, Mxfp4Weights) and w.prepared and w.arch == "sm_100f"
    kp = -(-k // 128) * 128
    np_ = -(-n // 128) * 128
    assert w.b.shape == (g, n, kp // 2) and w.b.is_contiguous()
    assert torch.equal(w.b[..., : k // 2], b) and not w.b[..., k // 2 :].any()  # zero codes
    assert w.sfb.shape == (g, kp // 128, 4 * np_) and w.sfb.dtype == torch.uint8
    # Independently: row r of chunk c sits at word c * 128 + 4 * (r % 32) + r // 32 of its
    # k-block; byte j of that word is the scale of 32-block 4 kb + j; padding is 127 (1.0).
    words = w.sfb.view(g, kp // 128, np_, 4)
    for gi in range(g):
        for kb in range(kp // 128):
            for row in range(np_):
                c, r = divmod(row, 128)
                pos = c * 128 + 4 * (r % 32) + r // 32
                for j in range(4):
                    block = 4 * kb + j
                    want = sfb[gi, row, block].item() if row < n and block < k // 32 else 127
                    assert words[gi, kb, pos, j].item() == want, (gi, kb, row, j)
    b2, sfb2 = unprepare_mxfp4_weights(w)
    assert torch.equal(b2[..., : k // 2], b) and torch.equal(sfb2[..., : k // 32], sfb)


def test_sm100_preparation_refusals() -> None:
    b, sfb = _weights(1, 8, 64)
    with pytest.raises(ValueError, match="arch must be one of"):
        prepare_mxfp4_weights(b, sfb, arch="sm_80")
    sfb[0, 0, 0] = 0xFF
    with pytest.raises(ValueError, match="NaN scale byte"):
        prepare_mxfp4_weights(b, sfb, arch="sm_100f")
    with pytest.raises(ValueError, match="SM100 weights are prepared"):
        Mxfp4Weights(b, sfb, prepared=False, arch="sm_100f")
    with pytest.raises(ValueError, match="arch must be"):
        Mxfp4Weights(b, sfb, arch="sm_89")
    assert prepare_mxfp4_weights(b[..., :], sfb.clamp(max=200), arch="sm_100a").arch == "sm_100f"


@pytest.fixture
def on_sm100(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fp8_fp4, "_device_arch", lambda t: SM100)


def _acts(*lead: int, k: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.zeros(*lead, k, dtype=torch.float8_e4m3fn)
    sfa = torch.ones(*lead, -(-k // 128), dtype=torch.float32)
    return a, sfa


HINT = r'prepare_mxfp4_weights\(b, sfb, arch="sm_100f"\)'


def test_sm100_refuses_raw_and_hopper_weights(on_sm100: None) -> None:
    import moegemm

    m, n, k, g = 64, 128, 256, 2
    a, sfa = _acts(m, k=k)
    b, sfb = _weights(g, n, k)
    d = torch.empty(m, n, dtype=torch.bfloat16)
    info = torch.zeros(m, dtype=torch.int32)
    hopper = prepare_mxfp4_weights(b, sfb)
    for weights, what in (((b, sfb), "raw"), (hopper, "prepared for sm_90a")):
        with pytest.raises(ValueError, match=HINT + ".*" + what):
            moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), weights, d, info)
        with pytest.raises(ValueError, match=HINT):
            moegemm.fp8_fp4_gemm_nt((a, sfa), (b[0], sfb[0]), d)
        am, sfam = _acts(g, 32, k=k)
        dm = torch.empty(g, 32, n, dtype=torch.bfloat16)
        with pytest.raises(ValueError, match=HINT):
            moegemm.m_grouped_fp8_fp4_gemm_nt_masked(
                (am, sfam), weights, dm, torch.zeros(g, dtype=torch.int32), 8
            )


def test_sm100_checks_take_the_sm100_layout(on_sm100: None) -> None:
    """SM100-prepared weights pass the shape checks (K = 2880 padded to 2944 codes) and stop
    only at the placement (CPU tensors); a mismatched K is named."""
    import moegemm

    m, n, k, g = 64, 256, 2880, 2
    a, sfa = _acts(m, k=k)
    b, sfb = _weights(g, n, k)
    w = prepare_mxfp4_weights(b, sfb, arch="sm_100f")
    d = torch.empty(m, n, dtype=torch.bfloat16)
    offs = torch.tensor([32, 64], dtype=torch.int32)
    with pytest.raises((ValueError, RuntimeError), match="(?i)cuda"):
        moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, sfa), w, d, offs=offs)
    a2, sfa2 = _acts(m, k=k - 128)
    with pytest.raises(ValueError, match="b must have shape"):
        moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a2, sfa2), w, d, offs=offs)
