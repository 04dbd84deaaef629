#include "loom/kernels/cpu/attention.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/vec.h"

namespace loom::kernels::cpu {
namespace {

constexpr int64_t kNoKey = std::numeric_limits<int64_t>::max();

// ---- BLAS on raw tiles (row-major); OpenBLAS runs single-threaded inside our parallel region --

void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
               int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

void tile_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double* a,
               int64_t lda, const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              static_cast<blasint>(m), static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// ---- Row primitives: vectorised for float (vec.h), plain loops for the exact f64 path ----------

float row_max(const float* x, int64_t n) { return vec::row_max(x, n); }
double row_max(const double* x, int64_t n) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}
float exp_shift_sum(float* x, int64_t n, float shift) { return vec::exp_shift_sum(x, n, shift); }
double exp_shift_sum(double* x, int64_t n, double shift) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - shift));
  return sum;
}
void scale_row(float* x, int64_t n, float a) { vec::scale_row(x, n, a); }
void scale_row(double* x, int64_t n, double a) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}
float dot(const float* a, const float* b, int64_t n) { return vec::dot(a, b, n); }
double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
void mul_sub(float* p, const float* d, float c, int64_t n) { vec::mul_sub(p, d, c, n); }
void mul_sub(double* p, const double* d, double c, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = p[i] * (d[i] - c);
}

template <typename T>
void zero(T* x, int64_t n) {
  std::fill(x, x + n, T(0));
}

// Writes n compute-type values to a row of `dst` (same dtype: copy; bf16/f16: rounded once).
template <typename T>
void store_row(const T* src, const Tensor& dst, int64_t element, int64_t n) {
  LOOM_DISPATCH_FLOATING(dst.dtype(), "attention", [&] {
    if constexpr (std::is_same_v<scalar_t, double> != std::is_same_v<T, double>) {
      LOOM_ASSERT(false, "attention: f64 and f32 compute paths mixed");
    } else {
      vec::narrow_row(src, static_cast<scalar_t*>(dst.raw_data()) + element, n);
    }
  });
}

// ---- Operands --------------------------------------------------------------------------------

// A [B, S, heads, width] operand in the compute type, read in place when its last dim is dense.
template <typename T>
struct Operand {
  Tensor holder;
  const T* data = nullptr;
  int64_t sb = 0, ss = 0, sh = 0;
  const T* at(int64_t b, int64_t s, int64_t h) const { return data + b * sb + s * ss + h * sh; }
};

// Contiguous fp32 copy of a bf16/f16 tensor (vectorised widening), or a dtype/layout copy.
Tensor to_compute_contiguous(const Tensor& t, DType compute) {
  Tensor src = t.contiguous();
  if (compute != DType::f32 || (t.dtype() != DType::bf16 && t.dtype() != DType::f16))
    return src.to(compute).contiguous();
  Tensor dst = Tensor::empty(t.shape(), DType::f32);
  float* d = dst.data<float>();
  const int64_t n = t.numel();
  parallel_for(0, n, 1 << 16, [&](int64_t b, int64_t e) {
    if (t.dtype() == DType::bf16) vec::widen_row(src.data<bf16>() + b, d + b, e - b);
    else vec::widen_row(src.data<f16>() + b, d + b, e - b);
  });
  return dst;
}

template <typename T>
Operand<T> make_operand(const Tensor& t) {
  const DType compute = dtype_of<T>::value;
  const int64_t S = t.size(1), W = t.size(3);
  const bool in_place = t.dtype() == compute && t.stride(3) == 1 && t.stride(0) >= 0 &&
                        t.stride(2) >= 0 && (S <= 1 || t.stride(1) >= W);
  Operand<T> op;
  op.holder = in_place ? t : to_compute_contiguous(t, compute);
  op.data = static_cast<const T*>(op.holder.raw_data());
  op.sb = op.holder.stride(0);
  op.sh = op.holder.stride(2);
  // BLAS wants a leading dimension >= the row width even when there is a single row.
  op.ss = S <= 1 ? std::max<int64_t>(W, 1) : op.holder.stride(1);
  return op;
}

// ---- Masks as per-row key intervals ----------------------------------------------------------

