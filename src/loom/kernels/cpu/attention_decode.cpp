#include "loom/kernels/cpu/attention_decode.h"

#include <cblas.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/attention.h"
#include "loom/kernels/cpu/attention_ranges.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/kernels/cpu/vec.h"

namespace loom::kernels::cpu {

namespace {

using attention_detail::row_ranges;

// A [B, S, heads, width] operand read in place: element (b, s, h, 0) and its dense row.
template <typename T>
struct Rows {
  const T* data;
  int64_t sb, ss, sh;
  const T* at(int64_t b, int64_t s, int64_t h) const { return data + b * sb + s * ss + h * sh; }
};

template <typename T>
Rows<T> rows_of(const Tensor& t) {
  return {static_cast<const T*>(t.raw_data()), t.stride(0), t.stride(1), t.stride(2)};
}

struct Dims {
  int64_t B, Sq, Sk, H, KV, G, D, Dv;
};

// Keys or values [j0, j0 + n) at (b, ·, h) as an fp32 matrix with leading dimension *ld: f32
// rows where they are, others widened into `buf` (a block at a time, so it stays in cache).
template <typename T>
const float* block_f32(const Rows<T>& t, int64_t b, int64_t h, int64_t j0, int64_t n, int64_t width, float* buf,
                       int64_t* ld) {
  if constexpr (std::is_same_v<T, float>) {
    *ld = t.ss;
    return t.at(b, j0, h);
  } else {
    for (int64_t j = 0; j < n; ++j) vec::widen_row(t.at(b, j0 + j, h), buf + j * width, width);
    *ld = width;
    return buf;
  }
}

void sgemm(bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

// Keys per block of the products: 64 widened rows of 128 are 32 KiB.
constexpr int64_t kKeyBlock = 64;

// The keys the group's rows see together: the union [lo, hi) of their intervals (empty: lo = hi).
struct KeySpan {
  int64_t lo = 0, hi = 0;
};

KeySpan key_span(const Dims& d, int64_t b, const int64_t* ranges) {
  int64_t lo = attention_detail::kNoKey, hi = 0;
  for (int64_t i = 0; i < d.Sq; ++i) {
    const int64_t* r = ranges + 2 * (b * d.Sq + i);
    if (r[0] < r[1]) {
      lo = std::min(lo, r[0]);
      hi = std::max(hi, r[1]);
    }
  }
  return lo < hi ? KeySpan{lo, hi} : KeySpan{};
}

// A row's weighted sum of values divided by its softmax sum (zeros for a row that saw no key).
template <typename T>
void finish_row(float* acc, float sum, int64_t width, T* out) {
  if (sum > 0) vec::scale_row(acc, width, 1.0f / sum);
  vec::narrow_row(acc, out, width);
}

// One (sequence b, KV head g): its G query heads × Sq rows (row r = head·Sq + i) against the keys
// [lo, hi) their intervals cover: S = scale·Q·Kᵀ, each row's softmax over its own interval (the
// rest of its row zeroed), O = P·V / row sum. Keys and values are read once for the whole group.
template <typename T>
void group(const Dims& d, int64_t b, int64_t g, const Rows<T>& q, const Rows<T>& k, const Rows<T>& v,
           const int64_t* ranges, float scale, T* out, float* lse) {
  const int64_t n_rows = d.G * d.Sq;
  const auto [lo, hi] = key_span(d, b, ranges);
  const int64_t span = hi - lo;
  std::vector<float> qf(static_cast<size_t>(n_rows * d.D)), acc(static_cast<size_t>(n_rows * d.Dv), 0.0f);
  std::vector<float> sums(static_cast<size_t>(n_rows), 0.0f);
  for (int64_t h = 0; h < d.G; ++h)
    for (int64_t i = 0; i < d.Sq; ++i) vec::widen_row(q.at(b, i, g * d.G + h), &qf[(h * d.Sq + i) * d.D], d.D);
  if (span > 0) {
    auto scores = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(n_rows * span));
    auto buf = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(kKeyBlock * std::max(d.D, d.Dv)));
    int64_t ld = 0;
    for (int64_t j0 = lo; j0 < hi; j0 += kKeyBlock) {
      const int64_t n = std::min(kKeyBlock, hi - j0);
      const float* keys = block_f32(k, b, g, j0, n, d.D, buf.get(), &ld);
      sgemm(true, n_rows, n, d.D, scale, qf.data(), d.D, keys, ld, 0.0f, scores.get() + (j0 - lo), span);
    }
    for (int64_t r = 0; r < n_rows; ++r) {
      const int64_t* range = ranges + 2 * (b * d.Sq + r % d.Sq);
      float* row = scores.get() + r * span;
      const int64_t c0 = std::clamp<int64_t>(range[0] - lo, 0, span), c1 = std::clamp<int64_t>(range[1] - lo, 0, span);
      std::fill(row, row + c0, 0.0f);
      std::fill(row + std::max(c0, c1), row + span, 0.0f);
      if (c1 <= c0) continue;
      const float m = vec::row_max(row + c0, c1 - c0);
      sums[r] = vec::exp_shift_sum(row + c0, c1 - c0, m);
      lse[(b * d.H + g * d.G + r / d.Sq) * d.Sq + r % d.Sq] = m + std::log(sums[r]);
    }
    for (int64_t j0 = lo; j0 < hi; j0 += kKeyBlock) {
      const int64_t n = std::min(kKeyBlock, hi - j0);
      const float* values = block_f32(v, b, g, j0, n, d.Dv, buf.get(), &ld);
      sgemm(false, n_rows, d.Dv, n, 1.0f, scores.get() + (j0 - lo), span, values, ld, 1.0f, acc.data(), d.Dv);
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t head = g * d.G + r / d.Sq, i = r % d.Sq;
    if (sums[r] == 0) lse[(b * d.H + head) * d.Sq + i] = -INFINITY;  // no visible key: zeros, not 0/0
    finish_row(&acc[r * d.Dv], sums[r], d.Dv, out + ((b * d.Sq + i) * d.H + head) * d.Dv);
  }
}

#define LOOM_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

// The masked forms throughout: GCC 12 warns of an uninitialised operand inside the unmasked ones.
LOOM_AVX512_BF16 inline float sum16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xFF, v, 0), _mm512_maskz_extractf32x8_ps(0xFF, v, 1));
  __m128 x = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)));
}

