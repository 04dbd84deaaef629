// Row conversions between a storage type and the compute type, for kernels that work one
// contiguous row at a time (norms, RoPE, cross-entropy). The bf16 paths are written so the
// compiler vectorises them: a shift to widen, integer round-to-nearest-even to narrow (the same
// rounding as loom::bf16).
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

#include "loom/core/scalar_cast.h"

namespace loom::kernels::cpu {

template <typename C, typename T>
inline void widen_row(const T* src, C* dst, int64_t n) {
  if constexpr (std::is_same_v<T, bf16> && std::is_same_v<C, float>) {
    const uint16_t* u = reinterpret_cast<const uint16_t*>(src);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<uint32_t>(u[i]) << 16);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = cast_scalar<C>(src[i]);
  }
}

template <typename T, typename C>
inline void narrow_row(const C* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, bf16> && std::is_same_v<C, float>) {
    uint16_t* u = reinterpret_cast<uint16_t*>(dst);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t b = std::bit_cast<uint32_t>(src[i]);
      const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
      u[i] = static_cast<uint16_t>((b & 0x7fffffffu) > 0x7f800000u ? ((b >> 16) | 0x40u) : rounded);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = cast_scalar<T>(src[i]);
  }
}

// A row of storage type T seen as compute type C: the input itself when the types agree, else
// widened into `scratch`.
template <typename C, typename T>
inline const C* row_as(const T* src, C* scratch, int64_t n) {
  if constexpr (std::is_same_v<T, C>) {
    return src;
  } else {
    widen_row(src, scratch, n);
    return scratch;
  }
}

// Where to compute an output row: in place when T is the compute type, else in `scratch`
// (then narrow_row into the output).
template <typename C, typename T>
inline C* out_row(T* dst, C* scratch) {
  if constexpr (std::is_same_v<T, C>) {
    return dst;
  } else {
    return scratch;
  }
}

template <typename T, typename C>
inline void finish_row(const C* computed, T* dst, int64_t n) {
  if constexpr (!std::is_same_v<T, C>) narrow_row(computed, dst, n);
}

}  // namespace loom::kernels::cpu