std::vector<int64_t> read_doc_ends(const Tensor& doc_ends, int64_t B, int64_t Sk) {
  LOOM_CHECK(doc_ends.dim() == 2 && doc_ends.size(0) == B && doc_ends.size(1) >= 1, ShapeError,
             "attention: doc_ends must be [batch, num_docs] = [", B, ", K>=1], got ",
             doc_ends.shape().str(), " (one row of ascending document ends per sample)");
  LOOM_CHECK(doc_ends.dtype() == DType::i32 || doc_ends.dtype() == DType::i64, DTypeError,
             "attention: doc_ends must be int32 or int64, got ", dtype_name(doc_ends.dtype()));
  std::vector<int64_t> ends = doc_ends.to_int_vector();
  const int64_t K = doc_ends.size(1);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t d = 0; d < K; ++d) {
      const int64_t e = ends[b * K + d];
      LOOM_CHECK(e >= 0 && e <= Sk, ValueError, "attention: doc_ends[", b, "][", d, "] = ", e,
                 " is outside [0, ", Sk, "]: document ends are exclusive key positions, padded "
                 "with the key sequence length ", Sk);
      LOOM_CHECK(d == 0 || e >= ends[b * K + d - 1], ValueError, "attention: doc_ends[", b, "][",
                 d, "] = ", e, " is smaller than doc_ends[", b, "][", d - 1, "] = ",
                 ends[b * K + d - 1], ": document ends must be ascending (pad with ", Sk, ")");
    }
  return ends;
}

// The caller's own intervals (AttentionMask::key_ranges), checked and made dense.
Tensor given_ranges(const Tensor& key_ranges, int64_t B, int64_t Sq, int64_t Sk) {
  LOOM_CHECK(key_ranges.dim() == 3 && key_ranges.size(0) == B && key_ranges.size(1) == Sq &&
                 key_ranges.size(2) == 2,
             ShapeError, "attention: key_ranges must be [batch, q_len, 2] = [", B, ", ", Sq,
             ", 2], got ", key_ranges.shape().str());
  LOOM_CHECK(key_ranges.dtype() == DType::i64, DTypeError, "attention: key_ranges must be int64, got ",
             dtype_name(key_ranges.dtype()));
  Tensor ranges = key_ranges.contiguous().view({B * Sq * 2});
  if (ranges.data<int64_t>() == key_ranges.data<int64_t>()) ranges = ranges.clone();
  int64_t* r = ranges.data<int64_t>();
  for (int64_t row = 0; row < B * Sq; ++row) {
    const int64_t lo = r[2 * row], hi = r[2 * row + 1];
    LOOM_CHECK(lo >= 0 && hi <= Sk, ValueError, "attention: key_ranges row ", row, " = [", lo, ", ", hi,
               ") is outside [0, ", Sk, "] (the key sequence length)");
    if (hi <= lo) r[2 * row] = r[2 * row + 1] = 0;
  }
  return ranges;
}

// ranges[2·(b·Sq + i) + {0, 1}] = [lo, hi): the keys query row i of sample b may see.
Tensor row_ranges(const AttentionMask& mask, int64_t B, int64_t Sq, int64_t Sk) {
  if (mask.key_ranges.defined()) return given_ranges(mask.key_ranges, B, Sq, Sk);
  std::vector<int64_t> ends;
  int64_t K = 0;
  if (mask.doc_ends.defined()) {
    ends = read_doc_ends(mask.doc_ends, B, Sk);
    K = mask.doc_ends.size(1);
  }
  Tensor ranges = Tensor::empty({B * Sq * 2}, DType::i64);
  int64_t* r = ranges.data<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t* e = K ? ends.data() + b * K : nullptr;
    for (int64_t i = 0; i < Sq; ++i) {
      const int64_t p = i + mask.q_offset;
      int64_t lo = 0, hi = Sk;
      if (mask.causal) hi = std::clamp<int64_t>(p + 1, 0, Sk);
      if (e) {
        if (p < 0 || p >= e[K - 1]) {
          hi = 0;
        } else {
          const int64_t d = std::upper_bound(e, e + K, p) - e;
          lo = d ? e[d - 1] : 0;
          hi = std::min(hi, e[d]);
        }
      }
      if (hi <= lo) lo = hi = 0;
      r[2 * (b * Sq + i)] = lo;
      r[2 * (b * Sq + i) + 1] = hi;
    }
  }
  return ranges;
}

