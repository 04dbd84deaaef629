// Converting one element between storage types (bf16/f16 go through float).
#pragma once

#include <type_traits>

#include "loom/core/dtype.h"

namespace loom {

template <typename T>
inline constexpr bool is_reduced_float_v = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

template <typename To, typename From>
inline To cast_scalar(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_reduced_float_v<From>) {
    return cast_scalar<To>(static_cast<float>(v));
  } else if constexpr (is_reduced_float_v<To>) {
    return To(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace loom
