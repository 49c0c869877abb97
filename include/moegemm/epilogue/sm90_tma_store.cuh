// Epilogue that stages a warpgroup's BF16 results in shared memory and writes them with TMA
// stores, so the math warpgroup goes back to the next tile's wgmma while the copy engine drains
// the previous tile to global memory.
//
// Staging layout (one buffer per math warpgroup, reused every tile): for each m64 atom, the
// BLOCK_N columns are cut into chunks of kStoreCols columns (kStoreCols * 2 = 32, 64 or 128
// bytes per row); a chunk is 64 rows x that many bytes, swizzled the way the TMA store's
// tensor map expects (16-byte unit index XOR the row bits above the 128-byte line), which also
// keeps every stmatrix phase free of bank conflicts. One TMA store per chunk, box
// {kStoreCols, 64}; tensor-map bounds clip the N tail and the tensor's last rows.
//
// Synchronisation, per tile, inside the warpgroup (named barrier `barrier_id`, 128 threads):
//   1. thread 0 waits until the previous tile's stores have finished reading the buffer;
//   2. barrier; every thread writes its accumulators with stmatrix; async-proxy fence;
//   3. barrier; thread 0 issues the stores and commits them as one bulk group.
// The caller must call tma_store_drain() from thread 0 before the CTA exits.
// Both paths apply an epilogue functor (epilogue/functors.cuh) to each pair before staging it.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

#include <type_traits>

#include <moegemm/epilogue/functors.cuh>
#include <moegemm/epilogue/sm90_register_store.cuh>  // pack_bf16x2
#include <moegemm/ptx/barrier.cuh>
#include <moegemm/ptx/smem.cuh>
#include <moegemm/ptx/tma.cuh>

namespace moegemm::sm90 {

template <uint32_t BLOCK_N, uint32_t kStoreCols>
struct TmaStoreLayout {
  static_assert(kStoreCols == 16 || kStoreCols == 32 || kStoreCols == 64,
                "a chunk row must be one 32-, 64- or 128-byte swizzle span");
  static_assert(BLOCK_N % kStoreCols == 0, "chunks must tile the block's columns");
  static constexpr uint32_t kSpanBytes = kStoreCols * 2;
  static constexpr uint32_t kChunkBytes = 64 * kSpanBytes;
  static constexpr uint32_t kNumChunks = BLOCK_N / kStoreCols;
  static constexpr uint32_t kAtomBytes = kNumChunks * kChunkBytes;  // one m64 x BLOCK_N slab

  // Byte offset of (row, col) inside an atom's staging slab, swizzled as TMA reads it. The slab
  // must start on a 1024-byte boundary.
  __device__ __forceinline__ static uint32_t offset(uint32_t row, uint32_t col) {
    const uint32_t linear =
        (col / kStoreCols) * kChunkBytes + row * kSpanBytes + (col % kStoreCols) * 2;
    return linear ^ (((linear >> 7) & (kSpanBytes / 16 - 1)) << 4);
  }
};

// Steps 2-3's end for a warpgroup that has staged kAtomsM atoms of layout L in `smem_buf`
// (first output column col0): the async-proxy fence, the barrier, then thread 0 issues one TMA
// store per chunk and commits them as one bulk group.
template <typename L, uint32_t kStoreCols, uint32_t kAtomsM>
__device__ __forceinline__ void issue_staged_stores(uint8_t* smem_buf, const void* tma_d,
                                                    uint32_t row0, uint32_t col0,
                                                    uint32_t barrier_id) {
  fence_async_shared();
  named_barrier_sync(barrier_id, 128);
  if (threadIdx.x % 128 == 0) {
#pragma unroll
    for (uint32_t a = 0; a < kAtomsM; ++a)
#pragma unroll
      for (uint32_t c = 0; c < L::kNumChunks; ++c)
        tma_store_2d(tma_d, smem_buf + a * L::kAtomBytes + c * L::kChunkBytes,
                     static_cast<int32_t>(col0 + c * kStoreCols),
                     static_cast<int32_t>(row0 + 64 * a));
    tma_store_commit();
  }
}

// Writes kAtomsM m64 x BLOCK_N accumulator blocks (rows row0 + 64 a) through `smem_buf`
// (kAtomsM * kAtomBytes, 1024-aligned). All 128 threads of the warpgroup call it. The rows are
// either all inside the output or the output's last (TMA clips them), so the functor must read
// no memory, unless the caller guarantees every row lies inside (kRowsValid: the fused MoE
// layer's RowScale, whose functor also bounds its columns).
template <uint32_t BLOCK_N, uint32_t kStoreCols, uint32_t kAtomsM, bool kRowsValid = false,
          typename Epilogue>
__device__ __forceinline__ void store_accumulators_tma(const float (*acc)[BLOCK_N / 2],
                                                       uint8_t* smem_buf, const void* tma_d,
                                                       uint32_t row0, uint32_t col0,
                                                       uint32_t barrier_id,
                                                       const Epilogue& epilogue) {
  static_assert(!Epilogue::kReadsMemory || kRowsValid,
                "TMA-clipped rows may lie past the output");
  using L = TmaStoreLayout<BLOCK_N, kStoreCols>;
  const uint32_t t = threadIdx.x % 128;
  if (t == 0) tma_store_wait_read();
  named_barrier_sync(barrier_id, 128);

  // stmatrix x4 stores a 16 x 16 block: matrices (rows 0-7 | 8-15) x (cols 0-7 | 8-15), fed by
  // registers acc[8 jj + 0..7] of the wgmma layout; lane l addresses row l % 8 of matrix l / 8.
  const uint32_t lane = t % 32;
  const uint32_t row = 16 * (t / 32) + (lane % 8) + 8 * ((lane / 8) % 2);
  const uint32_t col_in_16 = 8 * (lane / 16);
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_buf));
#pragma unroll
  for (uint32_t a = 0; a < kAtomsM; ++a) {
#pragma unroll
    for (uint32_t jj = 0; jj < BLOCK_N / 16; ++jj) {
      float v[8];
#pragma unroll
      for (uint32_t i = 0; i < 8; ++i) v[i] = acc[a][8 * jj + i];
      // v[4 s + 2 h + 0..1]: slice 2 jj + s, row r + 8 h of the wgmma layout.
      const uint32_t r = row0 + 64 * a + 16 * (t / 32) + lane / 4;
#pragma unroll
      for (uint32_t i = 0; i < 8; i += 2)
        epilogue(v[i], v[i + 1], r + 8 * ((i / 2) % 2),
                 col0 + 8 * (2 * jj + i / 4) + 2 * (lane % 4));
      stmatrix_x4(smem_base + a * L::kAtomBytes + L::offset(row, 16 * jj + col_in_16),
                  pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]),
                  pack_bf16x2(v[6], v[7]));
    }
  }
  issue_staged_stores<L, kStoreCols, kAtomsM>(smem_buf, tma_d, row0, col0, barrier_id);
}

}  // namespace moegemm::sm90