// Keys touched by a block of query rows ([lo, hi), empty when lo >= hi) and the window every
// row of the block sees (tiles inside it need no masking).
struct BlockKeys {
  int64_t lo = kNoKey, hi = 0, all_lo = 0, all_hi = kNoKey;
};

BlockKeys block_keys(const int64_t* ranges, int64_t n) {
  BlockKeys k;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t lo = ranges[2 * r], hi = ranges[2 * r + 1];
    if (lo < hi) {
      k.lo = std::min(k.lo, lo);
      k.hi = std::max(k.hi, hi);
    }
    k.all_lo = std::max(k.all_lo, lo);
    k.all_hi = std::min(k.all_hi, hi);
  }
  if (k.all_hi <= k.all_lo) k.all_lo = k.all_hi = 0;
  return k;
}

// Visible columns of row r in the tile [j0, j0 + jn).
inline void visible_cols(const int64_t* range, int64_t j0, int64_t jn, int64_t& c0, int64_t& c1) {
  c0 = std::clamp<int64_t>(range[0] - j0, 0, jn);
  c1 = std::clamp<int64_t>(range[1] - j0, 0, jn);
}

// Below ~2 MFLOP a parallel region costs more than it saves (results do not depend on it).
int threads_for(int64_t items, double flops) {
  if (omp_in_parallel() || flops < 2e6) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), items)));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t m) { return ceil_div(a, m) * m; }

struct Dims {
  int64_t B, Sq, Sk, H, KV, D, Dv, G;
};

Dims dims_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  Dims d{q.size(0), q.size(1), k.size(1), q.size(2), k.size(2), q.size(3), v.size(3), 1};
  d.G = d.KV ? d.H / d.KV : 1;
  return d;
}

// ---- Forward ---------------------------------------------------------------------------------

