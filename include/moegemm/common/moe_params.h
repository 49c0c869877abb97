// Parameters of the fused MoE layer's own kernels (include/moegemm/moe/), shared by the host
// launchers (csrc/moe_kernels.cpp) and the device code. Plain C++: no torch, no CuTe.
#pragma once

#include <stdint.h>

namespace moegemm {

// Route and gather (moe/route_gather.cuh). Slot s = t * top_k + j is token t's j-th choice; a
// slot whose expert id is outside [0, num_experts) is dropped (-1 is the engines' convention).
// Rows are the expert-sorted order of the kept slots: expert by expert, slots in increasing
// order within an expert, so the result does not depend on timing.
struct MoeRouteParams {
  const int32_t* topk_ids;     // [T, top_k]
  const float* topk_weights;   // [T, top_k]
  const void* x;               // [T, hidden] BF16, row stride ldx elements
  void* x_sorted;              // [T * top_k, hidden]: row r = x[token of row r], BF16, or FP8
                               // E4M3 (contiguous) with the kernel's kFp8 (MXFP4 experts)
  float* sfa_sorted;           // kFp8: [T * top_k, ceil(hidden / 128)] the rows' scales
  int32_t* offs;               // [num_experts] cumulative end row of each expert
  int32_t* row_slot;           // [T * top_k] slot of each row (rows past offs[E - 1]: unset)
  float* row_weight;           // [T * top_k] routing weight of each row
  int32_t* slot_row;           // [T * top_k] row of each slot, -1 where dropped
  uint32_t num_tokens, top_k, num_experts, hidden, ldx;
  uint32_t slots_per_cta;      // each CTA places and gathers one consecutive range of slots
};

// Per-token FP8 quantization of BF16 rows (moe/quantize_rows.cuh): dst [rows, cols] E4M3
// contiguous, scales [rows, ceil(cols / 128)]; rows at or past *row_bound (if given) skipped.
struct MoeQuantizeParams {
  const void* src;             // [rows, cols] BF16, row stride ld_src elements
  void* dst;
  float* scales;
  // nullptr: every row. group_rows 0: one bound, rows at or past *row_bound are skipped;
  // group_rows > 0 (the masked layout): row_bound[g] counts group g's valid rows (clamped to
  // [0, group_rows]) and row g * group_rows + r is skipped for r past it.
  const int32_t* row_bound;
  uint32_t rows, cols, ld_src, group_rows;
};

// Combine (moe/combine.cuh): out[t] = sum over j of y[slot_row[t * top_k + j]] in FP32, j in
// increasing order, dropped slots skipped; BF16 out (zeros for a token with every slot dropped).
struct MoeCombineParams {
  const void* y;               // [rows, hidden] BF16 (the second GEMM's rows, weights applied)
  const int32_t* slot_row;     // [T * top_k]
  void* out;                   // [T, hidden] BF16, row stride ldo elements
  uint32_t num_tokens, top_k, hidden, ldo;
};

}  // namespace moegemm
