// TMA descriptor encoding (cuTensorMapEncodeTiled), memoised, shared by every launcher.
#pragma once

#include <cuda.h>
#include <stdint.h>

namespace moegemm {

// Everything a tiled tensor map is encoded from: `rank` (1..5) dimensions, innermost first;
// `strides_bytes` holds the byte strides of dims 1.., as cuTensorMapEncodeTiled wants them.
// A plain aggregate, built on the stack by the launchers (no allocation on the hot path).
struct TmaView {
  void* ptr;
  CUtensorMapDataType dtype;
  int rank;
  uint64_t dims[5];
  uint64_t strides_bytes[4];
  uint32_t box[5];
  CUtensorMapSwizzle swizzle;
};

// Encodes a tiled tensor map. Out-of-bounds boxes read as zero (OOB_FILL_NONE), which is what
// lets K tails and M/N edges work without padding. Repeated encodes of the same view are served
// from a small per-thread memo (see tma.cpp). Throws std::runtime_error naming the call and every
// argument on failure, std::invalid_argument for a rank outside 1..5.
CUtensorMap make_tma_desc(void* ptr, CUtensorMapDataType dtype, int rank, const uint64_t* dims,
                          const uint64_t* strides_bytes, const uint32_t* box,
                          CUtensorMapSwizzle swizzle);

// The same for a view, written into `out` (a params field) straight from the memo.
void encode_tma_view(const TmaView& view, CUtensorMap& out);

// The common case of every GEMM operand: a row-major [rows, cols] matrix whose rows are `ld`
// elements apart, tiled in boxes of [box_rows, box_cols] (cols are the contiguous dimension).
inline TmaView tma_view_2d(void* ptr, CUtensorMapDataType dtype, uint32_t elem_bytes,
                           uint64_t rows, uint64_t cols, uint64_t ld, uint32_t box_rows,
                           uint32_t box_cols, CUtensorMapSwizzle swizzle) {
  TmaView view;
  view.ptr = ptr;
  view.dtype = dtype;
  view.rank = 2;
  view.dims[0] = cols;
  view.dims[1] = rows;
  view.strides_bytes[0] = ld * elem_bytes;
  view.box[0] = box_cols;
  view.box[1] = box_rows;
  view.swizzle = swizzle;
  return view;
}

// A stack of `batch` such matrices, `batch_stride` elements apart (grouped weights [G, N, K]);
// the box covers one matrix of the batch.
inline TmaView tma_view_3d(void* ptr, CUtensorMapDataType dtype, uint32_t elem_bytes,
                           uint64_t batch, uint64_t rows, uint64_t cols, uint64_t ld,
                           uint64_t batch_stride, uint32_t box_rows, uint32_t box_cols,
                           CUtensorMapSwizzle swizzle) {
  TmaView view = tma_view_2d(ptr, dtype, elem_bytes, rows, cols, ld, box_rows, box_cols, swizzle);
  view.rank = 3;
  view.dims[2] = batch;
  view.strides_bytes[1] = batch_stride * elem_bytes;
  view.box[2] = 1;
  return view;
}

// 0, 32, 64, 128 bytes -> the swizzle enum; throws std::invalid_argument (ValueError) otherwise.
CUtensorMapSwizzle swizzle_from_bytes(int bytes);

// One TMA box of a planned kernel, as its config states it (StorageConfig in
// python/moegemm/heuristics/config.py): the extent in elements of the tensor, innermost first,
// and the swizzle span in bytes (0: none). inner == 0: the operand takes no TMA map (D stored
// from registers, scales the producer copies itself). The family encodes its maps with the boxes
// it is given; the kernel's static_asserts tie them to its compile-time tile, and the heuristics'
// is_legal checks a config's boxes once, so nothing here derives a box again.
struct TmaBox {
  int64_t inner = 0, outer = 0, swizzle = 0;

  bool present() const { return inner != 0; }
};

// A row-major operand tiled in a config's box (rows: box.outer, cols: box.inner).
inline TmaView tma_view_2d(void* ptr, CUtensorMapDataType dtype, uint32_t elem_bytes,
                           uint64_t rows, uint64_t cols, uint64_t ld, const TmaBox& box) {
  return tma_view_2d(ptr, dtype, elem_bytes, rows, cols, ld, static_cast<uint32_t>(box.outer),
                     static_cast<uint32_t>(box.inner),
                     swizzle_from_bytes(static_cast<int>(box.swizzle)));
}

// A stack of them (grouped weights [G, rows, cols]) in a config's box.
inline TmaView tma_view_3d(void* ptr, CUtensorMapDataType dtype, uint32_t elem_bytes,
                           uint64_t batch, uint64_t rows, uint64_t cols, uint64_t ld,
                           uint64_t batch_stride, const TmaBox& box) {
  return tma_view_3d(ptr, dtype, elem_bytes, batch, rows, cols, ld, batch_stride,
                     static_cast<uint32_t>(box.outer), static_cast<uint32_t>(box.inner),
                     swizzle_from_bytes(static_cast<int>(box.swizzle)));
}

}  // namespace moegemm