template <typename T>
void forward_impl(const Tensor& qt, const Tensor& kt, const Tensor& vt, double scale_d,
                  const AttentionMask& mask, const AttentionTiles& tiles, Tensor& out, Tensor& lse,
                  float* head_max) {
  const Dims d = dims_of(qt, kt, vt);
  const T scale = static_cast<T>(scale_d);
  const Operand<T> q = make_operand<T>(qt), k = make_operand<T>(kt), v = make_operand<T>(vt);
  const Tensor ranges_t = row_ranges(mask, d.B, d.Sq, d.Sk);
  const int64_t* ranges = ranges_t.data<int64_t>();
  const int64_t Bq = tiles.fwd_q_block, Bk = tiles.fwd_k_block;
  const int64_t nqb = ceil_div(d.Sq, Bq);
  const int64_t items = nqb * d.B * d.H;
  const int nt = threads_for(items, 2.0 * d.B * d.H * d.Sq * d.Sk * (d.D + d.Dv));
  // Per thread: S/P tile [Bq, Bk], O accumulator [Bq, Dv], running max and sum [Bq] each.
  const int64_t ws_size = round_up(Bq * Bk + Bq * d.Dv + 2 * Bq, 16);
  Tensor ws_t = Tensor::empty({nt, ws_size}, dtype_of<T>::value);
  std::vector<float> thread_max(static_cast<size_t>(nt * d.H), -INFINITY);
  T* lse_p = lse.data<T>();
  const T neg_inf = -std::numeric_limits<T>::infinity();

#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    T* S = ws_t.data<T>() + tid * ws_size;
    T* O = S + Bq * Bk;
    T* m = O + Bq * d.Dv;
    T* l = m + Bq;
    float* hmax = thread_max.data() + tid * d.H;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      // Latest (for causal: largest) q blocks first so the dynamic schedule ends balanced.
      const int64_t qb = nqb - 1 - it / (d.B * d.H);
      const int64_t b = (it % (d.B * d.H)) / d.H, h = it % d.H, kvh = h / d.G;
      const int64_t i0 = qb * Bq, n = std::min(Bq, d.Sq - i0);
      const int64_t* rr = ranges + 2 * (b * d.Sq + i0);
      const BlockKeys keys = block_keys(rr, n);
      zero(O, n * d.Dv);
      std::fill(m, m + n, neg_inf);
      zero(l, n);
      const T* qp = q.at(b, i0, h);
      for (int64_t j0 = keys.lo; j0 < keys.hi; j0 += Bk) {
        const int64_t jn = std::min(Bk, keys.hi - j0);
        tile_gemm(false, true, n, jn, d.D, scale, qp, q.ss, k.at(b, j0, kvh), k.ss, T(0), S, Bk);
        const bool unmasked = j0 >= keys.all_lo && j0 + jn <= keys.all_hi;
        for (int64_t r = 0; r < n; ++r) {
          T* srow = S + r * Bk;
          int64_t c0 = 0, c1 = jn;
          if (!unmasked) visible_cols(rr + 2 * r, j0, jn, c0, c1);
          if (c0 >= c1) {
            zero(srow, jn);
            continue;
          }
          const T m_new = std::max(m[r], row_max(srow + c0, c1 - c0));
          const T sum = exp_shift_sum(srow + c0, c1 - c0, m_new);
          zero(srow, c0);
          zero(srow + c1, jn - c1);
          if (l[r] > 0 && m_new != m[r]) {
            const T alpha = std::exp(m[r] - m_new);
            l[r] *= alpha;
            scale_row(O + r * d.Dv, d.Dv, alpha);
          }
          l[r] += sum;
          m[r] = m_new;
        }
        tile_gemm(false, false, n, d.Dv, jn, T(1), S, Bk, v.at(b, j0, kvh), v.ss, T(1), O, d.Dv);
      }
      for (int64_t r = 0; r < n; ++r) {
        T* orow = O + r * d.Dv;
        T* lse_row = lse_p + (b * d.H + h) * d.Sq + i0 + r;
        if (l[r] > 0) {
          scale_row(orow, d.Dv, T(1) / l[r]);
          *lse_row = m[r] + std::log(l[r]);
          hmax[h] = std::max(hmax[h], static_cast<float>(m[r]));
        } else {
          zero(orow, d.Dv);  // no visible key: zeros, not 0/0
          *lse_row = neg_inf;
        }
        store_row(orow, out, ((b * d.Sq + i0 + r) * d.H + h) * d.Dv, d.Dv);
      }
    }
  }
  if (head_max)
    for (int t = 0; t < nt; ++t)
      for (int64_t h = 0; h < d.H; ++h) head_max[h] = std::max(head_max[h], thread_max[t * d.H + h]);
}

// ---- Backward --------------------------------------------------------------------------------

// Key chunks per (batch, kv head): a function of the shape only (never of the thread count), so
// that the dQ partial sums, added in chunk order, give the same bits on any number of threads.
// Enough chunks for ~16 threads when batch·kv_heads is small, at most 4 dQ partial buffers.
int64_t num_key_chunks(const Dims& d, int64_t num_k_blocks) {
  const int64_t want = ceil_div(16, std::max<int64_t>(d.B * d.KV, 1));
  return std::max<int64_t>(1, std::min({num_k_blocks, int64_t{4}, want}));
}

