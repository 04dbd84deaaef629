// Small SIMD helpers for fp32 kernels: an accurate vectorised exp, bf16/f16 widening and rounding
// of 8 lanes, and row reductions. AVX2+FMA when the build targets x86-64-v3; a scalar fallback with
// the same results up to exp rounding keeps -DLOOM_PORTABLE=ON builds working. Never relies on
// -ffast-math: NaN and infinities behave as in std::exp.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "loom/core/dtype.h"

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define LOOM_VEC_AVX2 1
#endif

namespace loom::kernels::cpu::vec {

#ifdef LOOM_VEC_AVX2

// exp(x) for 8 lanes, within ~2 ulp of the correctly rounded value over the whole float range
// (denormal results included). Cody-Waite reduction x = n·ln2 + r, |r| <= ln2/2, a degree-6
// polynomial for e^r (Cephes coefficients), and 2^n applied as two factors so results below
// FLT_MIN round once instead of being flushed.
inline __m256 exp8(__m256 x) {
  const __m256 max_x = _mm256_set1_ps(88.72283935546875f);   // above: overflow to +inf
  const __m256 min_x = _mm256_set1_ps(-103.972084045410f);    // below: underflows to 0
  const __m256 log2e = _mm256_set1_ps(1.44269504088896341f);
  const __m256 ln2_hi = _mm256_set1_ps(0.693359375f);
  const __m256 ln2_lo = _mm256_set1_ps(-2.12194440e-4f);
  // min/max return their second operand for NaN: put x second in min so NaN survives to the
  // final blend, and clamp the working copy anyway so n stays in range.
  __m256 xc = _mm256_max_ps(_mm256_min_ps(x, max_x), min_x);
  __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, ln2_hi, xc);
  r = _mm256_fnmadd_ps(n, ln2_lo, r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  __m256 r2 = _mm256_mul_ps(r, r);
  __m256 y = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // n in [-150, 128]: split into n1 + n2 with both 2^n1 and 2^n2 normal floats.
  __m256i ni = _mm256_cvtps_epi32(n);
  __m256i n1 = _mm256_srai_epi32(ni, 1);
  __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  y = _mm256_mul_ps(_mm256_mul_ps(y, s1), s2);
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, min_x, _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(std::numeric_limits<float>::infinity()),
                       _mm256_cmp_ps(x, max_x, _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));  // NaN in, NaN out
}

inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// 8 bf16 values (raw bits) → fp32 (exact).
inline __m256 load_bf16x8(const uint16_t* src) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// 8 fp32 → bf16 bits, round to nearest even, NaN kept quiet (same bits as bf16::from_float).
inline void store_bf16x8(uint16_t* dst, __m256 x) {
  __m256i u = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_srli_epi32(
      _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
  __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
  __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                      _mm256_set1_epi32(0x7f800000));
  __m256i bits = _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
  // packus works per 128-bit lane: [b0..3 b0..3 | b4..7 b4..7] → pick quadwords 0 and 2.
  __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0xD8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
}

#endif  // LOOM_VEC_AVX2

// ---- Row helpers (any length; vector body plus scalar tail) ----------------------------------

inline float exp_scalar(float x) { return std::exp(x); }

// max of x[0..n); -inf for n == 0.
inline float row_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
  int64_t i = 0;
#ifdef LOOM_VEC_AVX2
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    m = hmax8(vm);
  }
#endif
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// x[i] = exp(x[i] - shift) in place; returns the sum of the new values.
inline float exp_shift_sum(float* x, int64_t n, float shift) {
  int64_t i = 0;
  float sum = 0;
#ifdef LOOM_VEC_AVX2
  const __m256 vs = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    _mm256_storeu_ps(x + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  sum = hsum8(acc);
  if (i < n) {  // tail through the same exp as the body, so a row's values do not depend on n % 8
    alignas(32) float buf[8];
    const int64_t rest = n - i;
    for (int64_t t = 0; t < 8; ++t) buf[t] = t < rest ? x[i + t] - shift : -INFINITY;
    _mm256_store_ps(buf, exp8(_mm256_load_ps(buf)));
    for (int64_t t = 0; t < rest; ++t) {
      x[i + t] = buf[t];
      sum += buf[t];
    }
  }
  return sum;
#else
  for (; i < n; ++i) {
    x[i] = exp_scalar(x[i] - shift);
    sum += x[i];
  }
  return sum;
#endif
}

// x[i] *= a
inline void scale_row(float* x, int64_t n, float a) {
  int64_t i = 0;
#ifdef LOOM_VEC_AVX2
  const __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), va));
#endif
  for (; i < n; ++i) x[i] *= a;
}

// Σ a[i]·b[i]
inline float dot(const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  float sum = 0;
#ifdef LOOM_VEC_AVX2
  __m256 acc = _mm256_setzero_ps();
  for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
  sum = hsum8(acc);
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// y[i] += a · x[i]
inline void add_scaled(float* y, const float* x, float a, int64_t n) {
  int64_t i = 0;
#ifdef LOOM_VEC_AVX2
  const __m256 va = _mm256_set1_ps(a);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
#endif
  for (; i < n; ++i) y[i] += a * x[i];
}

// p[i] = p[i] · (d[i] − c): the softmax backward product, in place over p.
inline void mul_sub(float* p, const float* d, float c, int64_t n) {
  int64_t i = 0;
#ifdef LOOM_VEC_AVX2
  const __m256 vc = _mm256_set1_ps(c);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(p + i, _mm256_mul_ps(_mm256_loadu_ps(p + i), _mm256_sub_ps(_mm256_loadu_ps(d + i), vc)));
#endif
  for (; i < n; ++i) p[i] = p[i] * (d[i] - c);
}

// ---- Conversions of a row between storage types and fp32 ------------------------------------

inline void widen_row(const bf16* src, float* dst, int64_t n) {
  int64_t i = 0;
#ifdef LOOM_VEC_AVX2
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_bf16x8(s + i));
#endif
  for (; i < n; ++i) dst[i] = bf16::to_float(src[i].bits);
}

inline void narrow_row(const float* src, bf16* dst, int64_t n) {
  int64_t i = 0;
#ifdef LOOM_VEC_AVX2
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
  for (; i + 8 <= n; i += 8) store_bf16x8(d + i, _mm256_loadu_ps(src + i));
#endif
  for (; i < n; ++i) dst[i].bits = bf16::from_float(src[i]);
}

inline void widen_row(const f16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16::to_float(src[i].bits);
}

inline void narrow_row(const float* src, f16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i].bits = f16::from_float(src[i]);
}

template <typename T>
inline void widen_row(const T* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}
template <typename T>
inline void narrow_row(const T* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
}

}  // namespace loom::kernels::cpu::vec
