// Kernel parameters of the FP8 x FP4 family, shared by the host launcher (csrc/, g++) and the
// kernel (include/moegemm/impls/sm90_fp8_fp4_grouped_gemm.cuh, nvcc). Plain C++ with CUDA's
// driver types only. Passed as one `__grid_constant__` argument (TMA descriptors in parameter
// space).
#pragma once

#include <cuda.h>
#include <stdint.h>

namespace moegemm {

// D[r, n] = sum_k (A[r, k] sfa[r, k / 128]) (W[g(r), n, k] 2^(sfb[g(r), n, k / 32] - 127)),
// A E4M3, W packed E2M1 (two codes a byte, code 2i in the low nibble), D BF16.
struct Sm90Fp8Fp4GemmParams {
  CUtensorMap tma_a;  // A [rows, K] bytes: dims {K, rows}, box {128, BLOCK_M}, 128B swizzle
  // W [G, N, K/2] bytes: dims {K/2, N, G}, box {64, BLOCK_N, 1}, no swizzle; prepared weights:
  // the codes [G, Np, Kp/2] (N and K padded to 64 and 128), the same box.
  CUtensorMap tma_b;
  // Prepared weights only: the offsets words [G, 2 Kb, Np] uint32, dims {Np, 2 Kb, G}, box
  // {BLOCK_N, 1, 1} (the kernel loads the first plane; the second holds the scale bytes).
  CUtensorMap tma_sfb;
  // D [rows, N] BF16 for the TMA-store epilogue (dims {N, rows}, box {store_cols, 64}); left
  // unencoded when the kernel stores from registers.
  CUtensorMap tma_d;
  void* d;  // D [rows, N] BF16, row stride ldd elements
  // sfa[row, kb] at g * sfa_stride_group + (row - g * sfa_group_rows) * sfa_stride_row +
  // kb * sfa_stride_kb (floats): row the absolute A row, g its group (masked: sfa_group_rows =
  // rows per group; the contiguous layouts pass 0 and 0).
  const float* sfa;
  // sfb[g, n, block] at g * sfb_stride_group + n * sfb_stride_row + block (bytes); prepared
  // weights: the offsets tensor, sfb_stride_group bytes a group.
  const uint8_t* sfb;
  const int32_t* group_info;  // m_indices, cumulative end rows or valid rows; nullptr dense
  // The fused MoE layer's epilogues (Config::kMoeEpilogue, as Bf16GemmParams): FP32 bias
  // [G, N] in the kernel's row order or nullptr, the per-row scale [rows] of RowScale.
  const float* bias;
  const float* row_scale;
  // The convert-ahead kernel only (prepared weights, no transform ring; tma_b then describes
  // w8): the prepared codes, read by its converter warpgroup with plain loads (codes_stride_group
  // bytes a group), the E4M3 copy of the weights w8 [G, N, Kp] it writes, and one ready flag a
  // (group, 64-row block, k-block), index (g * N / 64 + block) * Kb + kb, then the converters'
  // claim counter: G * Kb * N / 64 + 1 words, zeroed by the caller.
  const uint8_t* codes;
  uint8_t* w8;
  uint32_t* ready;
  uint64_t codes_stride_group;
  uint64_t sfa_stride_group, sfb_stride_group;
  uint32_t sfa_stride_row, sfa_stride_kb, sfa_group_rows;
  uint32_t sfb_stride_row;
  uint32_t m;     // total rows (dense, contiguous) or rows per group (masked)
  uint32_t rows;  // A/D rows in all
  uint32_t n, k;
  uint32_t num_groups;
  uint32_t ldd;
};

}  // namespace moegemm
