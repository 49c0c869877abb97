// Parameter filling of the fused MoE layer's own kernels: include/moegemm/moe/route_gather.cuh
// (MoeRouteParams) and combine.cuh (MoeCombineParams). No TMA descriptors: both read and write
// through plain pointers. Launch shape, launch and bindings are the generic launcher's.
#include <pybind11/pybind11.h>

#include <stdint.h>

#include <stdexcept>
#include <string>

#include "launcher.h"
#include "moegemm/common/moe_params.h"

namespace moegemm {
namespace {

constexpr int64_t kMaxExperts = 1024;

struct MoeRouteGather {
  using Params = MoeRouteParams;
  static constexpr const char* kName = "MoeRouteGatherLauncher";
  static constexpr size_t kNumAlignedPointers = 2;  // x, x_sorted: 16-byte vectors
  static constexpr const char* kDoc =
      "Launches moe_route_gather (include/moegemm/moe/route_gather.cuh): the fused MoE layer's "
      "routing and gather; block_m/n/k are unused (pass 1).";
  static constexpr const char* kArgNames[] = {
      "x_ptr", "x_sorted_ptr", "topk_ids_ptr", "topk_weights_ptr", "offs_ptr", "row_slot_ptr",
      "row_weight_ptr", "slot_row_ptr", "sfa_sorted_ptr", "num_tokens", "top_k", "num_experts",
      "hidden", "ldx", "slots_per_cta"};
  static constexpr const char* kCallDoc =
      "Routes T * top_k slots to experts and gathers x into expert order (MoeRouteParams), as "
      "BF16 or, built with kFp8, quantized to FP8 with its scales in sfa_sorted (0 for BF16). No "
      "slots launches nothing. Asynchronous.";
  static constexpr const char* kBindDoc = "launch(x_ptr, ..., slot_row_ptr, stream, /) -> bool.";
  static constexpr const char* kNumBlocksDoc = "CTAs per launch.";

  static void check_shape(const LaunchShape& shape) {
    if (shape.cluster_m != 1 || shape.cluster_n != 1 || shape.num_threads % 32 != 0) {
      throw std::invalid_argument(std::string(kName) + ": no clusters, whole warps");
    }
  }

  static bool fill(const LaunchShape& shape, Params& params, TmaList& /*tma*/, uint64_t x_ptr,
                   uint64_t x_sorted_ptr, uint64_t topk_ids_ptr, uint64_t topk_weights_ptr,
                   uint64_t offs_ptr, uint64_t row_slot_ptr, uint64_t row_weight_ptr,
                   uint64_t slot_row_ptr, uint64_t sfa_sorted_ptr, int64_t num_tokens,
                   int64_t top_k, int64_t num_experts,
                   int64_t hidden, int64_t ldx, int64_t slots_per_cta) {
    params.num_tokens = checked_u32(num_tokens, "num_tokens");
    params.top_k = checked_u32(top_k, "top_k");
    params.num_experts = checked_u32(num_experts, "num_experts");
    params.hidden = checked_u32(hidden, "hidden");
    params.ldx = checked_u32(ldx, "ldx");
    params.slots_per_cta = checked_u32(slots_per_cta, "slots_per_cta");
    if (num_experts < 1 || num_experts > kMaxExperts || hidden % 8 != 0 || ldx % 8 != 0 ||
        ldx < hidden || slots_per_cta < 1) {
      throw std::invalid_argument(std::string(kName) +
                                  ": 1..1024 experts, hidden and ldx multiples of 8 with ldx >= "
                                  "hidden, slots_per_cta positive");
    }
    const uint64_t slots = uint64_t{params.num_tokens} * params.top_k;
    if (slots > UINT32_MAX / 2) throw std::invalid_argument(std::string(kName) + ": too many slots");
    if (slots == 0) return false;
    if (uint64_t(shape.num_blocks) * params.slots_per_cta < slots) {
      throw std::invalid_argument(std::string(kName) + ": num_blocks * slots_per_cta < slots");
    }
    const uint64_t smem =
        4 * (uint64_t{params.num_experts} * (2 + shape.num_threads / 32) + params.slots_per_cta);
    if (smem > static_cast<uint64_t>(shape.smem_bytes)) {
      throw std::invalid_argument(std::string(kName) + ": needs " + std::to_string(smem) +
                                  " bytes of shared memory, the plan has " +
                                  std::to_string(shape.smem_bytes));
    }
    params.x = as_ptr(x_ptr);
    params.x_sorted = as_ptr(x_sorted_ptr);
    params.topk_ids = static_cast<const int32_t*>(as_ptr(topk_ids_ptr));
    params.topk_weights = static_cast<const float*>(as_ptr(topk_weights_ptr));
    params.offs = static_cast<int32_t*>(as_ptr(offs_ptr));
    params.row_slot = static_cast<int32_t*>(as_ptr(row_slot_ptr));
    params.row_weight = static_cast<float*>(as_ptr(row_weight_ptr));
    params.slot_row = static_cast<int32_t*>(as_ptr(slot_row_ptr));
    params.sfa_sorted = static_cast<float*>(as_ptr(sfa_sorted_ptr));
    return true;
  }
};

struct MoeQuantizeRows {
  using Params = MoeQuantizeParams;
  static constexpr const char* kName = "MoeQuantizeRowsLauncher";
  static constexpr size_t kNumAlignedPointers = 2;  // src (16-byte loads), dst
  static constexpr const char* kDoc =
      "Launches moe_quantize_rows (include/moegemm/moe/quantize_rows.cuh): BF16 rows to FP8 E4M3 "
      "per 128 columns with FP32 scales; block_m/n/k are unused (pass 1).";
  static constexpr const char* kArgNames[] = {
      "src_ptr", "dst_ptr", "scales_ptr", "row_bound_ptr", "rows", "cols", "ld_src", "group_rows"};
  static constexpr const char* kCallDoc =
      "dst, scales = per_token_cast_to_fp8(src) for rows below *row_bound (0: all rows); with "
      "group_rows > 0, row_bound holds each group_rows-row group's count (the masked layout) and "
      "rows past it are skipped. Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(src_ptr, dst_ptr, scales_ptr, row_bound_ptr, stream, /) -> bool.";
  static constexpr const char* kNumBlocksDoc = "CTAs per launch.";

