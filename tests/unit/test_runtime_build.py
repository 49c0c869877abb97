"""The host runtime `moegemm._C`: it builds, imports without a GPU, reports a missing driver
clearly, and, where an SM90 GPU is present, loads cubins, encodes TMA descriptors and launches."""

from __future__ import annotations

import ctypes
import glob
import importlib
import importlib.util
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load_extension():
    """moegemm._C, without depending on moegemm/__init__.py importing cleanly: the package's
    Python side is developed separately and may be mid-change."""
    try:
        return importlib.import_module("moegemm._C")
    except ImportError:
        pass
    spec = importlib.util.find_spec("moegemm")  # finds the package without executing it
    dirs = list(spec.submodule_search_locations or []) if spec else []
    dirs.append(str(REPO / "python" / "moegemm"))
    for folder in dirs:
        for path in sorted(glob.glob(os.path.join(folder, "_C*.so"))):
            ext_spec = importlib.util.spec_from_file_location("moegemm._C", path)
            module = importlib.util.module_from_spec(ext_spec)
            ext_spec.loader.exec_module(module)
            return module
    return None


C = _load_extension()
if C is None:
    pytest.skip(
        "moegemm._C is not built: run `pip install --no-build-isolation --no-deps -e .`",
        allow_module_level=True,
    )


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


# A well-formed 64-bit CUDA ELF header with no sections: passes the runtime's bounds checks, so
# it reaches the driver (or reports the missing driver).
EMPTY_CUDA_ELF = (
    b"\x7fELF\x02\x01\x01"
    + bytes(9)
    + struct.pack("<HHIQQQIHHHHHH", 2, 190, 1, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0)
)

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not _cuda_available(), reason="needs a CUDA GPU (torch.cuda)")


# --- everywhere -------------------------------------------------------------------------------


def test_exposes_runtime_api():
    for name in (
        "Kernel",
        "cubin_kernel_count",
        "device_properties",
        "encode_tma_desc",
        "set_pdl",
        "get_pdl",
        "Bf16GemmLauncher",
        "Bf16KGroupedLauncher",
    ):
        assert callable(getattr(C, name)), name
    assert isinstance(C.Kernel.name, property) or hasattr(C.Kernel, "name")
    assert hasattr(C.Kernel, "num_regs")
    # python/moegemm/api/plans.py and the benchmarks read the CTA count after the cluster clamp.
    for launcher in (C.Bf16GemmLauncher, C.Bf16KGroupedLauncher):
        assert isinstance(launcher.num_blocks, property), launcher


def test_built_without_linking_the_driver():
    ldd = shutil.which("ldd")
    if ldd is None:
        pytest.skip("ldd not available")
    libs = subprocess.run([ldd, C.__file__], check=False, capture_output=True, text=True).stdout
    assert "libcuda" not in libs and "libcudart" not in libs, libs


def test_pdl_is_on_in_a_fresh_process():
    """Programmatic dependent launch is the default (every kernel waits for its predecessor
    before its first global access); a fresh interpreter sees it before any call."""
    out = subprocess.run(
        [sys.executable, "-c", "from moegemm import _C; print(_C.get_pdl())"],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert out.strip() == "True", out


def test_pdl_switch_round_trips():
    before = C.get_pdl()
    try:
        C.set_pdl(True)
        assert C.get_pdl() is True
        C.set_pdl(False)
        assert C.get_pdl() is False
    finally:
        C.set_pdl(before)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"dtype": "f16"}, "dtype"),
        ({"swizzle_bytes": 96}, "swizzle"),
        ({"dims": [64, 64], "strides_bytes": [], "box": [64, 64]}, "stride"),
        ({"dims": [64, 64], "strides_bytes": [128], "box": [64]}, "box"),
        ({"dims": [2] * 6, "strides_bytes": [128] * 5, "box": [2] * 6}, "1..5"),
    ],
)
def test_encode_tma_desc_rejects_bad_arguments_before_the_driver(kwargs, match):
    args = {"ptr": 0, "dtype": "bf16", "dims": [64, 64], "strides_bytes": [128], "box": [64, 64]}
    args["swizzle_bytes"] = 128
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        C.encode_tma_desc(**args)


