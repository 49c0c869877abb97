// Hopper wgmma plumbing: shared-memory matrix descriptors for the 128B-swizzled layouts TMA
// writes (K-major and MN-major), and the warpgroup fence / arrive / commit / wait around a
// batch of wgmma. The atoms themselves are chosen in mma/sm90_wgmma.cuh.
#pragma once

// N outside {8, 16, 32, 64, 96, 128, 192, 256} needs CuTe's extended atoms, which cost ~0.6 s of
// compile time: the generated source defines MOEGEMM_WGMMA_EXTENDED_N only when it uses one.
// Here, before anything includes CuTe's wgmma header.
#if defined(MOEGEMM_WGMMA_EXTENDED_N) && !defined(CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED)
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
#endif
#include <cute/arch/mma_sm90_desc.hpp>
#include <cute/arch/mma_sm90_gmma.hpp>

#include <stdint.h>

namespace moegemm::sm90 {

// Descriptor of a K-major tile stored as rows of 128 bytes with the 128B swizzle TMA writes.
// Rows come in atoms of 8 (1024 bytes), hence the stride byte offset of 1024; the leading byte
// offset is unused for swizzled K-major layouts.
__device__ __forceinline__ uint64_t make_smem_desc_k128b(uint32_t addr) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);   // start address, bits [0, 14)
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;         // stride byte offset, bits [32, 46)
  desc |= static_cast<uint64_t>(1) << 62;                 // layout type: SWIZZLE_128B
  return desc;
}
__device__ __forceinline__ uint64_t make_smem_desc_k128b(const void* smem_ptr) {
  return make_smem_desc_k128b(static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr)));
}

// The same descriptor from its start address in 16-byte units (a shared address >> 4; every
// Hopper shared address fits the 14 bits): the high word is a constant, so a stage or a K step
// further is one 32-bit add on the low word instead of a 64-bit one.
__device__ __forceinline__ uint64_t smem_desc_k128b_units(uint32_t units) {
  constexpr uint32_t kHigh = (1024 >> 4) | (1u << 30);  // stride byte offset; SWIZZLE_128B
  return (static_cast<uint64_t>(kHigh) << 32) | units;
}

// Advancing a K-major 128B-swizzled descriptor by `bytes` along K inside the 128-byte row: the
// hardware applies the swizzle to the final address, so moving the start address is enough.
__device__ __forceinline__ uint64_t advance_desc(uint64_t desc, uint32_t bytes) {
  return desc + (bytes >> 4);
}

// Descriptor of an MN-major tile stored as 128-byte rows (64 BF16 along M or N) per k, with
// the 128B swizzle: 8 k-rows form a 1024-byte atom (stride byte offset); 64-wide MN chunks lie
// `chunk_bytes` apart (leading byte offset).
__device__ __forceinline__ uint64_t make_smem_desc_mn128b(const void* smem_ptr,
                                                           uint32_t chunk_bytes) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr));
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((chunk_bytes >> 4) & 0x3FFF) << 16;
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;
  return desc;
}

// Accumulator registers must not move across a wgmma batch: fence every one of them.
template <uint32_t kNumRegs>
__device__ __forceinline__ void warpgroup_fence_regs(float* acc) {
#pragma unroll
  for (uint32_t i = 0; i < kNumRegs; ++i) cute::warpgroup_fence_operand(acc[i]);
}

__device__ __forceinline__ void warpgroup_arrive() { cute::warpgroup_arrive(); }
__device__ __forceinline__ void warpgroup_commit_batch() { cute::warpgroup_commit_batch(); }
template <int kNumInFlight>
__device__ __forceinline__ void warpgroup_wait() {
  cute::warpgroup_wait<kNumInFlight>();
}

}  // namespace moegemm::sm90
