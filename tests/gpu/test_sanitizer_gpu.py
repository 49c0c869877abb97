"""compute-sanitizer memcheck and racecheck over one small case of each layout.

The workloads are this file's own `workload()` (BF16) and `fp8_fp4_workload()`: the tests run
`python tests/gpu/test_sanitizer_gpu.py [bf16|fp8_fp4]` under the sanitizer, which exits non-zero
when a result is wrong, so a wrong kernel fails the test even where the sanitizer reports no
hazard.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SCRIPT = Path(__file__).resolve()
PYTHON_DIR = SCRIPT.parents[2] / "python"
HELPERS_DIR = SCRIPT.parents[1] / "helpers"  # fp8_fp4_reference, for the FP8 x FP4 workload


def workload() -> int:
    """One small case of each BF16 layout against FP32; 0 when every result is right."""
    import torch

    import moegemm
    from moegemm.testing import calc_diff

    torch.manual_seed(0)
    bf16 = torch.bfloat16
    ok = True

    def check(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
        nonlocal ok
        diff = calc_diff(got, ref)
        print(f"{name}: calc_diff {diff:.2e}")
        ok &= diff < 1e-5

    a, b = torch.randn(70, 136, device="cuda").to(bf16), torch.randn(3, 200, 136, device="cuda")
    b = (b * 0.05).to(bf16)
    d = torch.empty(70, 200, device="cuda", dtype=bf16)
    moegemm.bf16_gemm_nt(a, b[0], d)
    check("dense", d, a.float() @ b[0].float().t())

    offs = torch.tensor([30, 30, 70], device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, offs=offs)
    ref = torch.cat([a[:30].float() @ b[0].float().t(), a[30:].float() @ b[2].float().t()])
    check("offs", d, ref)

    ia = torch.randn(256, 136, device="cuda").to(bf16)
    m_indices = torch.full((256,), -1, device="cuda", dtype=torch.int32)
    m_indices[:100] = 1
    m_indices[128:140] = 2
    id_ = torch.empty(256, 200, device="cuda", dtype=bf16)
    moegemm.m_grouped_bf16_gemm_nt_contiguous(ia, b, id_, m_indices)
    check(
        "m_indices",
        torch.cat([id_[:100], id_[128:140]]),
        torch.cat([ia[:100].float() @ b[1].float().t(), ia[128:140].float() @ b[2].float().t()]),
    )

    ma = torch.randn(3, 48, 136, device="cuda").to(bf16)
    md = torch.zeros(3, 48, 200, device="cuda", dtype=bf16)
    masked_m = torch.tensor([48, 0, 5], device="cuda", dtype=torch.int32)
    moegemm.m_grouped_bf16_gemm_nt_masked(ma, b, md, masked_m, expected_m=16)
    check(
        "masked",
        torch.cat([md[0], md[2, :5]]),
        torch.cat([ma[0].float() @ b[0].float().t(), ma[2, :5].float() @ b[2].float().t()]),
    )

    ka, kb = torch.randn(70, 128, device="cuda").to(bf16), torch.randn(70, 64, device="cuda")
    kb = kb.to(bf16)
    kd = torch.empty(3, 128, 64, device="cuda")
    moegemm.k_grouped_bf16_gemm_tn_contiguous(ka, kb, kd, offs)
    kref = torch.stack(
        [
            ka[:30].float().t() @ kb[:30].float(),
            torch.zeros(128, 64, device="cuda"),
            ka[30:].float().t() @ kb[30:].float(),
        ]
    )
    check("k_grouped", kd, kref)
    torch.cuda.synchronize()
    return 0 if ok else 1


def fp8_fp4_workload() -> int:
    """One small case of each FP8 x FP4 function (raw and prepared weights, both sfa layouts,
    a partial last 128-K block) against FP32 on the dequantized operands; 0 when all right."""
    import torch
    from fp8_fp4_reference import TOL, mn_major, ref_fp32

    import moegemm
    from moegemm.quant import per_token_cast_to_fp8
    from moegemm.testing import calc_diff

    torch.manual_seed(0)
    ok = True

    def check(name: str, got: torch.Tensor, ref: torch.Tensor) -> None:
        nonlocal ok
        diff = calc_diff(got, ref)
        print(f"fp8_fp4 {name}: calc_diff {diff:.2e}")
        ok &= diff < TOL

    def nan(*shape: int) -> torch.Tensor:
        return torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)

    n, k = 192, 160  # N: three 64-row blocks (prepared weights); K: one 128-K block and 32 more
    b = torch.randint(0, 256, (3, n, k // 2), device="cuda", dtype=torch.uint8)
    sfb = torch.randint(118, 124, (3, n, k // 32), device="cuda", dtype=torch.uint8)
    prepared = moegemm.prepare_mxfp4_weights(b, sfb)
    a, sfa = per_token_cast_to_fp8(torch.randn(70, k, device="cuda"))

    d = nan(70, n)
    moegemm.fp8_fp4_gemm_nt((a, sfa), (b[0], sfb[0]), d)
    check("dense", d, ref_fp32(a, sfa, b[0], sfb[0]))

    d = nan(70, n)
    offs = torch.tensor([30, 30, 70], device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((a, mn_major(sfa)), prepared, d, offs=offs)
    ref = torch.cat(
        [ref_fp32(a[:30], sfa[:30], b[0], sfb[0]), ref_fp32(a[30:], sfa[30:], b[2], sfb[2])]
    )
    check("offs", d, ref)

    ia, isfa = per_token_cast_to_fp8(torch.randn(256, k, device="cuda"))
    m_indices = torch.full((256,), -1, device="cuda", dtype=torch.int32)
    m_indices[:100] = 1
    m_indices[128:140] = 2
    id_ = nan(256, n)
    moegemm.m_grouped_fp8_fp4_gemm_nt_contiguous((ia, isfa), (b, sfb), id_, m_indices)
    check(
        "m_indices",
        torch.cat([id_[:100], id_[128:140]]),
        torch.cat(
            [
                ref_fp32(ia[:100], isfa[:100], b[1], sfb[1]),
                ref_fp32(ia[128:140], isfa[128:140], b[2], sfb[2]),
            ]
        ),
    )

    ma, msfa = per_token_cast_to_fp8(torch.randn(3, 46, k, device="cuda"))  # M_aligned 48
    md = nan(3, 46, n)
    masked_m = torch.tensor([46, 0, 5], device="cuda", dtype=torch.int32)
    moegemm.m_grouped_fp8_fp4_gemm_nt_masked((ma, mn_major(msfa)), (b, sfb), md, masked_m, 16)
    check(
        "masked",
        torch.cat([md[0], md[2, :5]]),
        torch.cat(
            [ref_fp32(ma[0], msfa[0], b[0], sfb[0]), ref_fp32(ma[2, :5], msfa[2, :5], b[2], sfb[2])]
        ),
    )
    ok &= bool(md[1].isnan().all() and md[2, 5:].isnan().all())  # rows past masked_m untouched
    torch.cuda.synchronize()
    return 0 if ok else 1


WORKLOADS = {"bf16": workload, "fp8_fp4": fp8_fp4_workload}


def sanitizer() -> str:
    found = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.access(found, os.X_OK):
        pytest.skip("compute-sanitizer not found")
    return found


def workload_env() -> dict[str, str]:
    """The environment plus the import paths of moegemm (a plain checkout runs it too) and of
    the tests' helpers (the FP8 x FP4 workload's reference)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PYTHON_DIR), str(HELPERS_DIR)] + ([env["PYTHONPATH"]] if "PYTHONPATH" in env else [])
    )
    return env


