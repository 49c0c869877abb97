#include "launcher.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moegemm {

LaunchConfig plan_launch(Kernel& kernel, LaunchShape& shape, const char* launcher) {
  const std::string name(launcher);
  const uint32_t cluster_size = checked_u32(shape.cluster_size(), "cluster_m * cluster_n");
  const uint32_t num_threads = checked_u32(shape.num_threads, "num_threads");
  const uint32_t smem_bytes = checked_u32(shape.smem_bytes, "smem_bytes");
  checked_u32(shape.num_blocks, "num_blocks");
  if (shape.cluster_m < 1 || shape.cluster_n < 1 || num_threads == 0) {
    throw std::invalid_argument(name + ": cluster_m, cluster_n and num_threads must be positive, "
                                "got " + std::to_string(shape.cluster_m) + ", " +
                                std::to_string(shape.cluster_n) + ", " +
                                std::to_string(shape.num_threads));
  }
  if (cluster_size > 1) {
    const int fit = kernel.max_active_clusters(cluster_size, num_threads, smem_bytes);
    if (fit < 1) {
      throw std::runtime_error(name + ": no cluster of " + std::to_string(cluster_size) +
                               " CTAs fits on this device");
    }
    shape.num_blocks = std::min<int64_t>(shape.num_blocks, int64_t{fit} * cluster_size);
  }
  // Checked here, once, rather than found by the driver at every launch.
  if (shape.num_blocks < 1 || shape.num_blocks % cluster_size != 0) {
    throw std::invalid_argument(name + ": num_blocks " + std::to_string(shape.num_blocks) +
                                " is not a positive multiple of the cluster size " +
                                std::to_string(cluster_size));
  }
  LaunchConfig config;
  config.grid_x = static_cast<uint32_t>(shape.num_blocks);
  config.block_x = num_threads;
  config.smem_bytes = smem_bytes;
  config.cluster_x = cluster_size;
  return config;
}

}  // namespace moegemm