LOOM_AVX512_BF16 inline __m512 widen16(const uint16_t* p) {
  const __m512i wide = _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, wide, 16));
}

// The same for bf16 on a CPU with AVX512-BF16 (head dims multiples of 32 and 16), reading the
// cache without widening it: each score is q·k in vdpbf16ps (bf16 products, exact, summed in
// fp32), and each row's output accumulates p·v in registers, 128 values at a time, over its keys.
LOOM_AVX512_BF16 void group_units(const Dims& d, int64_t b, int64_t g, const Rows<bf16>& q, const Rows<bf16>& k,
                                  const Rows<bf16>& v, const int64_t* ranges, float scale, bf16* out, float* lse) {
  const int64_t n_rows = d.G * d.Sq;
  const KeySpan keys = key_span(d, b, ranges);
  const int64_t span = keys.hi - keys.lo;
  auto scores = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(std::max<int64_t>(n_rows * span, 1)));
  std::vector<float> sums(static_cast<size_t>(n_rows), 0.0f), acc(static_cast<size_t>(d.Dv));
  for (int64_t j = keys.lo; j < keys.hi; ++j) {
    const auto* key = reinterpret_cast<const uint16_t*>(k.at(b, j, g));
    _mm_prefetch(reinterpret_cast<const char*>(k.at(b, j + 4, g)), _MM_HINT_T0);
    for (int64_t r = 0; r < n_rows; ++r) {
      const auto* query = reinterpret_cast<const uint16_t*>(q.at(b, r % d.Sq, g * d.G + r / d.Sq));
      __m512 dot = _mm512_setzero_ps();
      for (int64_t c = 0; c < d.D; c += 32)
        dot = _mm512_dpbf16_ps(dot, reinterpret_cast<__m512bh>(_mm512_loadu_si512(query + c)),
                               reinterpret_cast<__m512bh>(_mm512_loadu_si512(key + c)));
      scores[static_cast<size_t>(r * span + j - keys.lo)] = scale * sum16(dot);
    }
  }
  for (int64_t r = 0; r < n_rows; ++r) {
    const int64_t head = g * d.G + r / d.Sq, i = r % d.Sq;
    const int64_t* range = ranges + 2 * (b * d.Sq + i);
    float* row = scores.get() + r * span - keys.lo;  // row[j] for key j
    std::fill(acc.begin(), acc.end(), 0.0f);
    if (range[0] < range[1]) {
      const float m = vec::row_max(row + range[0], range[1] - range[0]);
      sums[static_cast<size_t>(r)] = vec::exp_shift_sum(row + range[0], range[1] - range[0], m);
      lse[(b * d.H + head) * d.Sq + i] = m + std::log(sums[static_cast<size_t>(r)]);
      for (int64_t c = 0; c < d.Dv; c += 128) {
        const int64_t width = std::min<int64_t>(128, d.Dv - c), parts = width / 16;
        __m512 o[8];
        for (int u = 0; u < 8; ++u) o[u] = _mm512_setzero_ps();
        for (int64_t j = range[0]; j < range[1]; ++j) {
          const auto* value = reinterpret_cast<const uint16_t*>(v.at(b, j, g)) + c;
          const __m512 p = _mm512_set1_ps(row[j]);
          for (int64_t u = 0; u < parts; ++u) o[u] = _mm512_fmadd_ps(p, widen16(value + 16 * u), o[u]);
        }
        for (int64_t u = 0; u < parts; ++u) _mm512_storeu_ps(&acc[static_cast<size_t>(c + 16 * u)], o[u]);
      }
    } else {
      lse[(b * d.H + head) * d.Sq + i] = -INFINITY;
    }
    finish_row(acc.data(), sums[static_cast<size_t>(r)], d.Dv, out + ((b * d.Sq + i) * d.H + head) * d.Dv);
  }
}

