"""Host time per call of every public function, as a multiple of torch.mm's in the same run.

Tiny problems, back-to-back calls, one sync at the end (moegemm.testing.host_us_per_call): the
GPU finishes each kernel long before the host issues the next, so the time is the host's
(argument checks, plan lookup, launch). Target: <= 0.70 x torch.mm(out=) for every function.

    python benchmarks/host_path_profile.py --json host.json            # on the GPU
    python benchmarks/host_path_profile.py --cpu-stub --json host.json  # no GPU: Python side
    python benchmarks/host_path_profile.py --cpu-stub --fake-driver     # no GPU: and _C's side

--cpu-stub times the Python side of a plan hit on CPU tensors, with the launcher (which checks
the current device) and the stream getter stubbed (no ratio: torch.mm on the CPU computes);
--fake-driver puts _C's real bound launches in instead of the stub launcher, launching into
the fake CUDA driver of tests/helpers/fake_driver (built here with the C++ compiler; it records
launches and does nothing), so the C++ side (argument conversion, fill, descriptor memo,
launch) is timed too.
--first-call adds a breakdown of the first call in a new process with a warm disk cache (GPU)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import timeit
from collections.abc import Callable
from pathlib import Path

import torch

TARGET = 0.70
BF16, I32 = torch.bfloat16, torch.int32

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
import moegemm
mark("import moegemm")
from moegemm.launch.device import arch_for_device
arch = arch_for_device(0)
mark("device properties")
from moegemm.heuristics import GemmDesc, select_config
config = select_config(GemmDesc("bf16_gemm_nt", m=1000, n=2048, k=1024), arch)
mark("select_config")
from moegemm.jit.codegen import sm90_bf16_gemm_spec
spec = sm90_bf16_gemm_spec(config, "bf16", False)
mark("codegen")
from moegemm.jit.runtime import load_kernel
load_kernel(spec)
mark("cache lookup + cuLibraryLoadData")
moegemm.bf16_gemm_nt(a, b, d)
torch.cuda.synchronize()
mark("first call (checks, plan, launch, sync)")
print(" | ".join(f"{k}: {v:.2f} ms" for k, v in marks.items()))
"""


def cases(device: str) -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    """name -> (the public call, a same-size torch call that is its natural peer)."""
    import moegemm

    def t(*shape: int, dtype: torch.dtype = BF16) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype, device=device)

    a, b, d = t(64, 128), t(128, 128), t(64, 128)
    bt = b.t()
    gb = t(2, 128, 128)
    offs = torch.tensor([32, 64], dtype=I32, device=device)
    ia, idd = t(256, 128), t(256, 128)
    m_indices = torch.repeat_interleave(torch.tensor([0, 1], dtype=I32), 128).to(device)
    ma, md = t(2, 32, 128), t(2, 32, 128)
    masked_m = torch.tensor([32, 17], dtype=I32, device=device)
    kd = t(2, 128, 128, dtype=torch.float32)
    mm = lambda: torch.mm(a, bt, out=d)
    grouped = mm
    if hasattr(torch, "_grouped_mm") and device == "cuda":
        gbt = gb.transpose(-2, -1)
        grouped = lambda: torch._grouped_mm(a, gbt, offs=offs)
    return {
        "dense": (lambda: moegemm.bf16_gemm_nt(a, b, d), mm),
        "offs": (lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(a, gb, d, offs=offs), grouped),
        "m_indices": (
            lambda: moegemm.m_grouped_bf16_gemm_nt_contiguous(ia, gb, idd, m_indices),
            mm,
        ),
        "masked": (lambda: moegemm.m_grouped_bf16_gemm_nt_masked(ma, gb, md, masked_m, 16), mm),
        "k_grouped": (lambda: moegemm.k_grouped_bf16_gemm_tn_contiguous(a, d, kd, offs), mm),
    }


