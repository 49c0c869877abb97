# ruff: noqa: N999  (the extension is named _C, like torch._C)
"""Type stub of the host runtime extension moegemm._C (built from csrc/).

Driver failures raise RuntimeError naming the driver call; bad arguments raise ValueError. No
function synchronizes or takes ownership of the memory its pointers refer to. Pointers are
device addresses as ints (`tensor.data_ptr()`), strides are in elements, `stream` is a raw
CUstream (`torch.cuda.current_stream().cuda_stream`).

A launcher's hot path is its bound launch: `launcher.bind(device, *integers)` (the integers are
everything between the pointers and the stream of the unbound call, fixed by a plan's
signature) returns a builtin function taking only the pointers and the stream; it launches
exactly what the unbound call with those integers launches and returns True, or returns False
having done nothing where an operand base (a, b, d, c) is off a 16-byte boundary or the current
context is not on `device` (the caller's full checks then name the problem). The integers are
checked once, at bind time (ValueError); a call argument that is not an int in [0, 2**64)
raises TypeError.

tests/unit/test_c_stub.py checks that this file declares exactly what _C exposes.
"""

from collections.abc import Callable

DRIVER_API_VERSION: int

class Kernel:
    """A cubin holding exactly one kernel, loaded with cuLibraryLoadData; unloaded on deletion."""

    def __init__(self, cubin: bytes) -> None: ...
    @property
    def name(self) -> str:
        """The kernel's (mangled) name."""

    @property
    def num_regs(self) -> int:
        """Registers per thread on the current context's device."""

def cubin_kernel_count(cubin: bytes) -> int:
    """Number of kernels in a cubin (loads and unloads it)."""

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

def set_pdl(enabled: bool) -> None:
    """Turn programmatic dependent launch on or off for later launches."""

def get_pdl() -> bool:
    """Whether launches use programmatic dependent launch."""

class Bf16GemmLauncher:
    """Launches sm90_bf16_grouped_gemm or its swap-AB twin (dense or m-grouped) with the kernel
    and its launch shape bound; keeps `kernel` alive. The cluster shape must be the compiled
    one: 1x1, 2x1 or 1x2."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None:
        """num_blocks: persistent CTAs, a multiple of cluster_m * cluster_n; with a cluster it
        is clamped to the clusters that fit at once (see num_blocks). store_cols: the TMA-store
        epilogue's box width in columns, 0 = stores from registers."""

    def __call__(
        self,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        c_ptr: int,
        group_info_ptr: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        ldc: int,
        stream: int,
        /,
    ) -> None:
        """D[r, n] = A[r, k] . B[g(r), n, k]^T (+ C). rows: A/D rows in all (masked: groups * m);
        m: rows (masked: rows per group); c_ptr and group_info_ptr 0 when absent. An empty
        output (rows, n or num_groups 0) launches nothing. Asynchronous."""

    def bind(
        self,
        device: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        ldc: int,
        /,
    ) -> Callable[[int, int, int, int, int, int], bool]:
        """launch(a_ptr, b_ptr, d_ptr, c_ptr, group_info_ptr, stream, /) -> bool: the call with
        these integers bound for CUDA device `device` (checked here: out of range or too many
        tiles is a ValueError)."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch: the planned count, clamped to the clusters that fit at once."""

class Bf16KGroupedLauncher:
    """Launches sm90_bf16_k_grouped_gemm, or its SM100 twin sm100_bf16_k_grouped_gemm (same
    parameters and TMA boxes), with the kernel and its launch shape bound; keeps `kernel`
    alive. Takes no clusters (cluster_m = cluster_n = 1)."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        c_ptr: int,
        offs_ptr: int,
        m: int,
        n: int,
        num_tokens: int,
        num_groups: int,
        lda: int,
        ldb: int,
        stream: int,
        /,
    ) -> None:
        """D[g] = A[rows of g]^T . B[rows of g] (+ C[g]), D and C FP32 [num_groups, m, n]; A
        [num_tokens, m] and B [num_tokens, n] with row strides lda, ldb; offs: cumulative end
        row of each group. An empty output launches nothing. Asynchronous."""

    def bind(
        self,
        device: int,
        m: int,
        n: int,
        num_tokens: int,
        num_groups: int,
        lda: int,
        ldb: int,
        /,
    ) -> Callable[[int, int, int, int, int, int], bool]:
        """launch(a_ptr, b_ptr, d_ptr, c_ptr, offs_ptr, stream, /) -> bool: the call with these
        integers bound for CUDA device `device` (checked here)."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch (the planned count: no clusters, no clamp)."""