template <typename T>
void backward_impl(const Tensor& dout_t, const Tensor& qt, const Tensor& kt, const Tensor& vt,
                   const Tensor& out_t, const Tensor& lse_t, double scale_d,
                   const AttentionMask& mask, const AttentionTiles& tiles, AttentionGrads& g) {
  const Dims d = dims_of(qt, kt, vt);
  const T scale = static_cast<T>(scale_d);
  const DType compute = dtype_of<T>::value;
  const Operand<T> q = make_operand<T>(qt), k = make_operand<T>(kt), v = make_operand<T>(vt);
  const Operand<T> dO = make_operand<T>(dout_t);
  const Tensor lse_c = lse_t.dtype() == compute ? lse_t.contiguous() : lse_t.to(compute).contiguous();
  const T* lse = lse_c.data<T>();
  const Tensor ranges_t = row_ranges(mask, d.B, d.Sq, d.Sk);
  const int64_t* ranges = ranges_t.data<int64_t>();
  const int64_t Bq = tiles.bwd_q_block, Bk = tiles.bwd_k_block;
  const int64_t nqb = ceil_div(d.Sq, Bq), nkb = ceil_div(d.Sk, Bk);

  // D_i = rowsum(dO ∘ O) per (b, h, i), from the stored (rounded) output.
  Tensor delta_t = Tensor::empty({d.B, d.H, d.Sq}, compute);
  {
    const Operand<T> o = make_operand<T>(out_t);
    T* delta = delta_t.data<T>();
    parallel_for(0, d.B * d.Sq, std::max<int64_t>(1, 4096 / std::max<int64_t>(d.H * d.Dv, 1)),
                 [&](int64_t s, int64_t e) {
                   for (int64_t bi = s; bi < e; ++bi) {
                     const int64_t b = bi / d.Sq, i = bi % d.Sq;
                     for (int64_t h = 0; h < d.H; ++h)
                       delta[(b * d.H + h) * d.Sq + i] = dot(dO.at(b, i, h), o.at(b, i, h), d.Dv);
                   }
                 });
  }
  const T* delta = delta_t.data<T>();

  // Keys per q block, shared by every work item.
  std::vector<BlockKeys> qblock_keys(static_cast<size_t>(d.B * nqb));
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t qb = 0; qb < nqb; ++qb)
      qblock_keys[b * nqb + qb] =
          block_keys(ranges + 2 * (b * d.Sq + qb * Bq), std::min(Bq, d.Sq - qb * Bq));

  const int64_t nc = num_key_chunks(d, nkb);
  g.dq = Tensor::empty(qt.shape(), qt.dtype());
  g.dk = Tensor::empty(kt.shape(), kt.dtype());
  g.dv = Tensor::empty(vt.shape(), vt.dtype());
  // dQ accumulates in the compute type: straight into dq when it can, else one buffer per chunk.
  const bool dq_direct = nc == 1 && qt.dtype() == compute;
  Tensor dq_acc = dq_direct ? g.dq : Tensor::empty({nc, d.B, d.Sq, d.H, d.D}, compute);
  dq_acc.zero_();
  T* dq_base = dq_acc.data<T>();
  const int64_t dq_chunk_stride = d.B * d.Sq * d.H * d.D;
  const int64_t ldq = d.H * d.D;

  const int64_t items = nc * d.B * d.KV;
  const int nt = threads_for(items, 5.0 * d.B * d.H * d.Sq * d.Sk * (d.D + d.Dv));
  // Per thread: P/dS tile and dP tile [Bq, Bk], dK and dV accumulators [Bk, D] / [Bk, Dv].
  const int64_t ws_size = round_up(2 * Bq * Bk + Bk * d.D + Bk * d.Dv, 16);
  Tensor ws_t = Tensor::empty({nt, ws_size}, compute);