def gpu_profile() -> dict:
    from moegemm.testing import host_us_per_call

    table = cases("cuda")
    for name, (fn, peer) in table.items():  # compile, load and plan everything first
        fn()
        try:
            peer()
        except RuntimeError:  # e.g. a torch without _grouped_mm on this GPU: no peer row
            table[name] = (fn, table["dense"][1])
    torch.cuda.synchronize()
    mm = table["dense"][1]
    mm_us = [host_us_per_call(mm)]
    rows = []
    for name, (fn, peer) in table.items():
        us = host_us_per_call(fn)
        mm_us.append(host_us_per_call(mm))  # interleaved: the ratio uses the run's best mm
        row = {"function": name, "us_per_call": us}
        if peer is not mm:
            row["peer_us_per_call"] = host_us_per_call(peer)
        rows.append(row)
    best_mm = min(mm_us)
    for row in rows:
        row["ratio_to_torch_mm"] = row["us_per_call"] / best_mm
        row["meets_target"] = row["ratio_to_torch_mm"] <= TARGET
    return {
        "mode": "gpu",
        "device": torch.cuda.get_device_name(),
        "torch_mm_us_per_call": best_mm,
        "torch_mm_spread_us": [min(mm_us), max(mm_us)],
        "target_ratio": TARGET,
        "rows": rows,
    }


REPO = Path(__file__).resolve().parents[1]
# A well-formed 64-bit CUDA ELF header with no sections: the fake driver loads it as a kernel.
FAKE_ELF = b"\x7fELF\x02\x01\x01" + bytes(9)
FAKE_ELF += struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0)


def load_fake_driver(build_dir: Path) -> ctypes.CDLL:
    """Builds tests/helpers/fake_driver/libcuda_fake.cpp and loads it before _C first dlopens
    libcuda.so.1, which then resolves to it (the dynamic loader matches the soname)."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    cuda = Path(os.environ.get("CUDA_HOME") or "/usr/local/cuda") / "include"
    if cxx is None or not (cuda / "cuda.h").exists():
        sys.exit("host_path_profile: --fake-driver needs a C++ compiler and cuda.h")
    lib = build_dir / "libcuda.so.1"
    cmd = [
        cxx, "-std=c++17", "-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1",
        f"-I{REPO / 'include'}", "-isystem", str(cuda), "-o", str(lib),
        str(REPO / "tests" / "helpers" / "fake_driver" / "libcuda_fake.cpp"),
    ]  # fmt: skip
    subprocess.run(cmd, check=True)
    fake = ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
    fake.fake_set_context(1)
    return fake


def fake_launcher_plans() -> Callable:
    """A make_plan that binds real _C launchers (of a stand-in kernel, typical launch shapes)."""
    from moegemm import _C
    from moegemm.heuristics.sm90_bf16 import storage_of
    from moegemm.launch.plans import Plan, bound_integers

    kernel = _C.Kernel(FAKE_ELF)

    def make_plan(device: int, desc, problem: tuple, config=None) -> Plan:
        k_grouped = desc.kind == "k_grouped"
        store_cols, threads, smem = (32, 256, 150_000) if k_grouped else (64, 384, 200_000)
        storage = storage_of(128, 128, (1, 1), store_cols, k_grouped).launcher_kwargs()
        launcher_type = _C.Bf16KGroupedLauncher if k_grouped else _C.Bf16GemmLauncher
        launcher = launcher_type(kernel, 128, 128, 64, 132, threads, smem, 1, 1, **storage)
        args = bound_integers(type(launcher), problem)
        return Plan(0, launcher.bind(0, *args), args, config, launcher)

    return make_plan


def cpu_stub_profile(
    number: int = 1000, rounds: int = 100, fake: ctypes.CDLL | None = None
) -> dict:
    """The Python side of a plan hit on CPU tensors: the full checks' placement step and the
    plan builder are stubbed on the miss (so CPU tensors get plans), then every timed call
    hits. The stream getter's stub is a C builtin as the real one is (abs()); the launcher is a Python no-op, timed alone, or
    with `fake` (the loaded fake driver) _C's bound launch of each plan."""
    from moegemm.api import bf16_gemm, k_grouped, m_grouped
    from moegemm.heuristics import GemmDesc
    from moegemm.launch import checks
    from moegemm.launch import plans as plans_module
    from moegemm.launch.plans import Plan
    from moegemm.launch.problems import GemmProblem

    def launch(*args: int) -> bool:
        return True  # launched: a bound launch's answer where its checks pass

    def stub_plan(device: int, desc, problem: tuple, config=None) -> Plan:
        return Plan(0, launch, (), config)

    builds = []
    plan_of = fake_launcher_plans() if fake is not None else stub_plan

    def make_plan(device: int, desc, problem: tuple, config=None) -> Plan:
        builds.append(desc)
        return plan_of(device, desc, problem, config)

    checks.require_placement = lambda tma, others: 0
    for mod in (bf16_gemm, m_grouped, k_grouped):
        mod.raw_stream = abs
    plans_module.make_plan = make_plan
    plans_module.raw_stream = abs
    table = cases("cpu")

    stub_args = tuple(range(6))  # a bound launch: five pointers and the stream
    timed = {name: fn for name, (fn, _) in table.items()}
    if fake is not None:  # what a bound launch alone costs, in place of the stub's
        bound = plan_of(0, GemmDesc("bf16_gemm_nt", 64, 128, 128), GemmProblem(*(64,) * 9, ldc=64))
        launch, stub_args = bound.launch, (1 << 16, 1 << 17, 1 << 18, 0, 0, 0)
    for fn in timed.values():
        fn()  # the miss: full checks, plan stored
    timed["stub launch"] = lambda: launch(*stub_args)
    # Best of many short rounds, the functions interleaved: a shared machine's noise only
    # ever adds time, and it hits every function alike.
    best = dict.fromkeys(timed, float("inf"))
    for _ in range(rounds):
        for name, fn in timed.items():
            best[name] = min(best[name], timeit.timeit(fn, number=number) / number * 1e6)
    launch_us = best.pop("stub launch")
    rows = [
        {"function": name, "us_per_call": us, "us_without_stub_launch": us - launch_us}
        for name, us in best.items()
    ]
    from moegemm.launch.device import registered_plan_caches

    plans = sum(
        len(cache) for cache in registered_plan_caches()
    )  # one per function: every call hit
    result = {"mode": "cpu-stub", "stub_launch_us": launch_us, "plans": plans, "rows": rows}
    result["builds"] = len(builds)  # one per function: every timed call hit and launched
    if fake is not None:  # every timed call launched into the fake driver
        result.update(mode="cpu-stub+fake-driver", fake_launches=fake.fake_launches())
    return result