class Sm90Fp8Fp4GemmLauncher:
    """Launches sm90_fp8_fp4_grouped_gemm (dense or m-grouped; E4M3 activations with FP32
    scales per 128 of K, MXFP4 weights) with the kernel and its launch shape bound; keeps
    `kernel` alive. One CTA per tile (cluster_m = cluster_n = 1), block_k 128."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        sfa_ptr: int,
        sfb_ptr: int,
        group_info_ptr: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        sfb_stride_row: int,
        stream: int,
        /,
    ) -> None:
        """D[r, n] = sum_k A[r, k] sfa[r, k/128] W[g(r), n, k] 2^(sfb[g(r), n, k/32] - 127), D
        BF16. a/b strides in bytes (b packed, K/2 bytes a row), ldd in elements, sfa strides in
        floats (sfa[row] at g * stride_group + (row - g * group_rows) * stride_row + kb *
        stride_kb), sfb strides in bytes. An empty output launches nothing. Asynchronous."""

    def bind(
        self,
        device: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        sfb_stride_row: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int], bool]:
        """launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, group_info_ptr, stream, /) -> bool: the
        call with these integers bound for CUDA device `device` (checked here)."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch (the planned count: no clusters, no clamp)."""

class Sm90Fp8Fp4TableGemmLauncher:
    """Launches sm90_fp8_fp4_swap_ab_gemm on prepared weights (prepare_mxfp4_weights: b the thread-ordered
    codes, rows Kp / 2 bytes apart; sfb the offsets words int32 [G, 2 KB, N]), with the kernel and its launch shape bound; keeps `kernel`
    alive. Arguments as Sm90Fp8Fp4GemmLauncher's, sfb strides in bytes (group, plane row)."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        sfa_ptr: int,
        sfb_ptr: int,
        group_info_ptr: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        sfb_stride_row: int,
        stream: int,
        /,
    ) -> None:
        """D[r, n] = sum_k A[r, k] sfa[r, k/128] W[g(r), n, k] 2^(sfb[g(r), n, k/32] - 127), D
        BF16. a/b strides in bytes (b packed, K/2 bytes a row), ldd in elements, sfa strides in
        floats (sfa[row] at g * stride_group + (row - g * group_rows) * stride_row + kb *
        stride_kb), sfb strides in bytes. An empty output launches nothing. Asynchronous."""

    def bind(
        self,
        device: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        sfb_stride_row: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int], bool]:
        """launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, group_info_ptr, stream, /) -> bool: the
        call with these integers bound for CUDA device `device` (checked here)."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch (the planned count: no clusters, no clamp)."""

class Sm100Fp8Fp4GemmLauncher:
    """Launches sm100_fp8_fp4_grouped_gemm (dense or m-grouped; E4M3 activations with FP32
    power-of-two scales per 128 of K, MXFP4 weights in the SM100 preparation) with the kernel
    and its launch shape bound; keeps `kernel` alive. One CTA per tile, block_k and block_n 128,
    register stores. Compiled and statically checked, not run on hardware."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        sfa_ptr: int,
        sfb_ptr: int,
        group_info_ptr: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        stream: int,
        /,
    ) -> None:
        """D[r, n] = sum_k A[r, k] sfa[r, k/128] W[g(r), n, k] 2^(sfb[g(r), n, k/32] - 127), D
        BF16. b the prepared codes [G, N, Kp/2] (ldb, ldb_group in bytes, multiples of 32), sfb
        the prepared scale words [G, Kp/128, Np] (sfb_stride_group in words), a strides in
        bytes, ldd in elements, sfa strides in floats (as Sm90Fp8Fp4GemmLauncher). An empty
        output launches nothing. Asynchronous."""

    def bind(
        self,
        device: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int], bool]:
        """launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, group_info_ptr, stream, /) -> bool: the
        call with these integers bound for CUDA device `device` (checked here)."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch (the planned count: no clusters, no clamp)."""

