#include "loom/kernels/cpu/attention_decode.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/attention.h"
#include "loom/kernels/cpu/attention_ranges.h"
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

// One (sequence b, KV head g): its G query heads × Sq rows (row r = head·Sq + i) against the keys
// [lo, hi) their intervals cover: S = scale·Q·Kᵀ, each row's softmax over its own interval (the
// rest of its row zeroed), O = P·V / row sum. Keys and values are read once for the whole group.
template <typename T>
void group(const Dims& d, int64_t b, int64_t g, const Rows<T>& q, const Rows<T>& k, const Rows<T>& v,
           const int64_t* ranges, float scale, T* out, float* lse) {
  const int64_t n_rows = d.G * d.Sq;
  int64_t lo = attention_detail::kNoKey, hi = 0;
  for (int64_t i = 0; i < d.Sq; ++i) {
    const int64_t* r = ranges + 2 * (b * d.Sq + i);
    if (r[0] < r[1]) {
      lo = std::min(lo, r[0]);
      hi = std::max(hi, r[1]);
    }
  }
  const int64_t span = std::max<int64_t>(hi - lo, 0);
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
    if (sums[r] > 0) vec::scale_row(&acc[r * d.Dv], d.Dv, 1.0f / sums[r]);
    else lse[(b * d.H + head) * d.Sq + i] = -INFINITY;  // no visible key: zeros, not 0/0
    vec::narrow_row(&acc[r * d.Dv], out + ((b * d.Sq + i) * d.H + head) * d.Dv, d.Dv);
  }
}

template <typename T>
void run(const Dims& d, const Tensor& q, const Tensor& k, const Tensor& v, const int64_t* ranges, float scale,
         Tensor& out, Tensor& lse) {
  const Rows<T> qr = rows_of<T>(q), kr = rows_of<T>(k), vr = rows_of<T>(v);
  T* o = static_cast<T*>(out.raw_data());
  float* l = lse.data<float>();
  // A group reads Sk·(D + Dv) values; below ~16K a thread's start costs more than its share.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(d.Sk * (d.D + d.Dv), 1));
  parallel_for(0, d.B * d.KV, grain, [&](int64_t first, int64_t last) {
    for (int64_t item = first; item < last; ++item) group<T>(d, item / d.KV, item % d.KV, qr, kr, vr, ranges, scale, o, l);
  });
}

}  // namespace

AttentionForwardResult decode_attention_forward(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                                double scale, const AttentionMask& mask) {
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
  switch (q.dtype()) {
    case DType::bf16: run<bf16>(d, q, k, v, ranges.data<int64_t>(), s, res.out, res.lse); break;
    case DType::f16: run<f16>(d, q, k, v, ranges.data<int64_t>(), s, res.out, res.lse); break;
    default: run<float>(d, q, k, v, ranges.data<int64_t>(), s, res.out, res.lse); break;
  }
  return res;
}

}  // namespace loom::kernels::cpu
