#include "launch.h"

#include <atomic>
#include <string>

#include "driver.h"

namespace moegemm {
namespace {

// Relaxed: the flag is a user preference read at launch, not a synchronization point. On by
// default: every kernel waits (griddepcontrol.wait) before its first global access, so an
// early start is safe after any predecessor, and the fused layer's short kernels start under
// the previous one's tail (docs/design.md, "PDL on by default").
std::atomic<bool> g_pdl{true};

}  // namespace

void set_pdl(bool enabled) { g_pdl.store(enabled, std::memory_order_relaxed); }
bool get_pdl() { return g_pdl.load(std::memory_order_relaxed); }

void launch_kernel(Kernel& kernel, const LaunchConfig& config, void** args) {
  launch_kernel(kernel, config, args, current_device());
}

void launch_kernel(Kernel& kernel, const LaunchConfig& config, void** args, CUdevice device) {
  if (config.cluster_x == 0 || config.grid_x % config.cluster_x != 0) {
    throw std::invalid_argument("moegemm: grid_x " + std::to_string(config.grid_x) +
                                " is not a multiple of the cluster size " +
                                std::to_string(config.cluster_x));
  }
  kernel.ensure_dynamic_smem(device, static_cast<int>(config.smem_bytes));

  CUlaunchAttribute attrs[2];
  unsigned int num_attrs = 0;
  if (config.cluster_x > 1) {
    CUlaunchAttribute& attr = attrs[num_attrs++];
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = config.cluster_x;
    attr.value.clusterDim.y = 1;
    attr.value.clusterDim.z = 1;
  }
  if (config.pdl) {
    CUlaunchAttribute& attr = attrs[num_attrs++];
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
  }

  CUlaunchConfig launch = {};
  launch.gridDimX = config.grid_x;
  launch.gridDimY = config.grid_y;
  launch.gridDimZ = config.grid_z;
  launch.blockDimX = config.block_x;
  launch.blockDimY = config.block_y;
  launch.blockDimZ = config.block_z;
  launch.sharedMemBytes = config.smem_bytes;
  launch.hStream = config.stream;
  launch.attrs = num_attrs > 0 ? attrs : nullptr;
  launch.numAttrs = num_attrs;
  // A CUkernel may stand in for a CUfunction in launch calls since CUDA 12.0; the driver loads
  // it into the current context on first use.
  MOEGEMM_CU(cuLaunchKernelEx, &launch, reinterpret_cast<CUfunction>(kernel.handle()), args,
             nullptr);
}

}  // namespace moegemm