template <typename T>
void run(const Dims& d, const Tensor& q, const Tensor& k, const Tensor& v, const int64_t* ranges, float scale,
         bool use_units, Tensor& out, Tensor& lse) {
  const Rows<T> qr = rows_of<T>(q), kr = rows_of<T>(k), vr = rows_of<T>(v);
  T* o = static_cast<T*>(out.raw_data());
  float* l = lse.data<float>();
  // A group reads Sk·(D + Dv) values; below ~16K a thread's start costs more than its share.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(d.Sk * (d.D + d.Dv), 1));
  bool units = false;
  if constexpr (std::is_same_v<T, bf16>) units = use_units && d.D % 32 == 0 && d.Dv % 16 == 0;
  parallel_for(0, d.B * d.KV, grain, [&](int64_t first, int64_t last) {
    for (int64_t item = first; item < last; ++item) {
      if constexpr (std::is_same_v<T, bf16>) {
        if (units) {
          group_units(d, item / d.KV, item % d.KV, qr, kr, vr, ranges, scale, o, l);
          continue;
        }
      }
      group<T>(d, item / d.KV, item % d.KV, qr, kr, vr, ranges, scale, o, l);
    }
  });
}

}  // namespace

AttentionForwardResult decode_attention_forward_on(MatrixPath path, const Tensor& q_in, const Tensor& k_in,
                                                   const Tensor& v_in, double scale, const AttentionMask& mask) {
  if (q_in.dtype() == DType::f64 || q_in.size(1) > kDecodeMaxQueryRows)
    return attention_forward(q_in, k_in, v_in, scale, mask, false, AttentionTiles{});
  auto dense_rows = [](const Tensor& t) { return t.stride(3) == 1 ? t : t.contiguous(); };
  const Tensor q = dense_rows(q_in), k = dense_rows(k_in), v = dense_rows(v_in);
  Dims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), 1, q.size(3), v.size(3)};
  d.G = d.H / d.KV;
  AttentionForwardResult res;
  res.out = Tensor::empty({d.B, d.Sq, d.H, d.Dv}, q.dtype());
  res.lse = Tensor::empty({d.B, d.H, d.Sq}, DType::f32);
  const Tensor ranges = row_ranges(mask, d.B, d.Sq, d.Sk);
  const auto s = static_cast<float>(scale);
  const bool units = path != MatrixPath::fp32 && matrix_dispatch().features.avx512_bf16;
  switch (q.dtype()) {
    case DType::bf16: run<bf16>(d, q, k, v, ranges.data<int64_t>(), s, units, res.out, res.lse); break;
    case DType::f16: run<f16>(d, q, k, v, ranges.data<int64_t>(), s, false, res.out, res.lse); break;
    default: run<float>(d, q, k, v, ranges.data<int64_t>(), s, false, res.out, res.lse); break;
  }
  return res;
}

AttentionForwardResult decode_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                                const AttentionMask& mask) {
  return decode_attention_forward_on(matrix_dispatch().path, q, k, v, scale, mask);
}

}  // namespace loom::kernels::cpu
