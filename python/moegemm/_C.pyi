# ruff: noqa: N999  (the extension is named _C, like torch._C)
"""Type stub of the host runtime extension moegemm._C (built from csrc/).

Driver failures raise RuntimeError naming the driver call; bad arguments raise ValueError. No
function synchronizes or takes ownership of the memory its pointers refer to.
"""

DRIVER_API_VERSION: int

class Kernel:
    """A cubin holding exactly one kernel, loaded with cuLibraryLoadData; unloaded on deletion."""

    def __init__(self, cubin: bytes) -> None: ...
    @property
    def name(self) -> str: ...
    @property
    def num_regs(self) -> int:
        """Registers per thread on the current context's device."""

def cubin_kernel_count(cubin: bytes) -> int: ...
def device_properties(device: int) -> dict[str, int]:
    """Keys: num_sms, smem_per_block_optin, l2_size, cc_major, cc_minor."""

def encode_tma_desc(
    ptr: int,
    dtype: str,
    dims: list[int],
    strides_bytes: list[int],
    box: list[int],
    swizzle_bytes: int,
) -> bytes:
    """The 128-byte CUtensorMap. dtype: "bf16", "fp32", "u8" or "fp8"; dims and box innermost
    first; strides_bytes has len(dims) - 1 entries (dims 1..); swizzle_bytes: 0, 32, 64, 128."""

def set_pdl(enabled: bool) -> None: ...
def get_pdl() -> bool: ...
def launch_sm90_bf16_gemm(
    kernel: Kernel,
    a_ptr: int,
    b_ptr: int,
    d_ptr: int,
    c_ptr: int,
    m: int,
    n: int,
    k: int,
    lda: int,
    ldb: int,
    ldd: int,
    ldc: int,
    d_is_fp32: int,
    block_m: int,
    block_n: int,
    block_k: int,
    num_blocks: int,
    num_threads: int,
    smem_bytes: int,
    cluster_m: int,
    cluster_n: int,
    stream: int,
) -> None:
    """D[m, n] = A[m, k] . B[n, k]^T (+ C). Strides in elements; c_ptr 0 = no C; num_blocks a
    multiple of cluster_m * cluster_n (a 1-D cluster along x). Asynchronous."""