#pragma omp parallel num_threads(nt)
  {
    T* P = ws_t.data<T>() + omp_get_thread_num() * ws_size;
    T* dP = P + Bq * Bk;
    T* dK = dP + Bq * Bk;
    T* dV = dK + Bk * d.D;
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      // Chunk-major: the first key chunks carry the most work under a causal mask.
      const int64_t c = it / (d.B * d.KV), b = (it / d.KV) % d.B, kvh = it % d.KV;
      T* dq_chunk = dq_base + (dq_direct ? 0 : c * dq_chunk_stride);
      for (int64_t kb = c * nkb / nc; kb < (c + 1) * nkb / nc; ++kb) {
        const int64_t j0 = kb * Bk, jn = std::min(Bk, d.Sk - j0);
        const T* kp = k.at(b, j0, kvh);
        const T* vp = v.at(b, j0, kvh);
        zero(dK, jn * d.D);
        zero(dV, jn * d.Dv);
        for (int64_t h = kvh * d.G; h < (kvh + 1) * d.G; ++h) {
          for (int64_t qb = 0; qb < nqb; ++qb) {
            const BlockKeys& keys = qblock_keys[b * nqb + qb];
            if (keys.hi <= j0 || keys.lo >= j0 + jn) continue;
            const int64_t i0 = qb * Bq, n = std::min(Bq, d.Sq - i0);
            const int64_t* rr = ranges + 2 * (b * d.Sq + i0);
            const T* lse_row = lse + (b * d.H + h) * d.Sq + i0;
            const T* delta_row = delta + (b * d.H + h) * d.Sq + i0;
            const T* qp = q.at(b, i0, h);
            const T* dop = dO.at(b, i0, h);
            const bool unmasked = j0 >= keys.all_lo && j0 + jn <= keys.all_hi;
            // P = exp(scale·Q Kᵀ − lse), recomputed from the forward's log-sum-exp.
            tile_gemm(false, true, n, jn, d.D, scale, qp, q.ss, kp, k.ss, T(0), P, Bk);
            for (int64_t r = 0; r < n; ++r) {
              T* prow = P + r * Bk;
              int64_t c0 = 0, c1 = jn;
              if (!unmasked) visible_cols(rr + 2 * r, j0, jn, c0, c1);
              if (c0 >= c1) {
                zero(prow, jn);
                continue;
              }
              exp_shift_sum(prow + c0, c1 - c0, lse_row[r]);
              zero(prow, c0);
              zero(prow + c1, jn - c1);
            }
            // dV += Pᵀ dO ; dP = dO Vᵀ ; dS = P ∘ (dP − D) ; dQ += s·dS K ; dK += s·dSᵀ Q.
            tile_gemm(true, false, jn, d.Dv, n, T(1), P, Bk, dop, dO.ss, T(1), dV, d.Dv);
            tile_gemm(false, true, n, jn, d.Dv, T(1), dop, dO.ss, vp, v.ss, T(0), dP, Bk);
            for (int64_t r = 0; r < n; ++r) {
              int64_t c0 = 0, c1 = jn;
              if (!unmasked) visible_cols(rr + 2 * r, j0, jn, c0, c1);
              if (c0 < c1) mul_sub(P + r * Bk + c0, dP + r * Bk + c0, delta_row[r], c1 - c0);
            }
            tile_gemm(false, false, n, d.D, jn, scale, P, Bk, kp, k.ss, T(1),
                      dq_chunk + (b * d.Sq + i0) * ldq + h * d.D, ldq);
            tile_gemm(true, false, jn, d.D, n, scale, P, Bk, qp, q.ss, T(1), dK, d.D);
          }
        }
        for (int64_t r = 0; r < jn; ++r) {
          store_row(dK + r * d.D, g.dk, ((b * d.Sk + j0 + r) * d.KV + kvh) * d.D, d.D);
          store_row(dV + r * d.Dv, g.dv, ((b * d.Sk + j0 + r) * d.KV + kvh) * d.Dv, d.Dv);
        }
      }
    }
  }

  if (!dq_direct) {
    // dQ = Σ_c partial_c in chunk order, then one rounding to q's dtype.
    const int64_t rows = d.B * d.Sq, width = d.H * d.D;
    parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(width, 1)),
                 [&](int64_t s, int64_t e) {
                   std::vector<T> acc(static_cast<size_t>(width));
                   for (int64_t row = s; row < e; ++row) {
                     const T* src = dq_base + row * width;
                     std::copy(src, src + width, acc.begin());
                     for (int64_t c = 1; c < nc; ++c) {
                       const T* part = src + c * dq_chunk_stride;
                       for (int64_t x = 0; x < width; ++x) acc[x] += part[x];
                     }
                     store_row(acc.data(), g.dq, row * width, width);
                   }
                 });
  }
}

