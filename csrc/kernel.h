// A loaded cubin holding exactly one kernel.
//
// The JIT compiles one kernel per cubin, so "the" kernel of a library is unambiguous and no name
// lookup (which would need the mangled template name) is required.
#pragma once

#include <cuda.h>

#include <array>
#include <string>

namespace moegemm {

class Kernel {
 public:
  explicit Kernel(std::string cubin);
  ~Kernel();
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  CUkernel handle() const { return kernel_; }
  std::string name() const;
  int num_regs() const;

  // Raises the dynamic shared-memory limit for `device` to `bytes` when it differs from what was
  // last set there; the launch hot path calls this and usually does no driver call at all.
  void ensure_dynamic_smem(CUdevice device, int bytes);

  // How many clusters of `cluster_x` CTAs (each `threads` threads, `smem_bytes` of dynamic shared
  // memory) the current device can hold at once. The GPCs, not the SM count, bound it: a
  // persistent grid larger than this runs its last clusters in a second wave.
  int max_active_clusters(uint32_t cluster_x, uint32_t threads, uint32_t smem_bytes);

 private:
  // Kept alive with the library: with lazy module loading the driver may read the image when a
  // context first uses the kernel, so the bytes must not go away before cuLibraryUnload.
  std::string image_;
  CUlibrary library_ = nullptr;
  CUkernel kernel_ = nullptr;
  // Last CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES set per device ordinal; -1 = never set.
  static constexpr int kMaxCachedDevices = 64;
  std::array<int, kMaxCachedDevices> smem_set_;
};

// Number of kernels in a cubin (loads and unloads it); used to validate cache entries.
unsigned int cubin_kernel_count(const std::string& cubin);

}  // namespace moegemm
