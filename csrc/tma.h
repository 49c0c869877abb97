// TMA descriptor encoding (cuTensorMapEncodeTiled) shared by every launcher.
#pragma once

#include <cuda.h>
#include <stdint.h>

namespace moegemm {

// Encodes a tiled tensor map over `rank` (1..5) dimensions, innermost first. `strides_bytes` has
// rank - 1 entries: the byte strides of dims 1.., as cuTensorMapEncodeTiled wants them.
// Out-of-bounds boxes read as zero (OOB_FILL_NONE), which is what lets K tails and M/N edges work
// without padding. Throws std::runtime_error naming the call and every argument on failure.
CUtensorMap make_tma_desc(void* ptr, CUtensorMapDataType dtype, int rank, const uint64_t* dims,
                          const uint64_t* strides_bytes, const uint32_t* box,
                          CUtensorMapSwizzle swizzle);

// The common case of every GEMM operand: a row-major [rows, cols] matrix whose rows are `ld`
// elements apart, tiled in boxes of [box_rows, box_cols] (cols are the contiguous dimension).
CUtensorMap make_tma_2d(void* ptr, CUtensorMapDataType dtype, uint32_t elem_bytes, uint64_t rows,
                        uint64_t cols, uint64_t ld, uint32_t box_rows, uint32_t box_cols,
                        CUtensorMapSwizzle swizzle);

// A stack of `batch` such matrices, `batch_stride` elements apart (grouped weights [G, N, K]);
// the box covers one matrix of the batch.
CUtensorMap make_tma_3d(void* ptr, CUtensorMapDataType dtype, uint32_t elem_bytes, uint64_t batch,
                        uint64_t rows, uint64_t cols, uint64_t ld, uint64_t batch_stride,
                        uint32_t box_rows, uint32_t box_cols, CUtensorMapSwizzle swizzle);

// 0, 32, 64, 128 bytes -> the swizzle enum; throws std::invalid_argument (ValueError) otherwise.
CUtensorMapSwizzle swizzle_from_bytes(int bytes);

}  // namespace moegemm
