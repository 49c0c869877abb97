// The tcgen05 forms of the block-scaled (MX) kernels, as inline PTX of our own (see tcgen05.cuh
// for why not CuTe's wrappers):
//   tcgen05.mma kind::mxf8f6f4.block_scale (scale_vec::1X: one UE8M0 scale per 32 of K per row
//     of A and of B, read from tensor memory; SASS UTCQMMA),
//   tcgen05.cp 32x128b.warpx4 (32 rows of 16 bytes from shared memory, through a descriptor,
//     into 4 columns of the 32 lanes of every warp quadrant; SASS UTCCP).
// A tcgen05.cp and the tcgen05.mma issued after it by the same thread execute in issue order,
// so a scale copy may be followed at once by the MMAs that read it.
// Compiled and statically checked for sm_100f, not run on hardware.
#pragma once

#include <stdint.h>

namespace moegemm::sm100 {

// D (tensor memory) = (A * sfa) x (B * sfb) (+ D when accumulate): one MMA of the shape and
// formats in `idesc`; sfa_tmem / sfb_tmem the scales' tensor-memory addresses.
__device__ __forceinline__ void umma_mxf8f6f4_ss(uint32_t d_tmem, uint64_t a_desc,
                                                 uint64_t b_desc, uint32_t idesc,
                                                 uint32_t sfa_tmem, uint32_t sfb_tmem,
                                                 uint32_t accumulate) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.b32 p, %4, 0;\n\t"
      "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale [%0], %1, %2, %3, [%5], [%6], p;\n\t"
      "}" ::"r"(d_tmem),
      "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(accumulate), "r"(sfa_tmem), "r"(sfb_tmem)
      : "memory");
}

// 32 rows x 128 bits from shared memory (descriptor `src_desc`) to tensor memory at
// `dst_tmem`: row i lands in lane i of each of the four warp quadrants, its four 32-bit words
// in four consecutive columns.
__device__ __forceinline__ void tmem_cp_32x128b_warpx4(uint32_t dst_tmem, uint64_t src_desc) {
  asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;" ::"r"(dst_tmem), "l"(src_desc)
               : "memory");
}

}  // namespace moegemm::sm100
