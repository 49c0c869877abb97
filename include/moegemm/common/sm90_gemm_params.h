// Kernel parameters shared by the host launchers (csrc/, compiled by g++) and the device kernels
// (include/moegemm/impls/, compiled by nvcc). Passed by value as one `__grid_constant__` argument,
// so the TMA descriptors live in parameter space where `cp.async.bulk.tensor` can read them.
// Plain C++ with CUDA's driver types only: no torch, no CuTe.
#pragma once

#include <cuda.h>
#include <stdint.h>

namespace moegemm {

// D[r, n] = sum_k A[r, k] * B[g(r), n, k] (+ C[r, n]); A and B K-major BF16. The dense GEMM is
// the one-group case.
struct Bf16GemmParams {
  CUtensorMap tma_a;  // A [rows, K]: dims {K, rows}, box {BLOCK_K, BLOCK_M}, 128B swizzle
  CUtensorMap tma_b;  // B [G, N, K]: dims {K, N, G}, box {BLOCK_K, BLOCK_N, 1}, 128B swizzle
  // D [rows, N] BF16 for the TMA-store epilogue: dims {N, rows}, box {store_cols, 64}, swizzle of
  // store_cols * 2 bytes. Left unencoded when the kernel stores from registers.
  CUtensorMap tma_d;
  void* d;            // D [rows, N], row stride ldd elements; BF16 or FP32 by template
  const float* c;     // C [rows, N] FP32, row stride ldc elements; nullptr when absent
  // Layout integers on the device: m_indices [rows] (contiguous), cumulative end rows [G]
  // (offsets) or valid rows per group [G] (masked); nullptr for the dense GEMM.
  const int32_t* group_info;
  // The fused MoE layer's epilogues (Config::kMoeEpilogue): FP32 bias [G, N] (weight rows in the
  // kernel's order) or nullptr, and the per-row scale [rows] of RowScale. Unread otherwise.
  const float* bias;
  const float* row_scale;
  uint32_t m;     // total rows (dense, contiguous, offsets) or rows per group (masked)
  uint32_t rows;  // A/D rows in all (masked: groups * m); TMA stores clip at this bound
  uint32_t n, k;
  uint32_t num_groups;
  uint32_t ldd, ldc;
};

// Weight gradients: D[g, m, n] = sum over rows t of group g of A[t, m] * B[t, n] (+ C[g, m, n]).
// A and B are MN-major (the reduction runs over their rows), D and C FP32.
struct Bf16KGroupedParams {
  CUtensorMap tma_a;  // A [T, M]: dims {M, T}, box {64, BLOCK_K}, 128B swizzle
  CUtensorMap tma_b;  // B [T, N]: dims {N, T}, box {64, BLOCK_K}, 128B swizzle
  // D as [G * M, N] FP32 for the TMA-store epilogue: box {32, 64}, 128B swizzle; unencoded when
  // the kernel stores from registers.
  CUtensorMap tma_d;
  float* d;           // D [G, M, N] contiguous
  const float* c;     // C [G, M, N] contiguous; nullptr when absent
  const int32_t* offs;  // cumulative end row of each group [G]
  uint32_t m, n, num_tokens;
  uint32_t num_groups;
};

}  // namespace moegemm
