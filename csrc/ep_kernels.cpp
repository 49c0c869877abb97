// Parameter filling of the expert-parallel kernels: include/moegemm/ep/dispatch.cuh
// (EpDispatchParams) and combine.cuh (EpCombineParams). No TMA descriptors: both move rows
// through plain (peer) pointers. The symmetric buffer's region offsets are bound integers,
// computed once on the host (python/moegemm/ep/plan.py). Launch shape, launch and bindings
// are the generic launcher's (launcher.h).
#include <pybind11/pybind11.h>

#include <stdint.h>

#include <stdexcept>
#include <string>

#include "launcher.h"
#include "moegemm/common/ep_params.h"

namespace moegemm {
namespace {

constexpr int64_t kMaxExperts = 1024;  // dispatch.cuh's shared-memory tables, as the route kernel
constexpr int64_t kMaxRanks = 64;

void check_no_cluster(const LaunchShape& shape, const char* name) {
  if (shape.cluster_m != 1 || shape.cluster_n != 1 || shape.num_threads % 32 != 0) {
    throw std::invalid_argument(std::string(name) + ": no clusters, whole warps");
  }
}

EpLayout make_layout(int64_t x_recv, int64_t sfa_recv, int64_t recv_weight, int64_t recv_src,
                     int64_t counts, int64_t count_flag, int64_t dispatch_arrive,
                     int64_t combine_arrive, int64_t combine_recv, const char* name) {
  const int64_t offsets[] = {x_recv, sfa_recv, recv_weight, recv_src, counts, count_flag,
                             dispatch_arrive, combine_arrive, combine_recv};
  for (int64_t offset : offsets) {
    if (offset < 0 || offset % 16 != 0) {
      throw std::invalid_argument(std::string(name) +
                                  ": symmetric-buffer offsets are non-negative multiples of 16");
    }
  }
  return EpLayout{uint64_t(x_recv),     uint64_t(sfa_recv),        uint64_t(recv_weight),
                  uint64_t(recv_src),   uint64_t(counts),          uint64_t(count_flag),
                  uint64_t(dispatch_arrive), uint64_t(combine_arrive), uint64_t(combine_recv)};
}

void check_ranks(int64_t rank, int64_t world_size, const char* name) {
  if (world_size < 1 || world_size > kMaxRanks || rank < 0 || rank >= world_size) {
    throw std::invalid_argument(std::string(name) + ": 1..64 ranks and 0 <= rank < world_size");
  }
}

struct EpDispatch {
  using Params = EpDispatchParams;
  static constexpr const char* kName = "EpDispatchLauncher";
  static constexpr size_t kNumAlignedPointers = 1;  // x: 16-byte vectors
  static constexpr const char* kDoc =
      "Launches ep_dispatch (include/moegemm/ep/dispatch.cuh): expert-parallel dispatch of "
      "(token, choice) rows into the owners' masked layout over peer pointers; block_m/n/k are "
      "unused (pass 1).";
  static constexpr const char* kArgNames[] = {
      "x_ptr", "topk_ids_ptr", "topk_weights_ptr", "peer_base_ptr", "state_ptr", "masked_m_ptr",
      "slot_dest_ptr", "rank", "world_size", "num_tokens", "top_k", "num_experts",
      "experts_per_rank", "hidden", "ldx", "max_m", "slots_per_rank", "slots_per_cta", "timeout_ns",
      "off_x_recv", "off_sfa_recv", "off_recv_weight", "off_recv_src", "off_counts",
      "off_count_flag", "off_dispatch_arrive", "off_combine_arrive", "off_combine_recv"};
  static constexpr const char* kCallDoc =
      "Counts exchange, then rows pushed (EpDispatchParams); launches even with no tokens (every "
      "rank must signal). Asynchronous.";
  static constexpr const char* kBindDoc = "launch(x_ptr, ..., slot_dest_ptr, stream, /) -> bool.";
  static constexpr const char* kNumBlocksDoc = "CTAs per launch.";

  static void check_shape(const LaunchShape& shape) { check_no_cluster(shape, kName); }