_warmed: set[str] = set()


def warm(family: str) -> None:
    """Compile outside the sanitizer, so it watches the kernels, not nvcc; the workload's
    results are checked here too."""
    if family not in _warmed:
        cmd = [sys.executable, str(SCRIPT), family]
        subprocess.run(cmd, check=True, timeout=600, env=workload_env())
        _warmed.add(family)


@pytest.fixture(scope="module")
def warm_cache() -> None:
    warm("bf16")


def run_sanitized(tool: str, family: str) -> None:
    proc = subprocess.run(
        [sanitizer(), "--tool", tool, "--error-exitcode", "3", sys.executable, str(SCRIPT), family],
        capture_output=True, text=True, timeout=900, check=False, env=workload_env(),
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    if "Device not supported" in out or "device is not supported" in out.lower():
        pytest.skip(f"compute-sanitizer cannot attach to this GPU runtime: {out[-300:]}")
    assert proc.returncode == 0, out[-4000:]
    assert "ERROR SUMMARY: 0 errors" in out or "RACECHECK SUMMARY: 0 hazards" in out, out[-2000:]


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_sanitizer_clean(tool: str, warm_cache: None) -> None:
    run_sanitized(tool, "bf16")


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_fp8_fp4_sanitizer_clean(tool: str) -> None:
    warm("fp8_fp4")
    run_sanitized(tool, "fp8_fp4")


if __name__ == "__main__":
    sys.exit(WORKLOADS[sys.argv[1] if len(sys.argv) > 1 else "bf16"]())