class Sm100Fp8Fp4MoeGemmLauncher:
    """Launches sm100_fp8_fp4_grouped_gemm built with a MoE epilogue (the fused layer's SwiGLU
    or RowScale on swapped tiles), Sm100Fp8Fp4GemmLauncher's call plus the FP32 bias [G, n] and
    row-scale pointers (0 when absent), in Sm90Fp8Fp4MoeGemmLauncher's pointer order. Compiled
    and statically checked, not run on hardware."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        sfa_ptr: int,
        sfb_ptr: int,
        bias_ptr: int,
        row_scale_ptr: int,
        group_info_ptr: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        stream: int,
        /,
    ) -> None:
        """D[r, n] = sum_k A[r, k] sfa[r, k/128] W[g(r), n, k] 2^(sfb[g(r), n, k/32] - 127), D
        BF16. b the prepared codes [G, N, Kp/2] (ldb, ldb_group in bytes, multiples of 32), sfb
        the prepared scale words [G, Kp/128, Np] (sfb_stride_group in words), a strides in
        bytes, ldd in elements, sfa strides in floats (as Sm90Fp8Fp4GemmLauncher). An empty
        output launches nothing. Asynchronous."""

    def bind(
        self,
        device: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int, int, int], bool]:
        """launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, bias_ptr, row_scale_ptr, group_info_ptr,
        stream, /) -> bool: the call with these integers bound for CUDA device `device`."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch (the planned count: no clusters, no clamp)."""

class Bf16MoeGemmLauncher:
    """Launches sm90_bf16_grouped_gemm (or its swap-AB twin) built with a fused-MoE epilogue
    (Config::kMoeEpilogue: SwiGLU, D with n / 2 columns, or RowScale); register or TMA stores
    (store_cols), no clusters."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        bias_ptr: int,
        row_scale_ptr: int,
        group_info_ptr: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        d_cols: int,
        stream: int,
        /,
    ) -> None:
        """As Bf16GemmLauncher without C, plus FP32 bias [G, n] and row scale [rows] pointers (0:
        absent). An empty output launches nothing. Asynchronous."""

    def bind(
        self,
        device: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        d_cols: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int], bool]:
        """launch(a_ptr, b_ptr, d_ptr, bias_ptr, row_scale_ptr, group_info_ptr, stream, /) -> bool."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch (the planned count: no clusters, no clamp)."""

class MoeRouteGatherLauncher:
    """Launches moe_route_gather (include/moegemm/moe/route_gather.cuh): the fused MoE layer's
    routing and gather; block_m/n/k are unused (pass 1)."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        x_ptr: int,
        x_sorted_ptr: int,
        topk_ids_ptr: int,
        topk_weights_ptr: int,
        offs_ptr: int,
        row_slot_ptr: int,
        row_weight_ptr: int,
        slot_row_ptr: int,
        sfa_sorted_ptr: int,
        num_tokens: int,
        top_k: int,
        num_experts: int,
        hidden: int,
        ldx: int,
        slots_per_cta: int,
        stream: int,
        /,
    ) -> None:
        """Routes T * top_k slots to experts and gathers x into expert order (MoeRouteParams),
        as BF16 or, built with kFp8, quantized to FP8 with its scales in sfa_sorted (0 for
        BF16). No slots launches nothing. Asynchronous."""

    def bind(
        self,
        device: int,
        num_tokens: int,
        top_k: int,
        num_experts: int,
        hidden: int,
        ldx: int,
        slots_per_cta: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int, int, int, int], bool]:
        """launch(x_ptr, ..., slot_row_ptr, stream, /) -> bool."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch."""