  static bool fill(const LaunchShape& shape, Params& params, TmaList& /*tma*/, uint64_t x_ptr,
                   uint64_t topk_ids_ptr, uint64_t topk_weights_ptr, uint64_t peer_base_ptr,
                   uint64_t state_ptr, uint64_t masked_m_ptr, uint64_t slot_dest_ptr,
                   int64_t rank, int64_t world_size, int64_t num_tokens, int64_t top_k,
                   int64_t num_experts, int64_t experts_per_rank, int64_t hidden, int64_t ldx,
                   int64_t max_m, int64_t slots_per_rank, int64_t slots_per_cta,
                   int64_t timeout_ns, int64_t off_x_recv, int64_t off_sfa_recv,
                   int64_t off_recv_weight, int64_t off_recv_src, int64_t off_counts,
                   int64_t off_count_flag, int64_t off_dispatch_arrive,
                   int64_t off_combine_arrive, int64_t off_combine_recv) {
    check_ranks(rank, world_size, kName);
    params.rank = checked_u32(rank, "rank");
    params.world_size = checked_u32(world_size, "world_size");
    params.num_tokens = checked_u32(num_tokens, "num_tokens");
    params.top_k = checked_u32(top_k, "top_k");
    params.num_experts = checked_u32(num_experts, "num_experts");
    params.experts_per_rank = checked_u32(experts_per_rank, "experts_per_rank");
    params.hidden = checked_u32(hidden, "hidden");
    params.ldx = checked_u32(ldx, "ldx");
    params.max_m = checked_u32(max_m, "max_m");
    params.slots_per_rank = checked_u32(slots_per_rank, "slots_per_rank");
    params.slots_per_cta = checked_u32(slots_per_cta, "slots_per_cta");
    if (num_experts < 1 || num_experts > kMaxExperts || experts_per_rank * world_size != num_experts ||
        hidden < 8 || hidden % 8 != 0 || ldx % 8 != 0 || ldx < hidden || max_m < 1 ||
        top_k < 1 || slots_per_cta < 1 || timeout_ns < 1) {
      throw std::invalid_argument(std::string(kName) +
                                  ": 1..1024 experts split evenly over the ranks, hidden and ldx "
                                  "multiples of 8 with ldx >= hidden, positive max_m, top_k, "
                                  "slots_per_cta and timeout");
    }
    const uint64_t slots = uint64_t{params.num_tokens} * params.top_k;
    if (slots > params.slots_per_rank ||
        uint64_t{params.slots_per_rank} * params.world_size > INT32_MAX) {
      throw std::invalid_argument(std::string(kName) +
                                  ": num_tokens * top_k <= slots_per_rank, and slots_per_rank * "
                                  "world_size must fit in int32");
    }
    if (uint64_t(shape.num_blocks) * params.slots_per_cta < params.slots_per_rank) {
      throw std::invalid_argument(std::string(kName) +
                                  ": num_blocks * slots_per_cta < slots_per_rank");
    }
    const uint64_t smem =
        4 * (uint64_t{params.num_experts} * (2 + shape.num_threads / 32) + params.slots_per_cta);
    if (smem > static_cast<uint64_t>(shape.smem_bytes)) {
      throw std::invalid_argument(std::string(kName) + ": needs " + std::to_string(smem) +
                                  " bytes of shared memory, the plan has " +
                                  std::to_string(shape.smem_bytes));
    }
    params.timeout_ns = uint64_t(timeout_ns);
    params.layout = make_layout(off_x_recv, off_sfa_recv, off_recv_weight, off_recv_src,
                                off_counts, off_count_flag, off_dispatch_arrive,
                                off_combine_arrive, off_combine_recv, kName);
    params.x = as_ptr(x_ptr);
    params.topk_ids = static_cast<const int32_t*>(as_ptr(topk_ids_ptr));
    params.topk_weights = static_cast<const float*>(as_ptr(topk_weights_ptr));
    params.peer_base = static_cast<const uint64_t*>(as_ptr(peer_base_ptr));
    params.state = static_cast<EpState*>(as_ptr(state_ptr));
    params.masked_m = static_cast<int32_t*>(as_ptr(masked_m_ptr));
    params.slot_dest = static_cast<int32_t*>(as_ptr(slot_dest_ptr));
    return true;  // T = 0 still launches: this rank's counts and arrivals are awaited
  }
};

struct EpCombine {
  using Params = EpCombineParams;
  static constexpr const char* kName = "EpCombineLauncher";
  static constexpr size_t kNumAlignedPointers = 1;  // y: 16-byte vectors
  static constexpr const char* kDoc =
      "Launches ep_combine (include/moegemm/ep/combine.cuh): expert rows pushed back to their "
      "source slots, then each token's rows summed in FP32 in choice order; block_m/n/k are "
      "unused (pass 1).";
  static constexpr const char* kArgNames[] = {
      "y_ptr", "slot_dest_ptr", "masked_m_ptr", "peer_base_ptr", "state_ptr", "out_ptr", "rank",
      "world_size", "num_tokens", "top_k", "experts_per_rank", "hidden", "ldo", "max_m",
      "slots_per_rank", "timeout_ns", "off_x_recv", "off_sfa_recv", "off_recv_weight",
      "off_recv_src", "off_counts", "off_count_flag", "off_dispatch_arrive", "off_combine_arrive",
      "off_combine_recv"};
  static constexpr const char* kCallDoc =
      "EpCombineParams; launches even with no tokens. Asynchronous.";
  static constexpr const char* kBindDoc = "launch(y_ptr, ..., out_ptr, stream, /) -> bool.";
  static constexpr const char* kNumBlocksDoc = "CTAs per launch.";

