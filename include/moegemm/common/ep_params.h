// Parameters of the expert-parallel kernels (include/moegemm/ep/), shared by the host launchers
// (csrc/ep_kernels.cpp) and the device code. Plain C++: no torch, no CuTe.
//
// Every rank allocates one symmetric buffer of the same size (torch symmetric memory); the
// host computes its layout once (python/moegemm/ep/plan.py) and passes the byte offset of each
// region, the same on every rank. Rank r's copy of a region is peer_base[r] + offset.
#pragma once

#include <stdint.h>

namespace moegemm {

// Byte offsets into the symmetric buffer (python/moegemm/ep/plan.py: EPBufferPlan).
struct EpLayout {
  uint64_t x_recv;          // [E_local, max_m, H] BF16, or FP8 E4M3 bytes with kFp8
  uint64_t sfa_recv;        // kFp8: [E_local, max_m, ceil(H / 128)] FP32 scales
  uint64_t recv_weight;     // [E_local, max_m] FP32: routing weight of each received row
  uint64_t recv_src;        // [E_local, max_m] int32: src_rank * slots_per_rank + slot
  uint64_t counts;          // [R, E] int32: row s written by rank s (its slots per expert)
  uint64_t count_flag;      // [R] uint64: rank s stores the epoch once its counts are here
  uint64_t dispatch_arrive; // [R] uint64: rank s adds 1 per dispatch CTA after its rows
  uint64_t combine_arrive;  // [R] uint64: rank s adds 1 per combine CTA after its rows
  uint64_t combine_recv;    // [max_tokens * top_k, H] BF16: weighted expert rows of my slots
};

// Per-rank local state (plain device memory, not symmetric).
struct EpState {
  uint64_t epoch;           // forwards completed; dispatch runs epoch + 1 and publishes it
  uint32_t status;          // 0, or the first failure (kEpStatus* << 24 | phase << 16 | rank)
  uint32_t reserved;
};

// Status codes (the high byte of EpState::status); python/moegemm/ep/status.py decodes them.
constexpr uint32_t kEpStatusTimeout = 1u;   // a rank's signal never came: low 16 bits = rank
constexpr uint32_t kEpStatusOverflow = 2u;  // rows beyond max_m for one expert were dropped
// Phases (bits 16..23): where a wait timed out.
constexpr uint32_t kEpPhaseCounts = 1u;
constexpr uint32_t kEpPhaseDispatch = 2u;
constexpr uint32_t kEpPhaseCombine = 3u;

struct EpDispatchParams {
  const int32_t* topk_ids;     // [T, top_k] global expert ids; outside [0, E): dropped
  const float* topk_weights;   // [T, top_k]
  const void* x;               // [T, H] BF16, row stride ldx elements
  const uint64_t* peer_base;   // [R] every rank's symmetric buffer (device array)
  EpState* state;
  int32_t* masked_m;           // [E_local] rows each local expert received (min(count, max_m))
  int32_t* slot_dest;          // [T * top_k] the row the slot got on its owner, -1 if none
  EpLayout layout;
  uint32_t rank, world_size, num_tokens, top_k, num_experts, experts_per_rank;
  uint32_t hidden, ldx, max_m, slots_per_rank, slots_per_cta;
  uint64_t timeout_ns;
};

struct EpCombineParams {
  const void* y;               // [E_local, max_m, H] BF16: weighted expert rows (GEMM2 out)
  const int32_t* slot_dest;    // [T * top_k] from the dispatch: -1 = nothing came back
  const int32_t* masked_m;     // [E_local]
  const uint64_t* peer_base;   // [R]
  EpState* state;
  void* out;                   // [T, H] BF16, row stride ldo elements
  EpLayout layout;
  uint32_t rank, world_size, num_tokens, top_k, experts_per_rank;
  uint32_t hidden, ldo, max_m, slots_per_rank;
  uint64_t timeout_ns;
};

}  // namespace moegemm
