// Kernel launch through cuLaunchKernelEx, and the range checks of narrowed kernel fields: the
// low level under the generic launcher (launcher.h), which is what a kernel family uses.
#pragma once

#include <cuda.h>
#include <stdint.h>

#include <stdexcept>
#include <string>

#include "kernel.h"

namespace moegemm {

// The global PDL switch (_C.set_pdl, on by default); read at every launch, so a switch applies
// to plans that already exist.
void set_pdl(bool enabled);
bool get_pdl();

struct LaunchConfig {
  uint32_t grid_x = 1, grid_y = 1, grid_z = 1;
  uint32_t block_x = 1, block_y = 1, block_z = 1;
  uint32_t smem_bytes = 0;
  // Threadblocks per cluster, laid out along x; grid_x must be a multiple of it.
  uint32_t cluster_x = 1;
  CUstream stream = nullptr;
  // Programmatic dependent launch: the kernel may start while the previous one on the stream
  // finishes, and must itself wait (griddepcontrol.wait) before reading its inputs.
  bool pdl = get_pdl();
};

// Launches `kernel` on the current context's device with kernelParams = `args`. Never
// synchronizes; driver errors (bad launch config, too much smem) become std::runtime_error.
void launch_kernel(Kernel& kernel, const LaunchConfig& config, void** args);
// The same where the caller has just read the current context's device (a bound launch does).
void launch_kernel(Kernel& kernel, const LaunchConfig& config, void** args, CUdevice device);

// For kernels taking exactly one `const __grid_constant__ Params` argument: the driver copies
// `params` into the launch, so a stack struct is enough.
template <typename Params>
inline void launch_with_params(Kernel& kernel, const LaunchConfig& config, const Params& params,
                               CUdevice device) {
  void* args[] = {const_cast<Params*>(&params)};
  launch_kernel(kernel, config, args, device);
}

// Range checks for Python ints narrowed into 32-bit kernel fields; cheap enough for the hot path.
inline uint32_t checked_u32(int64_t value, const char* what) {
  if (value < 0 || value > static_cast<int64_t>(UINT32_MAX)) {
    throw std::invalid_argument(std::string("moegemm: ") + what + " out of range for a 32-bit " +
                                "kernel field: " + std::to_string(value));
  }
  return static_cast<uint32_t>(value);
}

// The persistent schedulers count tiles in uint32_t, and a CTA's index runs up to two rounds
// past the last tile (the rotated walk); `tiles` is an upper bound of the problem's tile count.
// 2^31 leaves that margin under 2^32 with room to spare. Tensors that fit on a GPU stay far
// below it; the check guards hand-made launches through _C.
inline void check_tile_count(uint64_t tiles, uint64_t num_ctas) {
  if (tiles + 2 * num_ctas >= (uint64_t{1} << 31)) {
    throw std::invalid_argument("moegemm: the problem has up to " + std::to_string(tiles) +
                                " tiles; the tile schedulers count at most 2^31");
  }
}

}  // namespace moegemm