  static void check_shape(const LaunchShape& shape) { check_no_cluster(shape, kName); }

  static bool fill(const LaunchShape& /*shape*/, Params& params, TmaList& /*tma*/,
                   uint64_t y_ptr, uint64_t slot_dest_ptr, uint64_t masked_m_ptr,
                   uint64_t peer_base_ptr, uint64_t state_ptr, uint64_t out_ptr, int64_t rank,
                   int64_t world_size, int64_t num_tokens, int64_t top_k,
                   int64_t experts_per_rank, int64_t hidden, int64_t ldo, int64_t max_m,
                   int64_t slots_per_rank, int64_t timeout_ns, int64_t off_x_recv,
                   int64_t off_sfa_recv, int64_t off_recv_weight, int64_t off_recv_src,
                   int64_t off_counts, int64_t off_count_flag, int64_t off_dispatch_arrive,
                   int64_t off_combine_arrive, int64_t off_combine_recv) {
    check_ranks(rank, world_size, kName);
    params.rank = checked_u32(rank, "rank");
    params.world_size = checked_u32(world_size, "world_size");
    params.num_tokens = checked_u32(num_tokens, "num_tokens");
    params.top_k = checked_u32(top_k, "top_k");
    params.experts_per_rank = checked_u32(experts_per_rank, "experts_per_rank");
    params.hidden = checked_u32(hidden, "hidden");
    params.ldo = checked_u32(ldo, "ldo");
    params.max_m = checked_u32(max_m, "max_m");
    params.slots_per_rank = checked_u32(slots_per_rank, "slots_per_rank");
    if (experts_per_rank < 1 || hidden < 8 || hidden % 8 != 0 || ldo % 8 != 0 || ldo < hidden ||
        max_m < 1 || top_k < 1 || timeout_ns < 1 ||
        uint64_t{params.num_tokens} * params.top_k > params.slots_per_rank) {
      throw std::invalid_argument(std::string(kName) +
                                  ": hidden and ldo multiples of 8 with ldo >= hidden, positive "
                                  "experts_per_rank, max_m, top_k and timeout, num_tokens * "
                                  "top_k <= slots_per_rank");
    }
    params.timeout_ns = uint64_t(timeout_ns);
    params.layout = make_layout(off_x_recv, off_sfa_recv, off_recv_weight, off_recv_src,
                                off_counts, off_count_flag, off_dispatch_arrive,
                                off_combine_arrive, off_combine_recv, kName);
    params.y = as_ptr(y_ptr);
    params.slot_dest = static_cast<const int32_t*>(as_ptr(slot_dest_ptr));
    params.masked_m = static_cast<const int32_t*>(as_ptr(masked_m_ptr));
    params.peer_base = static_cast<const uint64_t*>(as_ptr(peer_base_ptr));
    params.state = static_cast<EpState*>(as_ptr(state_ptr));
    params.out = as_ptr(out_ptr);
    return true;
  }
};

}  // namespace

void register_ep_kernels(pybind11::module_& m) {
  register_launcher<EpDispatch>(m);
  register_launcher<EpCombine>(m);
}

}  // namespace moegemm
