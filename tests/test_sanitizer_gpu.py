"""compute-sanitizer memcheck and racecheck over one small case of each layout.

The workload is this file's own `workload()`: the tests run `python tests/test_sanitizer_gpu.py`
under the sanitizer, which exits non-zero when a result is wrong, so a wrong kernel fails the
test even where the sanitizer reports no hazard.
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
PYTHON_DIR = SCRIPT.parents[1] / "python"


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


def sanitizer() -> str:
    found = shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"
    if not os.access(found, os.X_OK):
        pytest.skip("compute-sanitizer not found")
    return found


def workload_env() -> dict[str, str]:
    """The environment plus an import path for moegemm (a plain checkout runs it too)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(PYTHON_DIR)] + ([env["PYTHONPATH"]] if "PYTHONPATH" in env else [])
    )
    return env


@pytest.fixture(scope="module")
def warm_cache() -> None:
    """Compile outside the sanitizer, so it watches the kernels, not nvcc; the workload's
    results are checked here too."""
    subprocess.run([sys.executable, str(SCRIPT)], check=True, timeout=600, env=workload_env())


@pytest.mark.parametrize("tool", ["memcheck", "racecheck"])
def test_sanitizer_clean(tool: str, warm_cache: None) -> None:
    proc = subprocess.run(
        [sanitizer(), "--tool", tool, "--error-exitcode", "3", sys.executable, str(SCRIPT)],
        capture_output=True, text=True, timeout=900, check=False, env=workload_env(),
    )  # fmt: skip
    out = proc.stdout + proc.stderr
    if "Device not supported" in out or "device is not supported" in out.lower():
        pytest.skip(f"compute-sanitizer cannot attach to this GPU runtime: {out[-300:]}")
    assert proc.returncode == 0, out[-4000:]
    assert "ERROR SUMMARY: 0 errors" in out or "RACECHECK SUMMARY: 0 hazards" in out, out[-2000:]


if __name__ == "__main__":
    sys.exit(workload())
