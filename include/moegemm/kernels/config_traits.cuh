// What a kernel reads from the named Config struct codegen emits beyond its required constants:
// optional members with defaults.
#pragma once

#include <stdint.h>

#include <type_traits>

#include <moegemm/pipeline/transform.cuh>

namespace moegemm {

// Config::Transform when the config names one, else NoTransform.
template <typename Config, typename = void>
struct transform_of {
  using type = NoTransform;
};
template <typename Config>
struct transform_of<Config, std::void_t<typename Config::Transform>> {
  using type = typename Config::Transform;
};
template <typename Config>
using transform_of_t = typename transform_of<Config>::type;

// Config::kMoeEpilogue (epilogue/functors.cuh, MoeEpilogue) when the config names one, else 0.
template <typename Config, typename = void>
struct moe_epilogue_of {
  static constexpr uint32_t value = 0;
};
template <typename Config>
struct moe_epilogue_of<Config, std::void_t<decltype(Config::kMoeEpilogue)>> {
  static constexpr uint32_t value = Config::kMoeEpilogue;
};

}  // namespace moegemm