def first_call() -> str:
    out = subprocess.run(
        [sys.executable, "-c", FIRST_CALL], env=dict(os.environ), capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--cpu-stub", action="store_true", help="no GPU: time the Python side")
    parser.add_argument(
        "--fake-driver", action="store_true", help="--cpu-stub: time _C's bound launches too"
    )
    parser.add_argument("--first-call", action="store_true", help="also break down a first call")
    parser.add_argument("--rounds", type=int, default=100, help="--cpu-stub: timing rounds")
    args = parser.parse_args()
    if args.fake_driver and not args.cpu_stub:
        parser.error("--fake-driver goes with --cpu-stub")
    if args.cpu_stub:
        with tempfile.TemporaryDirectory(prefix="moegemm-fake-driver-") as tmp:
            fake = load_fake_driver(Path(tmp)) if args.fake_driver else None
            result = cpu_stub_profile(rounds=args.rounds, fake=fake)
    elif not torch.cuda.is_available():
        sys.exit("host_path_profile: no CUDA GPU (use --cpu-stub for the Python side alone)")
    else:
        result = gpu_profile()
        if args.first_call:
            result["first_call"] = first_call()
    result["torch"] = torch.__version__
    result["commit"] = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
        cwd=Path(__file__).parent, check=False,
    ).stdout.strip()  # fmt: skip
    for row in result["rows"]:
        ratio = row.get("ratio_to_torch_mm")
        tail = f"  {ratio:5.2f} x torch.mm" if ratio is not None else ""
        print(f"{row['function']:10s} {row['us_per_call']:7.2f} us/call{tail}")
    if "torch_mm_us_per_call" in result:
        print(f"torch.mm   {result['torch_mm_us_per_call']:7.2f} us/call (target <= {TARGET} x)")
    if "first_call" in result:
        print("first call, warm cache:", result["first_call"])
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
