#include "loom/kernels/cpu/attention.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/attention_bf16.h"
#include "loom/kernels/cpu/attention_ranges.h"
#include "loom/kernels/cpu/vec.h"

namespace loom::kernels::cpu {
namespace {

using namespace attention_detail;

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

// ---- bf16 tile products (attention_bf16.h) -----------------------------------------------------
// fp32 compute only: the f64 path never sets `units`, these overloads only make it compile.

namespace bt = bf16_tiles;

void pack_rows(const float* s, int64_t ld, int64_t rows, int64_t k, uint32_t* w) { bt::pack_rows(s, ld, rows, k, w); }
void pack_pairs(const float* s, int64_t ld, int64_t k, int64_t n, uint32_t* w, int64_t ldw) {
  bt::pack_pairs(s, ld, k, n, w, ldw);
}
void pack_cols(const float* s, int64_t ld, int64_t n, int64_t k, uint32_t* w, int64_t ldw) {
  bt::pack_cols(s, ld, n, k, w, ldw);
}
void units_gemm(int64_t m, int64_t n, int64_t pairs, float alpha, const uint32_t* a, int64_t a_row,
                int64_t a_inner, const uint32_t* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  bt::gemm(m, n, pairs, alpha, a, a_row, a_inner, b, ldb, beta, c, ldc);
}
[[noreturn]] void no_f64_units() { LOOM_ASSERT(false, "attention: bf16 tile products on the f64 path"); std::abort(); }
void pack_rows(const double*, int64_t, int64_t, int64_t, uint32_t*) { no_f64_units(); }
void pack_pairs(const double*, int64_t, int64_t, int64_t, uint32_t*, int64_t) { no_f64_units(); }
void pack_cols(const double*, int64_t, int64_t, int64_t, uint32_t*, int64_t) { no_f64_units(); }
void units_gemm(int64_t, int64_t, int64_t, double, const uint32_t*, int64_t, int64_t, const uint32_t*,
                int64_t, double, double*, int64_t) {
  no_f64_units();
}

int64_t pairs_of(int64_t k) { return (k + 1) / 2; }

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

// Below ~2 MFLOP a parallel region costs more than it saves (results do not depend on it).
int threads_for(int64_t items, double flops) {
  if (omp_in_parallel() || flops < 2e6) return 1;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(num_threads(), items)));
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up(int64_t a, int64_t m) { return ceil_div(a, m) * m; }
// A tile of `block` rows over `extent` rows, at least one.
int64_t fitted(int64_t block, int64_t extent) { return std::max<int64_t>(1, std::min(block, extent)); }

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
                  const AttentionMask& mask, const AttentionTiles& tiles, bool units, Tensor& out,
                  Tensor& lse, float* head_max) {
  const Dims d = dims_of(qt, kt, vt);
  const T scale = static_cast<T>(scale_d);
  const Operand<T> q = make_operand<T>(qt), k = make_operand<T>(kt), v = make_operand<T>(vt);
  const Tensor ranges_t = row_ranges(mask, d.B, d.Sq, d.Sk);
  const int64_t* ranges = ranges_t.data<int64_t>();
  // Matrix units: key tiles start at even keys (V is packed in key pairs), so an even width.
  // A tile never outgrows the sequence: the blocks are the same, and a short sequence does not
  // pay for a scratch tile sized for a long one.
  const int64_t Bq = fitted(tiles.fwd_q_block, d.Sq);
  const int64_t Bk = units ? fitted(round_up(tiles.fwd_k_block, 2), round_up(d.Sk, 2)) : fitted(tiles.fwd_k_block, d.Sk);
  const int64_t nqb = ceil_div(d.Sq, Bq);
  const int64_t items = nqb * d.B * d.H;
  const int nt = threads_for(items, 2.0 * d.B * d.H * d.Sq * d.Sk * (d.D + d.Dv));
  // Per thread: S/P tile [Bq, Bk], O accumulator [Bq, Dv], running max and sum [Bq] each.
  const int64_t ws_size = round_up(Bq * Bk + Bq * d.Dv + 2 * Bq, 16);
  Tensor ws_t = Tensor::empty({nt, ws_size}, dtype_of<T>::value);
  std::vector<float> thread_max(static_cast<size_t>(nt * d.H), -INFINITY);
  T* lse_p = lse.data<T>();
  const T neg_inf = -std::numeric_limits<T>::infinity();
  // On the matrix units K and V are packed once per (batch, kv head): Kᵀ words [D/2, Sk] and
  // key-pair words [Sk/2, Dv] (attention_bf16.h); each tile reads its columns / rows in place.
  const int64_t Dp = pairs_of(d.D), kt_size = Dp * d.Sk, v_size = pairs_of(d.Sk) * d.Dv;
  std::vector<uint32_t> kt_w, v_w;
  if (units) {
    kt_w.resize(static_cast<size_t>(d.B * d.KV * kt_size));
    v_w.resize(static_cast<size_t>(d.B * d.KV * v_size));
    parallel_for(0, d.B * d.KV, 1, [&](int64_t s, int64_t e) {
      for (int64_t bk = s; bk < e; ++bk) {
        const int64_t b = bk / d.KV, kvh = bk % d.KV;
        pack_cols(k.at(b, 0, kvh), k.ss, d.Sk, d.D, kt_w.data() + bk * kt_size, d.Sk);
        pack_pairs(v.at(b, 0, kvh), v.ss, d.Sk, d.Dv, v_w.data() + bk * v_size, d.Dv);
      }
    });
  }

#pragma omp parallel num_threads(nt)
  {
    const int tid = omp_get_thread_num();
    // Matrix units: the q block's words [Bq, D/2] and P's [Bq, Bk/2].
    std::vector<uint32_t> q_w(units ? Bq * Dp : 0), p_w(units ? Bq * pairs_of(Bk) : 0);
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
      const int64_t bk = b * d.KV + kvh;
      if (units) pack_rows(qp, q.ss, n, d.D, q_w.data());
      // Matrix units: from an even key (a key before the block's first is masked).
      for (int64_t j0 = units ? keys.lo & ~int64_t{1} : keys.lo; j0 < keys.hi; j0 += Bk) {
        const int64_t jn = std::min(Bk, keys.hi - j0);
        if (units)
          units_gemm(n, jn, Dp, scale, q_w.data(), Dp, 1, kt_w.data() + bk * kt_size + j0, d.Sk, T(0), S, Bk);
        else
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
        if (units) {
          // P rounded to bf16 only as PV's operand; the statistics above stay fp32.
          pack_rows(S, Bk, n, jn, p_w.data());
          units_gemm(n, d.Dv, pairs_of(jn), T(1), p_w.data(), pairs_of(jn), 1,
                     v_w.data() + bk * v_size + j0 / 2 * d.Dv, d.Dv, T(1), O, d.Dv);
        } else {
          tile_gemm(false, false, n, d.Dv, jn, T(1), S, Bk, v.at(b, j0, kvh), v.ss, T(1), O, d.Dv);
        }
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
                   const AttentionMask& mask, const AttentionTiles& tiles, bool units,
                   AttentionGrads& g) {
  const Dims d = dims_of(qt, kt, vt);
  const T scale = static_cast<T>(scale_d);
  const DType compute = dtype_of<T>::value;
  const Operand<T> q = make_operand<T>(qt), k = make_operand<T>(kt), v = make_operand<T>(vt);
  const Operand<T> dO = make_operand<T>(dout_t);
  const Tensor lse_c = lse_t.dtype() == compute ? lse_t.contiguous() : lse_t.to(compute).contiguous();
  const T* lse = lse_c.data<T>();
  const Tensor ranges_t = row_ranges(mask, d.B, d.Sq, d.Sk);
  const int64_t* ranges = ranges_t.data<int64_t>();
  const int64_t Bq = fitted(tiles.bwd_q_block, d.Sq), Bk = fitted(tiles.bwd_k_block, d.Sk);  // as the forward's
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
    // Matrix units (attention_bf16.h words): per key block Kᵀ, Vᵀ and K's key pairs; per q block
    // Q and dO as rows and as row pairs; Pᵀ / dSᵀ as q-row pairs and dS as rows.
    const int64_t Dp = pairs_of(d.D), Dvp = pairs_of(d.Dv), Bqp = pairs_of(Bq), Bkp = pairs_of(Bk);
    std::vector<uint32_t> w(units ? Dp * Bk + Dvp * Bk + Bkp * d.D + Bq * Dp + Bq * Dvp + Bqp * d.D +
                                        Bqp * d.Dv + Bqp * Bk + Bq * Bkp
                                  : 0);
    uint32_t* kt_w = w.data();
    uint32_t* vt_w = kt_w + Dp * Bk;
    uint32_t* kpair_w = vt_w + Dvp * Bk;
    uint32_t* q_w = kpair_w + Bkp * d.D;
    uint32_t* do_w = q_w + Bq * Dp;
    uint32_t* qpair_w = do_w + Bq * Dvp;
    uint32_t* dopair_w = qpair_w + Bqp * d.D;
    uint32_t* pt_w = dopair_w + Bqp * d.Dv;
    uint32_t* ds_w = pt_w + Bqp * Bk;
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
        if (units) {
          pack_cols(kp, k.ss, jn, d.D, kt_w, jn);
          pack_cols(vp, v.ss, jn, d.Dv, vt_w, jn);
          pack_pairs(kp, k.ss, jn, d.D, kpair_w, d.D);
        }
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
            if (units) {
              pack_rows(qp, q.ss, n, d.D, q_w);
              pack_rows(dop, dO.ss, n, d.Dv, do_w);
              pack_pairs(qp, q.ss, n, d.D, qpair_w, d.D);
              pack_pairs(dop, dO.ss, n, d.Dv, dopair_w, d.Dv);
              units_gemm(n, jn, Dp, scale, q_w, Dp, 1, kt_w, jn, T(0), P, Bk);
            } else {
              tile_gemm(false, true, n, jn, d.D, scale, qp, q.ss, kp, k.ss, T(0), P, Bk);
            }
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
            // (Matrix units: P and dS rounded to bf16 only as operands; dP, D and the sums fp32.)
            if (units) {
              pack_pairs(P, Bk, n, jn, pt_w, jn);
              units_gemm(jn, d.Dv, pairs_of(n), T(1), pt_w, 1, jn, dopair_w, d.Dv, T(1), dV, d.Dv);
              units_gemm(n, jn, Dvp, T(1), do_w, Dvp, 1, vt_w, jn, T(0), dP, Bk);
            } else {
              tile_gemm(true, false, jn, d.Dv, n, T(1), P, Bk, dop, dO.ss, T(1), dV, d.Dv);
              tile_gemm(false, true, n, jn, d.Dv, T(1), dop, dO.ss, vp, v.ss, T(0), dP, Bk);
            }
            for (int64_t r = 0; r < n; ++r) {
              int64_t c0 = 0, c1 = jn;
              if (!unmasked) visible_cols(rr + 2 * r, j0, jn, c0, c1);
              if (c0 < c1) mul_sub(P + r * Bk + c0, dP + r * Bk + c0, delta_row[r], c1 - c0);
            }
            T* dq_rows = dq_chunk + (b * d.Sq + i0) * ldq + h * d.D;
            if (units) {
              pack_rows(P, Bk, n, jn, ds_w);
              units_gemm(n, d.D, pairs_of(jn), scale, ds_w, pairs_of(jn), 1, kpair_w, d.D, T(1), dq_rows, ldq);
              pack_pairs(P, Bk, n, jn, pt_w, jn);
              units_gemm(jn, d.D, pairs_of(n), scale, pt_w, 1, jn, qpair_w, d.D, T(1), dK, d.D);
            } else {
              tile_gemm(false, false, n, d.D, jn, scale, P, Bk, kp, k.ss, T(1), dq_rows, ldq);
              tile_gemm(true, false, jn, d.D, n, scale, P, Bk, qp, q.ss, T(1), dK, d.D);
            }
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

// Whether the products run on the bf16 units: bf16 inputs on a bf16 matrix path of a CPU with
// AVX512-BF16 (an AMX path implies it on every AMX CPU; checked anyway, the micro-kernel needs it).
// Other inputs never ask the dispatch: their path cannot change.
bool on_units(const Tensor& q, std::optional<MatrixPath> path) {
  if (q.dtype() != DType::bf16) return false;
  const MatrixDispatch& d = matrix_dispatch();
  return path.value_or(d.path) != MatrixPath::fp32 && d.features.avx512_bf16;
}

AttentionForwardResult forward(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                               const AttentionMask& mask, bool track_max_logits,
                               const AttentionTiles& tiles, std::optional<MatrixPath> path) {
  LOOM_ASSERT(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention kernel needs 4-D operands");
  LOOM_ASSERT(tiles.fwd_q_block > 0 && tiles.fwd_k_block > 0, "attention tiles must be positive");
  const Dims d = dims_of(q, k, v);
  const bool f64 = q.dtype() == DType::f64;
  AttentionForwardResult res;
  res.out = Tensor::empty({d.B, d.Sq, d.H, d.Dv}, q.dtype());
  res.lse = Tensor::empty({d.B, d.H, d.Sq}, f64 ? DType::f64 : DType::f32);
  std::vector<float> head_max(static_cast<size_t>(d.H), -INFINITY);
  float* hm = track_max_logits ? head_max.data() : nullptr;
  if (f64) forward_impl<double>(q, k, v, scale, mask, tiles, false, res.out, res.lse, hm);
  else forward_impl<float>(q, k, v, scale, mask, tiles, on_units(q, path), res.out, res.lse, hm);
  if (track_max_logits) res.max_logits = Tensor::from_vector(head_max, {d.H}, DType::f32);
  return res;
}

AttentionGrads backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, double scale,
                        const AttentionMask& mask, const AttentionTiles& tiles,
                        std::optional<MatrixPath> path) {
  LOOM_ASSERT(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "attention kernel needs 4-D operands");
  LOOM_ASSERT(tiles.bwd_q_block > 0 && tiles.bwd_k_block > 0, "attention tiles must be positive");
  LOOM_ASSERT(dout.shape() == out.shape(), "attention backward: grad ", dout.shape().str(),
              " vs output ", out.shape().str());
  AttentionGrads g;
  if (q.dtype() == DType::f64) backward_impl<double>(dout, q, k, v, out, lse, scale, mask, tiles, false, g);
  else backward_impl<float>(dout, q, k, v, out, lse, scale, mask, tiles, on_units(q, path), g);
  return g;
}

}  // namespace

AttentionForwardResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                         double scale, const AttentionMask& mask,
                                         bool track_max_logits, const AttentionTiles& tiles) {
  return forward(q, k, v, scale, mask, track_max_logits, tiles, std::nullopt);
}

AttentionForwardResult attention_forward_on(MatrixPath path, const Tensor& q, const Tensor& k,
                                            const Tensor& v, double scale, const AttentionMask& mask,
                                            bool track_max_logits, const AttentionTiles& tiles) {
  return forward(q, k, v, scale, mask, track_max_logits, tiles, path);
}

AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  double scale, const AttentionMask& mask,
                                  const AttentionTiles& tiles) {
  return backward(dout, q, k, v, out, lse, scale, mask, tiles, std::nullopt);
}

AttentionGrads attention_backward_on(MatrixPath path, const Tensor& dout, const Tensor& q,
                                     const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, double scale, const AttentionMask& mask,
                                     const AttentionTiles& tiles) {
  return backward(dout, q, k, v, out, lse, scale, mask, tiles, path);
}

}  // namespace loom::kernels::cpu
