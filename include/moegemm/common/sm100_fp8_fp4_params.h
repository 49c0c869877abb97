// Kernel parameters of the SM100 FP8 x FP4 kernel (include/moegemm/impls/
// sm100_fp8_fp4_grouped_gemm.cuh), shared by the host launcher (csrc/, g++) and the kernel
// (nvcc). Plain C++ with CUDA's driver types only; one `__grid_constant__` argument.
// Compiled and statically checked, not run on hardware.
#pragma once

#include <cuda.h>
#include <stdint.h>

namespace moegemm {

// D[r, n] = sum_k (A[r, k] sfa[r, k / 128]) (W[g(r), n, k] 2^(sfb[g(r), n, k / 32] - 127)),
// A E4M3, W E2M1, D BF16. The weights are the SM100 preparation's (prepare_mxfp4_weights(...,
// arch="sm_100f")): codes [G, N, Kp / 2] with Kp = K rounded up to 128 (zero codes past K) and
// scales as 32-bit words [G, Kp / 128, Np] (Np = N rounded up to 128; byte j of a word is the
// 32-block j of that 128 of K; inside each 128 rows, word 4 i + j holds row 32 j + i: the order
// tcgen05.cp 32x128b.warpx4 wants).
struct Sm100Fp8Fp4GemmParams {
  CUtensorMap tma_a;    // A [rows, K] bytes: dims {K, rows}, box {128, BLOCK_M}, 128B swizzle
  // W codes, CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B (16 packed codes land as 16 bytes: the
  // unpacked E2M1 layout kind::mxf8f6f4 reads): dims {Kp, N, G}, box {128, 128, 1}, 128B swizzle
  CUtensorMap tma_b;
  CUtensorMap tma_sfb;  // W scale words, UINT32: dims {Np, Kp / 128, G}, box {128, 1, 1}
  void* d;              // D [rows, N] BF16, row stride ldd elements
  // sfa[row, kb] (FP32, powers of two) at g * sfa_stride_group + (row - g * sfa_group_rows) *
  // sfa_stride_row + kb * sfa_stride_kb floats, as Sm90Fp8Fp4GemmParams.
  const float* sfa;
  const int32_t* group_info;  // m_indices, cumulative end rows or valid rows; nullptr dense
  uint64_t sfa_stride_group;
  uint32_t sfa_stride_row, sfa_stride_kb, sfa_group_rows;
  uint32_t m;     // total rows (dense, contiguous) or rows per group (masked)
  uint32_t rows;  // A/D rows in all
  uint32_t n, k;  // k: the logical K (a multiple of 32)
  uint32_t num_groups;
  uint32_t ldd;
  // The fused MoE layer's epilogues (Config::kMoeEpilogue; nullptr otherwise): the FP32 bias
  // [G, n] in the weights' row order and RowScale's per-row factor.
  const float* bias;
  const float* row_scale;
};

}  // namespace moegemm