template <typename T>
void merge_impl(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  const int64_t B = out.size(0), Sq = out.size(1), H = out.size(2), Dv = out.size(3);
  const Tensor bo = block_out.dtype() == out.dtype() ? block_out.contiguous() : block_out.to(out.dtype()).contiguous();
  const Tensor bl = block_lse.dtype() == lse.dtype() ? block_lse.contiguous() : block_lse.to(lse.dtype()).contiguous();
  T* o = out.data<T>();
  T* l = lse.data<T>();
  const T* po = bo.data<T>();
  const T* pl = bl.data<T>();
  const T neg_inf = -std::numeric_limits<T>::infinity();
  parallel_for(0, B * Sq, std::max<int64_t>(1, 4096 / std::max<int64_t>(H * Dv, 1)), [&](int64_t s, int64_t e) {
    for (int64_t bi = s; bi < e; ++bi) {
      const int64_t b = bi / Sq, i = bi % Sq;
      for (int64_t h = 0; h < H; ++h) {
        T& run = l[(b * H + h) * Sq + i];
        const T add = pl[(b * H + h) * Sq + i];
        if (add == neg_inf) continue;  // the block hides every key of this row
        T* orow = o + ((b * Sq + i) * H + h) * Dv;
        const T* brow = po + ((b * Sq + i) * H + h) * Dv;
        if (run == neg_inf) {
          std::copy(brow, brow + Dv, orow);
          run = add;
          continue;
        }
        const T m = std::max(run, add);
        const T a = std::exp(run - m), c = std::exp(add - m), sum = a + c;
        const T wa = a / sum, wc = c / sum;
        for (int64_t x = 0; x < Dv; ++x) orow[x] = wa * orow[x] + wc * brow[x];
        run = m + std::log(sum);
      }
    }
  });
}

}  // namespace

void attention_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse) {
  LOOM_ASSERT(out.dim() == 4 && lse.dim() == 3 && out.is_contiguous() && lse.is_contiguous(),
              "attention_merge needs a contiguous [B, Sq, H, Dv] output and [B, H, Sq] lse");
  LOOM_ASSERT(block_out.shape() == out.shape() && block_lse.shape() == lse.shape(), "attention_merge: block ",
              block_out.shape().str(), " / ", block_lse.shape().str(), " vs running ", out.shape().str(), " / ",
              lse.shape().str());
  LOOM_ASSERT(out.dtype() == lse.dtype() && (out.dtype() == DType::f32 || out.dtype() == DType::f64),
              "attention_merge accumulates in f32 or f64");
  if (out.dtype() == DType::f64) merge_impl<double>(out, lse, block_out, block_lse);
  else merge_impl<float>(out, lse, block_out, block_lse);
}

AttentionForwardResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                         double scale, const AttentionMask& mask,
                                         bool track_max_logits, const AttentionTiles& tiles) {
  LOOM_ASSERT(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention kernel needs 4-D operands");
  LOOM_ASSERT(tiles.fwd_q_block > 0 && tiles.fwd_k_block > 0, "attention tiles must be positive");
  const Dims d = dims_of(q, k, v);
  const bool f64 = q.dtype() == DType::f64;
  AttentionForwardResult res;
  res.out = Tensor::empty({d.B, d.Sq, d.H, d.Dv}, q.dtype());
  res.lse = Tensor::empty({d.B, d.H, d.Sq}, f64 ? DType::f64 : DType::f32);
  std::vector<float> head_max(static_cast<size_t>(d.H), -INFINITY);
  float* hm = track_max_logits ? head_max.data() : nullptr;
  if (f64) forward_impl<double>(q, k, v, scale, mask, tiles, res.out, res.lse, hm);
  else forward_impl<float>(q, k, v, scale, mask, tiles, res.out, res.lse, hm);
  if (track_max_logits) res.max_logits = Tensor::from_vector(head_max, {d.H}, DType::f32);
  return res;
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  double scale, const AttentionMask& mask,
                                  const AttentionTiles& tiles) {
  LOOM_ASSERT(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention kernel needs 4-D operands");
  LOOM_ASSERT(tiles.bwd_q_block > 0 && tiles.bwd_k_block > 0, "attention tiles must be positive");
  LOOM_ASSERT(dout.shape() == out.shape(), "attention backward: grad ", dout.shape().str(),
              " vs output ", out.shape().str());
  AttentionGrads g;
  if (q.dtype() == DType::f64) backward_impl<double>(dout, q, k, v, out, lse, scale, mask, tiles, g);
  else backward_impl<float>(dout, q, k, v, out, lse, scale, mask, tiles, g);
  return g;
}

}  // namespace loom::kernels::cpu
