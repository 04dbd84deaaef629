#include "loom/kernels/cpu/attention_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

// Only these functions may use AVX-512: the attribute, not a build flag, so the binary stays
// runnable on CPUs without it (the caller checks the dispatch first).
#define LOOM_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace loom::kernels::cpu::bf16_tiles {
namespace {

LOOM_AVX512_BF16 inline __mmask16 first(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

LOOM_AVX512_BF16 inline __m512bh as_bh(__m512i x) { return reinterpret_cast<__m512bh&>(x); }

// An MR × (16·NV) block of c: the accumulators stay in registers over the whole inner size
// (MR·NV ≤ 16 of the 32 vector registers), B's NV vectors are loaded once per inner word and
// used by every row, A's word broadcast once per row.
template <int MR, int NV>
LOOM_AVX512_BF16 void block(int64_t pairs, const uint32_t* a, int64_t a_row, int64_t a_inner,
                            const uint32_t* b, int64_t ldb, int64_t cols, float alpha, float beta,
                            float* c, int64_t ldc) {
  __mmask16 mask[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) mask[v] = first(cols - 16 * v);
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) bv[v] = as_bh(_mm512_maskz_loadu_epi32(mask[v], b + p * ldb + 16 * v));
    const uint32_t* ap = a + p * a_inner;
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = as_bh(_mm512_set1_epi32(static_cast<int>(ap[r * a_row])));
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      float* cp = c + r * ldc + 16 * v;
      __m512 x = _mm512_mul_ps(va, acc[r][v]);
      if (beta != 0.f) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mask[v], cp), x);
      _mm512_mask_storeu_ps(cp, mask[v], x);
    }
}

using BlockFn = void (*)(int64_t, const uint32_t*, int64_t, int64_t, const uint32_t*, int64_t,
                         int64_t, float, float, float*, int64_t);

template <int NV>
constexpr BlockFn kBlocks[9] = {nullptr,          block<1, NV>, block<2, NV>, block<3, NV>, block<4, NV>,
                                block<5, NV>,     block<6, NV>, block<7, NV>, block<8, NV>};

constexpr int kRows = 8;

}  // namespace

LOOM_AVX512_BF16 void pack_rows(const float* src, int64_t ld, int64_t rows, int64_t k, uint32_t* dst) {
  const int64_t pairs = (k + 1) / 2;
  for (int64_t r = 0; r < rows; ++r, src += ld, dst += pairs)
    for (int64_t p = 0; p < pairs; p += 16) {
      const int64_t rest = k - 2 * p;
      const __m512 lo = _mm512_maskz_loadu_ps(first(rest), src + 2 * p);
      const __m512 hi = _mm512_maskz_loadu_ps(first(rest - 16), src + 2 * p + 16);
      // Rounded to nearest even; lo's 16 values land in the low half: consecutive pairs.
      const __m512bh w = _mm512_cvtne2ps_pbh(hi, lo);
      _mm512_mask_storeu_epi32(dst + p, first(pairs - p), reinterpret_cast<const __m512i&>(w));
    }
}

LOOM_AVX512_BF16 void pack_pairs(const float* src, int64_t ld, int64_t k, int64_t n, uint32_t* dst,
                                 int64_t ldd) {
  // bf16 element 2i of the result is element i of the even row, 2i+1 element i of the odd row.
  alignas(64) static const uint16_t kInterleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,
                                                        21, 6, 22, 7, 23, 8,  24, 9,  25, 10, 26,
                                                        11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(kInterleave);
  for (int64_t p = 0; p < (k + 1) / 2; ++p) {
    const float* even = src + 2 * p * ld;
    const float* odd = 2 * p + 1 < k ? even + ld : nullptr;
    for (int64_t c = 0; c < n; c += 16) {
      const __mmask16 m = first(n - c);
      const __m512 x0 = _mm512_maskz_loadu_ps(m, even + c);
      const __m512 x1 = odd ? _mm512_maskz_loadu_ps(m, odd + c) : _mm512_setzero_ps();
      const __m512bh w = _mm512_cvtne2ps_pbh(x1, x0);
      const __m512i words = _mm512_permutexvar_epi16(idx, reinterpret_cast<const __m512i&>(w));
      _mm512_mask_storeu_epi32(dst + p * ldd + c, m, words);
    }
  }
}

LOOM_AVX512_BF16 void pack_cols(const float* src, int64_t ld, int64_t n, int64_t k, uint32_t* dst,
                                int64_t ldd) {
  // 16 rows at a time as A words, then each word column gathered into one B row.
  const int64_t pairs = (k + 1) / 2;
  thread_local std::vector<uint32_t> rows16;
  rows16.resize(static_cast<size_t>(16 * pairs));
  const __m512i lanes = _mm512_mullo_epi32(
      _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
      _mm512_set1_epi32(static_cast<int>(pairs)));
  for (int64_t j = 0; j < n; j += 16) {
    const int64_t rows = std::min<int64_t>(16, n - j);
    const __mmask16 m = first(rows);
    pack_rows(src + j * ld, ld, rows, k, rows16.data());
    for (int64_t p = 0; p < pairs; ++p) {
      const __m512i w = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), m, lanes,
                                                    rows16.data() + p, 4);
      _mm512_mask_storeu_epi32(dst + p * ldd + j, m, w);
    }
  }
}

LOOM_AVX512_BF16 void gemm(int64_t m, int64_t n, int64_t pairs, float alpha, const uint32_t* a,
                           int64_t a_row, int64_t a_inner, const uint32_t* b, int64_t ldb,
                           float beta, float* c, int64_t ldc) {
  for (int64_t c0 = 0; c0 < n; c0 += 32) {
    const int64_t cols = std::min<int64_t>(32, n - c0);
    const BlockFn* fns = cols > 16 ? kBlocks<2> : kBlocks<1>;
    for (int64_t r0 = 0; r0 < m; r0 += kRows) {
      const int64_t rows = std::min<int64_t>(kRows, m - r0);
      fns[rows](pairs, a + r0 * a_row, a_row, a_inner, b + c0, ldb, cols, alpha, beta,
                c + r0 * ldc + c0, ldc);
    }
  }
}

}  // namespace loom::kernels::cpu::bf16_tiles