class MoeQuantizeRowsLauncher:
    """Launches moe_quantize_rows (include/moegemm/moe/quantize_rows.cuh): BF16 rows to FP8 E4M3
    per 128 columns with FP32 scales; block_m/n/k are unused (pass 1)."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        src_ptr: int,
        dst_ptr: int,
        scales_ptr: int,
        row_bound_ptr: int,
        rows: int,
        cols: int,
        ld_src: int,
        group_rows: int,
        stream: int,
        /,
    ) -> None:
        """dst, scales = per_token_cast_to_fp8(src) for rows below *row_bound (0: all rows); with
        group_rows > 0, row_bound holds each group_rows-row group's count (the masked layout)
        and rows past it are skipped. Asynchronous."""

    def bind(
        self,
        device: int,
        rows: int,
        cols: int,
        ld_src: int,
        group_rows: int,
        /,
    ) -> Callable[[int, int, int, int, int], bool]:
        """launch(src_ptr, dst_ptr, scales_ptr, row_bound_ptr, stream, /) -> bool."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch."""

class MoeCombineLauncher:
    """Launches moe_combine (include/moegemm/moe/combine.cuh): each token's top_k rows summed in
    FP32 in choice order; block_m/n/k are unused (pass 1)."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        y_ptr: int,
        out_ptr: int,
        slot_row_ptr: int,
        num_tokens: int,
        top_k: int,
        hidden: int,
        ldo: int,
        stream: int,
        /,
    ) -> None:
        """out[t] = sum over j of y[slot_row[t * top_k + j]] (MoeCombineParams). Asynchronous."""

    def bind(
        self,
        device: int,
        num_tokens: int,
        top_k: int,
        hidden: int,
        ldo: int,
        /,
    ) -> Callable[[int, int, int, int], bool]:
        """launch(y_ptr, out_ptr, slot_row_ptr, stream, /) -> bool."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch."""

class Sm90Fp8Fp4MoeGemmLauncher:
    """Launches sm90_fp8_fp4_grouped_gemm (or its decode twin) built with a fused-MoE epilogue
    (SwiGLU or RowScale), register stores; the FP8 x FP4 launcher's arguments plus bias and
    row-scale pointers."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        sfa_ptr: int,
        sfb_ptr: int,
        bias_ptr: int,
        row_scale_ptr: int,
        group_info_ptr: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        sfb_stride_row: int,
        stream: int,
        /,
    ) -> None:
        """As Sm90Fp8Fp4GemmLauncher, plus FP32 bias [G, n] and row scale [rows] (0: absent).
        Asynchronous."""

    def bind(
        self,
        device: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        sfb_stride_row: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int, int, int], bool]:
        """launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, bias_ptr, row_scale_ptr,
        group_info_ptr, stream, /) -> bool."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch (the planned count: no clusters, no clamp)."""

class Sm90Fp8Fp4TableMoeGemmLauncher:
    """Sm90Fp8Fp4MoeGemmLauncher's twin on prepared weights (the table kernel built with a
    MoE epilogue): arguments as there, b and sfb as Sm90Fp8Fp4TableGemmLauncher's."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        a_ptr: int,
        b_ptr: int,
        d_ptr: int,
        sfa_ptr: int,
        sfb_ptr: int,
        bias_ptr: int,
        row_scale_ptr: int,
        group_info_ptr: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        sfb_stride_row: int,
        stream: int,
        /,
    ) -> None:
        """As Sm90Fp8Fp4GemmLauncher, plus FP32 bias [G, n] and row scale [rows] (0: absent).
        Asynchronous."""

    def bind(
        self,
        device: int,
        rows: int,
        m: int,
        n: int,
        k: int,
        num_groups: int,
        lda: int,
        ldb: int,
        ldb_group: int,
        ldd: int,
        sfa_stride_group: int,
        sfa_stride_row: int,
        sfa_stride_kb: int,
        sfa_group_rows: int,
        sfb_stride_group: int,
        sfb_stride_row: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int, int, int], bool]:
        """launch(a_ptr, b_ptr, d_ptr, sfa_ptr, sfb_ptr, bias_ptr, row_scale_ptr,
        group_info_ptr, stream, /) -> bool."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch (the planned count: no clusters, no clamp)."""