  static void check_shape(const LaunchShape& shape) {
    if (shape.cluster_m != 1 || shape.cluster_n != 1 || shape.num_threads % 32 != 0) {
      throw std::invalid_argument(std::string(kName) + ": no clusters, whole warps");
    }
  }

  static bool fill(const LaunchShape& /*shape*/, Params& params, TmaList& /*tma*/,
                   uint64_t src_ptr, uint64_t dst_ptr, uint64_t scales_ptr,
                   uint64_t row_bound_ptr, int64_t rows, int64_t cols, int64_t ld_src,
                   int64_t group_rows) {
    params.rows = checked_u32(rows, "rows");
    params.cols = checked_u32(cols, "cols");
    params.ld_src = checked_u32(ld_src, "ld_src");
    params.group_rows = checked_u32(group_rows, "group_rows");
    if (cols % 8 != 0 || ld_src % 8 != 0 || ld_src < cols) {
      throw std::invalid_argument(std::string(kName) +
                                  ": cols and ld_src multiples of 8 with ld_src >= cols");
    }
    if (params.rows == 0 || params.cols == 0) return false;
    params.src = as_ptr(src_ptr);
    params.dst = as_ptr(dst_ptr);
    params.scales = static_cast<float*>(as_ptr(scales_ptr));
    params.row_bound = static_cast<const int32_t*>(as_ptr(row_bound_ptr));
    return true;
  }
};

struct MoeCombine {
  using Params = MoeCombineParams;
  static constexpr const char* kName = "MoeCombineLauncher";
  static constexpr size_t kNumAlignedPointers = 2;  // y, out: 16-byte vectors
  static constexpr const char* kDoc =
      "Launches moe_combine (include/moegemm/moe/combine.cuh): each token's top_k rows summed in "
      "FP32 in choice order; block_m/n/k are unused (pass 1).";
  static constexpr const char* kArgNames[] = {
      "y_ptr", "out_ptr", "slot_row_ptr", "num_tokens", "top_k", "hidden", "ldo"};
  static constexpr const char* kCallDoc =
      "out[t] = sum over j of y[slot_row[t * top_k + j]] (MoeCombineParams). Asynchronous.";
  static constexpr const char* kBindDoc =
      "launch(y_ptr, out_ptr, slot_row_ptr, stream, /) -> bool.";
  static constexpr const char* kNumBlocksDoc = "CTAs per launch.";

  static void check_shape(const LaunchShape& shape) { MoeRouteGather::check_shape(shape); }

  static bool fill(const LaunchShape& /*shape*/, Params& params, TmaList& /*tma*/,
                   uint64_t y_ptr, uint64_t out_ptr, uint64_t slot_row_ptr, int64_t num_tokens,
                   int64_t top_k, int64_t hidden, int64_t ldo) {
    params.num_tokens = checked_u32(num_tokens, "num_tokens");
    params.top_k = checked_u32(top_k, "top_k");
    params.hidden = checked_u32(hidden, "hidden");
    params.ldo = checked_u32(ldo, "ldo");
    if (hidden % 8 != 0 || ldo % 8 != 0 || ldo < hidden) {
      throw std::invalid_argument(std::string(kName) +
                                  ": hidden and ldo multiples of 8 with ldo >= hidden");
    }
    if (params.num_tokens == 0 || params.hidden == 0) return false;
    params.y = as_ptr(y_ptr);
    params.out = as_ptr(out_ptr);
    params.slot_row = static_cast<const int32_t*>(as_ptr(slot_row_ptr));
    return true;
  }
};

}  // namespace

void register_moe_kernels(pybind11::module_& m) {
  register_launcher<MoeRouteGather>(m);
  register_launcher<MoeQuantizeRows>(m);
  register_launcher<MoeCombine>(m);
}

}  // namespace moegemm