@pytest.mark.skipif(_driver_present(), reason="libcuda.so.1 is present on this machine")
def test_missing_driver_is_a_clear_runtime_error():
    calls = [
        lambda: C.device_properties(0),
        lambda: C.Kernel(EMPTY_CUDA_ELF),
        lambda: C.cubin_kernel_count(EMPTY_CUDA_ELF),
        lambda: C.encode_tma_desc(0, "bf16", [64, 64], [128], [64, 64], 128),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match=r"libcuda\.so\.1 could not be loaded") as info:
            call()
        assert "a CUDA driver is needed" in str(info.value)


# --- on an SM90 GPU ---------------------------------------------------------------------------


def _nvcc() -> str | None:
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "nvcc")):
            return os.path.join(root, "bin", "nvcc")
    return shutil.which("nvcc")


def _compile_cubin(tmp_path: Path, source: str) -> bytes:
    nvcc = _nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    src = tmp_path / "probe.cu"
    src.write_text(source)
    out = tmp_path / "probe.cubin"
    arch = "-gencode=arch=compute_90a,code=sm_90a"
    cmd = [nvcc, "-cubin", arch, "-std=c++17", f"-I{REPO / 'include'}", "-o", str(out), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    return out.read_bytes()


def _make_context_current():
    import torch

    torch.zeros(1, device="cuda")  # creates the primary context and makes it current
    return torch


TWO_KERNELS = """
extern "C" __global__ void first(int* p) { p[0] = 1; }
extern "C" __global__ void second(int* p) { p[0] = 2; }
"""

# Records what the launcher put into the one __grid_constant__ parameter and the launch shape.
PROBE = """
#include <moegemm/common/sm90_gemm_params.h>
extern "C" __global__ void moegemm_probe(const __grid_constant__ moegemm::Bf16GemmParams p) {
  extern __shared__ unsigned char smem[];
  if (threadIdx.x != 0) return;
  unsigned cluster_size;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(cluster_size));
  smem[0] = 7;
  unsigned* out = static_cast<unsigned*>(p.d) + blockIdx.x * 8;
  out[0] = p.m; out[1] = p.n; out[2] = p.k; out[3] = p.ldd; out[4] = p.ldc;
  out[5] = cluster_size; out[6] = blockDim.x; out[7] = (p.c != nullptr) + 2u * smem[0];
}
"""


@gpu
@needs_gpu
def test_device_properties():
    props = C.device_properties(0)
    assert set(props) == {"num_sms", "smem_per_block_optin", "l2_size", "cc_major", "cc_minor"}
    assert props["num_sms"] > 0 and props["smem_per_block_optin"] > 48 * 1024
    assert props["l2_size"] > 0 and props["cc_major"] >= 7
    with pytest.raises(RuntimeError, match="cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE"):
        C.device_properties(1 << 20)


@gpu
@needs_gpu
def test_encode_tma_desc_on_a_real_tensor():
    torch = _make_context_current()
    x = torch.empty(4, 256, 128, dtype=torch.bfloat16, device="cuda")
    desc2 = C.encode_tma_desc(x.data_ptr(), "bf16", [128, 1024], [256], [64, 128], 128)
    dims3, strides3 = [128, 256, 4], [256, 256 * 256]
    desc3 = C.encode_tma_desc(x.data_ptr(), "bf16", dims3, strides3, [64, 128, 1], 128)
    assert isinstance(desc2, bytes) and len(desc2) == 128
    assert isinstance(desc3, bytes) and len(desc3) == 128
    with pytest.raises(RuntimeError, match=r"cuTensorMapEncodeTiled failed.*box=\{64, 300\}"):
        C.encode_tma_desc(x.data_ptr(), "bf16", [128, 1024], [256], [64, 300], 128)


@gpu
@needs_gpu
def test_kernel_rejects_garbage_and_multi_kernel_cubins(tmp_path):
    # Refused before the driver: it would JIT garbage as PTX, and read past a truncated cubin.
    with pytest.raises(RuntimeError, match="cuLibraryLoadData .*no ELF header"):
        C.Kernel(b"garbage")
    cubin = _compile_cubin(tmp_path, TWO_KERNELS)
    for cut in (64, len(cubin) // 2, len(cubin) - 1):
        with pytest.raises(RuntimeError, match="cuLibraryLoadData .*truncated"):
            C.Kernel(cubin[:cut])
    # Intact headers around zeroed contents: only the driver can tell, and it does.
    corrupt = cubin[:200] + bytes(len(cubin) - 800) + cubin[-600:]
    with pytest.raises(RuntimeError, match="cuLibraryLoadData failed: CUDA_ERROR_INVALID_IMAGE"):
        C.Kernel(corrupt)
    with pytest.raises(RuntimeError, match="holds 0"):
        C.Kernel(EMPTY_CUDA_ELF)
    assert C.cubin_kernel_count(cubin) == 2
    with pytest.raises(RuntimeError, match="exactly one kernel, this one holds 2"):
        C.Kernel(cubin)


@gpu
@needs_gpu
def test_launcher_passes_params_cluster_and_pdl(tmp_path):
    torch = _make_context_current()
    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs SM90 for clusters")
    kernel = C.Kernel(_compile_cubin(tmp_path, PROBE))
    assert C.cubin_kernel_count(_compile_cubin(tmp_path, PROBE)) == 1
    assert kernel.name == "moegemm_probe"
    assert kernel.num_regs > 0

    m, n, k, num_blocks = 300, 200, 136, 4
    a = torch.empty(m, k, dtype=torch.bfloat16, device="cuda")
    b = torch.empty(n, k, dtype=torch.bfloat16, device="cuda")
    c = torch.empty(m, n, dtype=torch.float32, device="cuda")
    d = torch.zeros(num_blocks * 8, dtype=torch.int32, device="cuda")
    shape = {
        "block_m": 128, "block_n": 128, "block_k": 64, "num_blocks": num_blocks,
        "num_threads": 128, "cluster_m": 2, "cluster_n": 1, "load_box_a": (64, 128),
        "load_box_b": (64, 64), "swizzle_a": 128, "swizzle_b": 128,
    }  # fmt: skip
    call = {
        "a_ptr": a.data_ptr(), "b_ptr": b.data_ptr(), "d_ptr": d.data_ptr(), "c_ptr": 0,
        "group_info_ptr": 0, "rows": m, "m": m, "n": n, "k": k, "num_groups": 1, "lda": k,
        "ldb": k, "ldb_group": n * k, "ldd": n + 8, "ldc": n,
        "stream": torch.cuda.current_stream().cuda_stream,
    }  # fmt: skip

    def launcher(**overrides):
        args = {**shape, "smem_bytes": 100 * 1024, **overrides}
        return C.Bf16GemmLauncher(kernel, **args)

    before = C.get_pdl()
    try:
        for pdl, smem, c_ptr in ((False, 100 * 1024, 0), (True, 200 * 1024, c.data_ptr())):
            C.set_pdl(pdl)
            expected = [m, n, k, n + 8, n, 2, 128, 14 + (c_ptr != 0)]
            values = list({**call, "c_ptr": c_ptr}.values())
            d.zero_()
            launcher(smem_bytes=smem)(*values)
            torch.cuda.synchronize()
            assert d.view(num_blocks, 8).tolist() == [expected] * num_blocks
            # The bound launch (the plans' hot path) of the same integers writes the same.
            d.zero_()
            bound = launcher(smem_bytes=smem).bind(torch.cuda.current_device(), *values[5:-1])
            assert bound(*values[:5], values[-1]) is True
            torch.cuda.synchronize()
            assert d.view(num_blocks, 8).tolist() == [expected] * num_blocks
    finally:
        C.set_pdl(before)
    with pytest.raises(RuntimeError, match="cuKernelSetAttribute failed"):
        launcher(smem_bytes=1 << 20)(*call.values())
    with pytest.raises(ValueError, match="multiple of the cluster size"):
        launcher(num_blocks=3)(*call.values())
    with pytest.raises(ValueError, match="out of range"):
        launcher()(*{**call, "m": -1}.values())
