"""Where the host time of a call goes: per-call cost of each layer on back-to-back tiny calls,
and a breakdown of the first call in a new process with a warm disk cache."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from moegemm.testing import host_us_per_call

FIRST_CALL = r"""
import time
t = [time.perf_counter()]
import torch
torch.cuda.init()
a = torch.randn(1000, 1024, device="cuda").bfloat16()
b = torch.randn(2048, 1024, device="cuda").bfloat16()
d = torch.empty(1000, 2048, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
marks = {}
def mark(name):
    now = time.perf_counter(); marks[name] = (now - t[0]) * 1e3; t[0] = now
mark("torch setup")
import moegemm.api.bf16_gemm as g
mark("import moegemm.api")
from moegemm import _C
mark("import _C")
from moegemm.api.device import arch_for_device
arch = arch_for_device(0)
mark("device properties")
from moegemm.heuristics import GemmDesc, select_config
config = select_config(GemmDesc("bf16_gemm_nt", m=1000, n=2048, k=1024), arch)
mark("select_config")
from moegemm.jit.codegen import sm90_bf16_gemm_spec
spec = sm90_bf16_gemm_spec(config, "bf16", False)
mark("codegen")
from moegemm.jit import cache
path, data = cache.load_or_build(spec)
mark("cache lookup + validation")
kernel = _C.Kernel(data)
mark("cuLibraryLoadData")
g.bf16_gemm_nt(a, b, d)
torch.cuda.synchronize()
mark("first call (plan, launch, sync)")
print(" | ".join(f"{k}: {v:.2f} ms" for k, v in marks.items()))
"""


def main() -> None:
    import moegemm
    from moegemm import _C
    from moegemm.api import bf16_gemm as g

    a = torch.randn(64, 128, device="cuda").bfloat16()
    b = torch.randn(128, 128, device="cuda").bfloat16()
    d = torch.empty(64, 128, device="cuda", dtype=torch.bfloat16)
    bt = b.t()
    moegemm.bf16_gemm_nt(a, b, d)
    from moegemm.api.plans import plans

    plan = next(iter(plans.values()))
    stream = torch.cuda.current_stream().cuda_stream
    # (a, b, d, c, group_info, rows, m, n, k, groups, lda, ldb, ldb_group, ldd, ldc, stream)
    launch_args = (
        a.data_ptr(),
        b.data_ptr(),
        d.data_ptr(),
        0,
        0,
        64,
        64,
        128,
        128,
        1,
        128,
        128,
        128 * 128,
        128,
        0,
        stream,
    )
    rows = {
        "bf16_gemm_nt (whole call)": host_us_per_call(lambda: moegemm.bf16_gemm_nt(a, b, d)),
        "fast-path checks only": host_us_per_call(lambda: g._fast_path_args(a, b, d, None)),
        "full checks only": host_us_per_call(lambda: g._check(a, b, d, None)),
        "plan.launch only": host_us_per_call(lambda: plan.launch(*launch_args)),
        "empty _C call": host_us_per_call(lambda: _C.get_pdl()),
        "torch.mm(out=)": host_us_per_call(lambda: torch.mm(a, bt, out=d)),
    }
    # The grouped functions on tiny problems (2 groups): they take the full argument checks.
    gb = torch.randn(2, 128, 128, device="cuda").bfloat16()
    offs = torch.tensor([32, 64], device="cuda", dtype=torch.int32)
    ma, md = a.view(2, 32, 128), d.view(2, 32, 128)
    masked_m = torch.tensor([32, 17], device="cuda", dtype=torch.int32)
    kd = torch.empty(2, 128, 128, device="cuda")
    rows["m-grouped offs (whole call)"] = host_us_per_call(
        lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(a, gb, d, offs=offs)
    )
    rows["m-grouped masked (whole call)"] = host_us_per_call(
        lambda: moegemm.m_grouped_bf16_gemm_nt_masked(ma, gb, md, masked_m, 16)
    )
    rows["k-grouped (whole call)"] = host_us_per_call(
        lambda: moegemm.k_grouped_bf16_gemm_tn_contiguous(a, d, kd, offs)
    )
    if hasattr(torch, "_grouped_mm"):
        gbt = gb.transpose(-2, -1)
        rows["torch._grouped_mm (offs)"] = host_us_per_call(
            lambda: torch._grouped_mm(a, gbt, offs=offs)
        )
    for name, us in rows.items():
        print(f"{name:28s} {us:7.2f} us/call")
    env = dict(os.environ)
    out = subprocess.run(
        [sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True, check=True
    )
    print("first call, warm cache:", out.stdout.strip())


if __name__ == "__main__":
    main()