class EpDispatchLauncher:
    """Launches ep_dispatch (include/moegemm/ep/dispatch.cuh): expert-parallel dispatch of
    (token, choice) rows into the owners' masked layout over peer pointers; block_m/n/k are
    unused (pass 1)."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        x_ptr: int,
        topk_ids_ptr: int,
        topk_weights_ptr: int,
        peer_base_ptr: int,
        state_ptr: int,
        masked_m_ptr: int,
        slot_dest_ptr: int,
        rank: int,
        world_size: int,
        num_tokens: int,
        top_k: int,
        num_experts: int,
        experts_per_rank: int,
        hidden: int,
        ldx: int,
        max_m: int,
        slots_per_rank: int,
        slots_per_cta: int,
        timeout_ns: int,
        off_x_recv: int,
        off_sfa_recv: int,
        off_recv_weight: int,
        off_recv_src: int,
        off_counts: int,
        off_count_flag: int,
        off_dispatch_arrive: int,
        off_combine_arrive: int,
        off_combine_recv: int,
        stream: int,
        /,
    ) -> None:
        """Counts exchange, then rows pushed (EpDispatchParams); launches even with no tokens
        (every rank must signal). Asynchronous."""

    def bind(
        self,
        device: int,
        rank: int,
        world_size: int,
        num_tokens: int,
        top_k: int,
        num_experts: int,
        experts_per_rank: int,
        hidden: int,
        ldx: int,
        max_m: int,
        slots_per_rank: int,
        slots_per_cta: int,
        timeout_ns: int,
        off_x_recv: int,
        off_sfa_recv: int,
        off_recv_weight: int,
        off_recv_src: int,
        off_counts: int,
        off_count_flag: int,
        off_dispatch_arrive: int,
        off_combine_arrive: int,
        off_combine_recv: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int, int], bool]:
        """launch(x_ptr, ..., slot_dest_ptr, stream, /) -> bool."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch."""

class EpCombineLauncher:
    """Launches ep_combine (include/moegemm/ep/combine.cuh): expert rows pushed back to their
    source slots, then each token's rows summed in FP32 in choice order; block_m/n/k are unused
    (pass 1)."""

    def __init__(
        self,
        kernel: Kernel,
        block_m: int,
        block_n: int,
        block_k: int,
        num_blocks: int,
        num_threads: int,
        smem_bytes: int,
        cluster_m: int,
        cluster_n: int,
        store_cols: int = 0,
    ) -> None: ...
    def __call__(
        self,
        y_ptr: int,
        slot_dest_ptr: int,
        masked_m_ptr: int,
        peer_base_ptr: int,
        state_ptr: int,
        out_ptr: int,
        rank: int,
        world_size: int,
        num_tokens: int,
        top_k: int,
        experts_per_rank: int,
        hidden: int,
        ldo: int,
        max_m: int,
        slots_per_rank: int,
        timeout_ns: int,
        off_x_recv: int,
        off_sfa_recv: int,
        off_recv_weight: int,
        off_recv_src: int,
        off_counts: int,
        off_count_flag: int,
        off_dispatch_arrive: int,
        off_combine_arrive: int,
        off_combine_recv: int,
        stream: int,
        /,
    ) -> None:
        """EpCombineParams; launches even with no tokens. Asynchronous."""

    def bind(
        self,
        device: int,
        rank: int,
        world_size: int,
        num_tokens: int,
        top_k: int,
        experts_per_rank: int,
        hidden: int,
        ldo: int,
        max_m: int,
        slots_per_rank: int,
        timeout_ns: int,
        off_x_recv: int,
        off_sfa_recv: int,
        off_recv_weight: int,
        off_recv_src: int,
        off_counts: int,
        off_count_flag: int,
        off_dispatch_arrive: int,
        off_combine_arrive: int,
        off_combine_recv: int,
        /,
    ) -> Callable[[int, int, int, int, int, int, int], bool]:
        """launch(y_ptr, ..., out_ptr, stream, /) -> bool."""

    @property
    def num_blocks(self) -> int:
        """CTAs per launch."""
