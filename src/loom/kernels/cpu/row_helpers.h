// Helpers for kernels that work one contiguous row at a time (norms, RoPE, cross-entropy, MoE):
// conversions between a storage type and the compute type, and row reductions.
// bf16/f16 conversions are vec.h's. The fp32 reductions keep four
// independent vector accumulators (AVX2), so a row sum is not one chain of dependent FMAs (a
// single accumulator waits on the FMA latency every step); they are folded in a fixed order, so
// the result depends on the row only. Other types use plain loops.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "loom/core/scalar_cast.h"
#include "loom/kernels/cpu/vec.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LOOM_ROW_AVX2 1
#endif

namespace loom::kernels::cpu {

template <typename C, typename T>
inline void widen_row(const T* src, C* dst, int64_t n) {
  if constexpr ((std::is_same_v<T, bf16> || std::is_same_v<T, f16>) && std::is_same_v<C, float>) {
    vec::widen_row(src, dst, n);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = cast_scalar<C>(src[i]);
  }
}

template <typename T, typename C>
inline void narrow_row(const C* src, T* dst, int64_t n) {
  if constexpr ((std::is_same_v<T, bf16> || std::is_same_v<T, f16>) && std::is_same_v<C, float>) {
    vec::narrow_row(src, dst, n);
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

// ---- Row reductions ---------------------------------------------------------------------------

#ifdef LOOM_ROW_AVX2
namespace detail {
using vec::hmax8;
using vec::hsum8;
// Σ f(load(a + i), load(b + i)) with four accumulators; f is an FMA-shaped combiner.
template <typename Fma>
inline float reduce4(const float* a, const float* b, int64_t n, int64_t& i, Fma&& fma) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  for (; i + 32 <= n; i += 32) {
    s0 = fma(a + i, b + i, s0);
    s1 = fma(a + i + 8, b + i + 8, s1);
    s2 = fma(a + i + 16, b + i + 16, s2);
    s3 = fma(a + i + 24, b + i + 24, s3);
  }
  for (; i + 8 <= n; i += 8) s0 = fma(a + i, b + i, s0);
  return hsum8(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}
}  // namespace detail
#endif

// Σ a[i]·b[i]
template <typename C>
inline C row_dot(const C* a, const C* b, int64_t n) {
  C s = 0;
  int64_t i = 0;
#ifdef LOOM_ROW_AVX2
  if constexpr (std::is_same_v<C, float>) {
    s = detail::reduce4(a, b, n, i, [](const float* x, const float* y, __m256 acc) {
      return _mm256_fmadd_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(y), acc);
    });
  }
#endif
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// Σ x[i]
template <typename C>
inline C row_sum(const C* x, int64_t n) {
  C s = 0;
  int64_t i = 0;
#ifdef LOOM_ROW_AVX2
  if constexpr (std::is_same_v<C, float>) {
    s = detail::reduce4(x, x, n, i, [](const float* p, const float*, __m256 acc) {
      return _mm256_add_ps(_mm256_loadu_ps(p), acc);
    });
  }
#endif
  for (; i < n; ++i) s += x[i];
  return s;
}

// Σ (x[i] − c)²
template <typename C>
inline C row_centered_sum_squares(const C* x, C c, int64_t n) {
  C s = 0;
  int64_t i = 0;
#ifdef LOOM_ROW_AVX2
  if constexpr (std::is_same_v<C, float>) {
    const __m256 vc = _mm256_set1_ps(c);
    s = detail::reduce4(x, x, n, i, [vc](const float* p, const float*, __m256 acc) {
      const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(p), vc);
      return _mm256_fmadd_ps(d, d, acc);
    });
  }
#endif
  for (; i < n; ++i) s += (x[i] - c) * (x[i] - c);
  return s;
}

// max of x[0, n) (−inf when empty). NaNs are not reported here: callers that must propagate
// them do so through the arithmetic that follows.
template <typename C>
inline C row_max(const C* x, int64_t n) {
  C m = -std::numeric_limits<C>::infinity();
  int64_t i = 0;
#ifdef LOOM_ROW_AVX2
  if constexpr (std::is_same_v<C, float>) {
    if (n >= 32) {
      __m256 m0 = _mm256_set1_ps(m), m1 = m0, m2 = m0, m3 = m0;
      for (; i + 32 <= n; i += 32) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(x + i));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(x + i + 8));
        m2 = _mm256_max_ps(m2, _mm256_loadu_ps(x + i + 16));
        m3 = _mm256_max_ps(m3, _mm256_loadu_ps(x + i + 24));
      }
      m = detail::hmax8(_mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3)));
    }
  }
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

}  // namespace loom::kernels::cpu