namespace moegemm::sm90 {

// FP32 results (k-grouped weight gradients) through two 8 KB chunk buffers per warpgroup: each
// chunk is 64 rows x 32 FP32 columns (128-byte rows, 128B swizzle), written with 8-byte shared
// stores (two wavefronts per warp instruction, the minimum) and sent by one TMA store while the
// warpgroup fills the other buffer. One named barrier per chunk: before it, thread 0 waits
// until every earlier chunk's store has read its buffer, so after it the buffer the next chunk
// writes is free. The functor sees columns below n (rows must all be in bounds), except when
// it adds C and C is D itself (`add_in_place`): then the chunks go out as TMA reduce-adds
// (D += chunk, one add per element, so still deterministic) and C is never read.
template <uint32_t BLOCK_N, typename Epilogue>
__device__ __forceinline__ void store_accumulators_tma_f32(const float* acc, uint8_t* smem_buf,
                                                           const void* tma_d, uint32_t n,
                                                           uint32_t row0, uint32_t col0,
                                                           uint32_t barrier_id,
                                                           const Epilogue& epilogue,
                                                           bool add_in_place) {
  constexpr bool kAddsC = std::is_same_v<Epilogue, AddC>;
  constexpr uint32_t kChunkCols = 32, kChunkBytes = 64 * 128;
  constexpr uint32_t kNumChunks = BLOCK_N / kChunkCols;
  static_assert(BLOCK_N % kChunkCols == 0 && kNumChunks % 2 == 0,
                "an even chunk count leaves buffer 0 free for the next tile's first chunk");
  const uint32_t t = threadIdx.x % 128;
  const uint32_t r = 16 * (t / 32) + (t % 32) / 4;
  const uint32_t q = t % 4;
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_buf));
#pragma unroll
  for (uint32_t ch = 0; ch < kNumChunks; ++ch) {
    const uint32_t buf = smem_base + (ch % 2) * kChunkBytes;
#pragma unroll
    for (uint32_t jj = 0; jj < 4; ++jj) {
      const uint32_t j = 4 * ch + jj;
#pragma unroll
      for (uint32_t half = 0; half < 2; ++half) {
        const uint32_t row = r + 8 * half;
        float x = acc[4 * j + 2 * half], y = acc[4 * j + 2 * half + 1];
        if constexpr (Epilogue::kReadsMemory) {
          const uint32_t col = col0 + 8 * j + 2 * q;
          if (!(kAddsC && add_in_place) && col < n) epilogue(x, y, row0 + row, col);
        } else {
          epilogue(x, y, row0 + row, col0 + 8 * j + 2 * q);
        }
        const uint32_t offset = row * 128 + (8 * jj + 2 * q) * 4;
        st_shared_v2_f32(buf + (offset ^ ((row % 8) << 4)), x, y);
      }
    }
    fence_async_shared();
    if (t == 0) tma_store_wait_read();
    named_barrier_sync(barrier_id, 128);
    if (t == 0) {
      const void* chunk = smem_buf + (ch % 2) * kChunkBytes;
      const int32_t col = static_cast<int32_t>(col0 + ch * kChunkCols);
      if (kAddsC && add_in_place) {
        tma_reduce_add_2d(tma_d, chunk, col, static_cast<int32_t>(row0));
      } else {
        tma_store_2d(tma_d, chunk, col, static_cast<int32_t>(row0));
      }
      tma_store_commit();
    }
  }
}

}  // namespace moegemm::sm90
