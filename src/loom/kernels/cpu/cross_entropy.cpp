#include "loom/kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/kernels/tiling.h"
#include "loom/kernels/cpu/gemm.h"
#include "loom/kernels/cpu/index.h"
#include "loom/kernels/cpu/row_helpers.h"

namespace loom::kernels::cpu {

namespace {

// Vocabulary chunk: the widened fp32 slice of a row stays in L1 while it is used twice.
constexpr int64_t kVocabChunk = 4096;

#ifdef LOOM_ROW_AVX2
// e^x for 8 lanes of x <= 0 (or −inf, or NaN): the only arguments softmax produces once the row
// max or the lse is subtracted. Cephes polynomial after a Cody-Waite reduction (~1 ulp); the
// integer n comes from the 1.5·2^23 rounding trick. Arguments below −87.3 give 0 (no denormals:
// such terms cannot change a softmax sum), −inf gives 0, and NaN stays NaN (max keeps its second
// operand when one is NaN, and the final mask keeps unordered lanes).
inline __m256 exp8_nonpositive(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3365447505531f);
  const __m256 magic = _mm256_set1_ps(12582912.0f);
  const __m256 xc = _mm256_max_ps(lo, x);
  const __m256 t = _mm256_fmadd_ps(xc, _mm256_set1_ps(1.44269504088896341f), magic);
  const __m256 n = _mm256_sub_ps(t, magic);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // The low mantissa bits of t hold n; shifted into the exponent field and biased, they are 2^n.
  const __m256i pow2n = _mm256_add_epi32(_mm256_slli_epi32(_mm256_castps_si256(t), 23), _mm256_set1_epi32(127 << 23));
  const __m256 keep = _mm256_cmp_ps(x, lo, _CMP_NLT_UQ);  // x >= lo or NaN
  return _mm256_and_ps(_mm256_mul_ps(y, _mm256_castsi256_ps(pow2n)), keep);
}

#endif

// Σ exp(x[i] − shift), shift >= every x[i] (the running max)
inline double sum_exp(const double* x, int64_t n, double shift) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - shift);
  return s;
}
inline float sum_exp(const float* x, int64_t n, float shift) {
  int64_t i = 0;
  float s = 0;
#ifdef LOOM_ROW_AVX2
  const __m256 vs = _mm256_set1_ps(shift);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_add_ps(acc0, exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs)));
    acc1 = _mm256_add_ps(acc1, exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vs)));
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_add_ps(acc0, exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs)));
  s = detail::hsum8(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) s += std::exp(x[i] - shift);
  return s;
}

// out[i] = exp(x[i] − shift) · scale, shift >= every x[i] (the lse); out may alias x
inline void exp_scaled(const double* x, double* out, int64_t n, double shift, double scale) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i] - shift) * scale;
}
inline void exp_scaled(const float* x, float* out, int64_t n, float shift, float scale) {
  int64_t i = 0;
#ifdef LOOM_ROW_AVX2
  const __m256 vs = _mm256_set1_ps(shift), vc = _mm256_set1_ps(scale);
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_mul_ps(exp8_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs)), vc));
#endif
  for (; i < n; ++i) out[i] = std::exp(x[i] - shift) * scale;
}

// log Σ exp over a row of V logits, one pass with a running max (online softmax) over chunks.
template <typename T, typename C>
C row_lse(const T* x, int64_t v, C* scratch) {
  constexpr C neg_inf = -std::numeric_limits<C>::infinity();
  C m = neg_inf, s = 0;
  for (int64_t c0 = 0; c0 < v; c0 += kVocabChunk) {
    const int64_t n = std::min(kVocabChunk, v - c0);
    const C* xv = row_as(x + c0, scratch, n);
    const C cm = row_max(xv, n);  // a NaN is caught by the exp sum below
    if (cm > m) {
      s = m == neg_inf ? C(0) : s * std::exp(m - cm);
      m = cm;
    }
    if (m != neg_inf) s += sum_exp(xv, n, m);
    else s += sum_exp(xv, n, C(0));  // all −inf so far; a NaN still reaches s
  }
  return m == neg_inf ? m : m + std::log(s);
}

// out = (softmax(x) − onehot(label)) · coef for one row; out may alias x when T == C.
template <typename T, typename C>
void row_grad(const T* x, T* out, int64_t v, C lse, int64_t label, C coef, C* xs, C* os) {
  for (int64_t c0 = 0; c0 < v; c0 += kVocabChunk) {
    const int64_t n = std::min(kVocabChunk, v - c0);
    const C* xv = row_as(x + c0, xs, n);
    C* ov = out_row(out + c0, os);
    exp_scaled(xv, ov, n, lse, coef);
    if (label >= c0 && label < c0 + n) ov[label - c0] -= coef;
    finish_row(ov, out + c0, n);
  }
}

std::vector<int64_t> labels_vector(const Tensor& labels) {
  Tensor c = labels.contiguous();
  std::vector<int64_t> v(static_cast<size_t>(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) v[i] = index_at(c, i);
  return v;
}

// "[b, s]" for flat position i of a tensor of `shape`.
std::string position_str(const Shape& shape, int64_t i) {
  std::vector<int64_t> idx(static_cast<size_t>(std::max(shape.ndim(), 1)));
  for (int d = shape.ndim() - 1; d >= 0; --d) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

// Calls fn.template operator()<T, C>() for the storage type T of `dtype` and its compute type.
template <typename Fn>
void dispatch_xent(DType dtype, const char* op, Fn&& fn) {
  LOOM_DISPATCH_FLOATING(dtype, op, [&] { fn.template operator()<scalar_t, compute_t<scalar_t>>(); });
}

void check_row_weights(const Tensor& row_weights, int64_t n) {
  LOOM_ASSERT(row_weights.dtype() == DType::f64 && row_weights.numel() == n && row_weights.is_contiguous(),
              "row weights must be contiguous float64 [", n, "]");
}

}  // namespace

Tensor cross_entropy_row_weights(const Tensor& labels, const Tensor& loss_mask, int64_t ignore_index,
                                 int64_t vocab, const char* op) {
  LOOM_CHECK(labels.dtype() == DType::i64 || labels.dtype() == DType::i32, DTypeError, op,
             ": labels must be int32 or int64, got ", dtype_name(labels.dtype()));
  const int64_t n = labels.numel();
  Tensor w = Tensor::empty({n}, DType::f64);
  double* pw = w.data<double>();
  std::vector<int64_t> lab = labels_vector(labels);
  if (loss_mask.defined()) {
    LOOM_CHECK(loss_mask.shape() == labels.shape(), ShapeError, op, ": loss_mask has shape ",
               loss_mask.shape().str(), " but labels have shape ", labels.shape().str(),
               "; give one mask value per label");
    std::vector<double> m = loss_mask.to_double_vector();
    std::copy(m.begin(), m.end(), pw);
  } else {
    std::fill(pw, pw + n, 1.0);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (lab[i] == ignore_index) {
      pw[i] = 0.0;
      continue;
    }
    LOOM_CHECK(lab[i] >= 0 && lab[i] < vocab, ValueError, op, ": labels", position_str(labels.shape(), i),
               " = ", lab[i], " is outside the vocabulary [0, ", vocab, ") and is not ignore_index (",
               ignore_index, "); check the tokenizer's vocab_size against the model's");
  }
  return w;
}

// ---- cross_entropy over materialised logits ----------------------------------------------------

double cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& row_weights,
                             Tensor& lse) {
  const int64_t N = logits.shape()[0], V = logits.shape()[1];
  check_row_weights(row_weights, N);
  Tensor lc = logits.strides()[1] == 1 ? logits : logits.contiguous();
  const int64_t ld = N > 1 ? lc.strides()[0] : V;
  const std::vector<int64_t> lab = labels_vector(labels);
  const double* pw = row_weights.data<double>();
  std::vector<double> ce(static_cast<size_t>(N), 0.0);
  dispatch_xent(logits.dtype(), "cross_entropy", [&]<typename T, typename C>() {
    lse = Tensor::empty({N}, dtype_of<C>::value);
    C* pl = lse.data<C>();
    const T* px = lc.data<T>();
    parallel_for(0, N, std::max<int64_t>(1, 65536 / std::max<int64_t>(V, 1)), [&](int64_t b, int64_t e) {
      std::vector<C> scratch(static_cast<size_t>(std::min(kVocabChunk, V)));
      for (int64_t r = b; r < e; ++r) {
        if (pw[r] == 0.0) {
          pl[r] = 0;
          continue;
        }
        LOOM_ASSERT(lab[r] >= 0 && lab[r] < V, "unchecked label ", lab[r]);
        const T* row = px + r * ld;
        const C l = row_lse(row, V, scratch.data());
        pl[r] = l;
        ce[r] = static_cast<double>(l - cast_scalar<C>(row[lab[r]]));
      }
    });
  });
  double total = 0;  // in row order: the same sum for any thread count
  for (int64_t r = 0; r < N; ++r)
    if (pw[r] != 0.0) total += ce[r] * pw[r];
  return total;
}

Tensor cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& row_weights,
                              const Tensor& lse, double scale) {
  const int64_t N = logits.shape()[0], V = logits.shape()[1];
  check_row_weights(row_weights, N);
  Tensor lc = logits.strides()[1] == 1 ? logits : logits.contiguous();
  const int64_t ld = N > 1 ? lc.strides()[0] : V;
  const std::vector<int64_t> lab = labels_vector(labels);
  const double* pw = row_weights.data<double>();
  Tensor out = Tensor::empty({N, V}, logits.dtype());
  dispatch_xent(logits.dtype(), "cross_entropy_backward", [&]<typename T, typename C>() {
    Tensor lsec = lse.to(dtype_of<C>::value).contiguous();
    const C* pl = lsec.data<C>();
    const T* px = lc.data<T>();
    T* po = out.data<T>();
    parallel_for(0, N, std::max<int64_t>(1, 65536 / std::max<int64_t>(V, 1)), [&](int64_t b, int64_t e) {
      const size_t chunk = static_cast<size_t>(std::min(kVocabChunk, V));
      std::vector<C> xs(chunk), os(chunk);
      for (int64_t r = b; r < e; ++r) {
        T* orow = po + r * V;
        if (pw[r] == 0.0) {
          std::memset(static_cast<void*>(orow), 0, static_cast<size_t>(V) * sizeof(T));
          continue;
        }
        row_grad(px + r * ld, orow, V, pl[r], lab[r], static_cast<C>(pw[r] * scale), xs.data(), os.data());
      }
    });
  });
  return out;
}

// ---- linear_cross_entropy: chunks of tokens, never the full logits ------------------------------

namespace {

struct LinearXentSetup {
  int64_t n, d, v, chunk;
  DType compute;          // of the logits, the softmax and the grads' accumulation
  DType operands;         // of the GEMMs' inputs: compute, or bf16 on a bf16 matrix path
  Tensor hidden, weight;  // in the operands dtype
  std::vector<int64_t> labels;
};

LinearXentSetup linear_setup(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                             const Tensor& row_weights, int64_t chunk_tokens) {
  LinearXentSetup s;
  s.n = hidden.shape()[0];
  s.d = hidden.shape()[1];
  s.v = weight.shape()[0];
  check_row_weights(row_weights, s.n);
  s.chunk = kernels::linear_cross_entropy_chunk(s.n, s.v, chunk_tokens);
  s.compute = hidden.dtype() == DType::f64 ? DType::f64 : DType::f32;
  // On a CPU with bf16 matrix units the head's GEMMs take bf16 operands as they are, accumulate
  // in fp32 and write fp32 logits (the head is a third of a small model's FLOPs: widening it to
  // fp32 would leave the units idle for it). Elsewhere both are widened once up front, so every
  // chunk's GEMM reads the same fp32 weight.
  const bool bf16_units = hidden.dtype() == DType::bf16 && weight.dtype() == DType::bf16 && bf16_matrix_units();
  s.operands = bf16_units ? DType::bf16 : s.compute;
  s.hidden = hidden.to(s.operands);
  s.weight = weight.to(s.operands);
  s.labels = labels_vector(labels);
  return s;
}

bool chunk_has_weight(const double* pw, int64_t t0, int64_t c) {
  for (int64_t r = t0; r < t0 + c; ++r)
    if (pw[r] != 0.0) return true;
  return false;
}

// The buffers of one pass: per-token ce, a chunk of logits, the lse (computed or given), and the
// zeroed grads when requested.
struct PassState {
  std::vector<double> ce;
  Tensor buf, lse;
  Tensor dlogits_operand;  // a chunk of dlogits rounded to bf16, when the operands are bf16
};

PassState start_pass(const LinearXentSetup& s, const Tensor& lse_in, Tensor* lse_out, Tensor* dh, Tensor* dw) {
  PassState st;
  st.ce.assign(static_cast<size_t>(s.n), 0.0);
  st.buf = Tensor::empty({s.chunk, s.v}, s.compute);
  if (s.operands != s.compute && (dh || dw)) st.dlogits_operand = Tensor::empty({s.chunk, s.v}, s.operands);
  if (lse_out) *lse_out = Tensor::zeros({s.n}, s.compute);
  st.lse = lse_in.defined() ? lse_in.to(s.compute).contiguous() : *lse_out;
  if (dh) *dh = Tensor::zeros({s.n, s.d}, s.compute);
  if (dw) *dw = Tensor::zeros({s.v, s.d}, s.compute);
  return st;
}

// A chunk's dlogits (in `logits`) into dh = dlogits · W and dw += dlogitsᵀ · h. With bf16
// operands the dlogits are rounded to bf16 first (as autocast's bf16 logits grad is), and dh and
// dw still accumulate in fp32.
void chunk_grads(const Tensor& logits, const Tensor& h, const Tensor& weight, int64_t t0, Tensor& dlogits_operand,
                 Tensor* dh, Tensor* dw) {
  if (!dh && !dw) return;
  const int64_t c = logits.shape()[0], v = logits.shape()[1];
  Tensor dl = logits;
  if (dlogits_operand.defined()) {
    dl = dlogits_operand.narrow(0, 0, c);
    const float* src = logits.data<float>();
    bf16* dst = dl.data<bf16>();
    parallel_for(0, c, 1, [&](int64_t b, int64_t e) { vec::narrow_row(src + b * v, dst + b * v, (e - b) * v); });
  }
  if (dh) {
    Tensor dh_chunk = dh->narrow(0, t0, c);
    gemm(dl, false, weight, false, dh_chunk, 1.0, 0.0);  // [c, V] · [V, D]
  }
  if (dw) gemm(dl, true, h, false, *dw, 1.0, 1.0);  // += [V, c] · [c, D]
}

// Σ ce·w in row order: the same sum for any thread count.
double weighted_total(const std::vector<double>& ce, const double* pw) {
  double total = 0;
  for (size_t r = 0; r < ce.size(); ++r)
    if (pw[r] != 0.0) total += ce[r] * pw[r];
  return total;
}

// One pass over the token chunks. Each chunk's logits come from one GEMM. With `lse_in` (the
// backward) the saved lse is used; otherwise lse is computed into `lse_out` and the weighted ce
// summed. With dh/dw the chunk's logits are turned into dlogits (· grad_scale) in place and
// dh = dlogits · W, dw += dlogitsᵀ · h follow by GEMM.
double linear_pass(const LinearXentSetup& s, const double* pw, const Tensor& lse_in, Tensor* lse_out,
                   double grad_scale, Tensor* dh, Tensor* dw) {
  PassState st = start_pass(s, lse_in, lse_out, dh, dw);
  std::vector<double>& ce = st.ce;
  Tensor& buf = st.buf;
  Tensor& lse = st.lse;
  const bool grads = dh || dw;
  dispatch_xent(s.compute, "linear_cross_entropy", [&]<typename T, typename C>() {
    C* pl = lse.data<C>();
    for (int64_t t0 = 0; t0 < s.n; t0 += s.chunk) {
      const int64_t c = std::min(s.chunk, s.n - t0);
      if (!chunk_has_weight(pw, t0, c)) continue;  // no loss, zero dlogits: nothing to add
      Tensor logits = buf.narrow(0, 0, c);
      Tensor h = s.hidden.narrow(0, t0, c);
      gemm(h, false, s.weight, true, logits, 1.0, 0.0);
      C* px = logits.data<C>();
      parallel_for(0, c, std::max<int64_t>(1, 65536 / std::max<int64_t>(s.v, 1)), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          const int64_t r = t0 + i;
          C* row = px + i * s.v;
          if (pw[r] == 0.0) {
            if (grads) std::fill(row, row + s.v, C(0));
            continue;
          }
          LOOM_ASSERT(s.labels[r] >= 0 && s.labels[r] < s.v, "unchecked label ", s.labels[r]);
          if (lse_out) {
            pl[r] = row_lse<C, C>(row, s.v, nullptr);
            ce[r] = static_cast<double>(pl[r] - row[s.labels[r]]);
          }
          if (grads)
            row_grad<C, C>(row, row, s.v, pl[r], s.labels[r], static_cast<C>(pw[r] * grad_scale), nullptr, nullptr);
        }
      });
      chunk_grads(logits, h, s.weight, t0, st.dlogits_operand, dh, dw);
    }
  });
  return weighted_total(ce, pw);
}

// The same pass over this rank's vocabulary rows (VocabShard). Per chunk, three phases around
// the two reductions: the local row max (reduced to the global max), Σ exp(z − max) and the target
// logit (held by one rank, 0 elsewhere; both summed), then lse = max + log Σ, the weighted ce and,
// with grads, (softmax − onehot) of the local rows. With `lse_in` (backward) no reduction is needed.
double linear_pass_sharded(const LinearXentSetup& s, const double* pw, const VocabShard& shard, const Tensor& lse_in,
                           Tensor* lse_out, double grad_scale, Tensor* dh, Tensor* dw) {
  PassState st = start_pass(s, lse_in, lse_out, dh, dw);
  std::vector<double>& ce = st.ce;
  Tensor& buf = st.buf;
  Tensor& lse = st.lse;
  const bool grads = dh || dw;
  const int64_t lo = shard.begin, hi = shard.begin + s.v;
  dispatch_xent(s.compute, "linear_cross_entropy", [&]<typename T, typename C>() {
    constexpr C neg_inf = -std::numeric_limits<C>::infinity();
    C* pl = lse.data<C>();
    std::vector<C> stats(static_cast<size_t>(3 * s.chunk));
    const int64_t grain = std::max<int64_t>(1, 65536 / std::max<int64_t>(s.v, 1));
    // Every rank walks the same chunks (labels and masks are the same everywhere), so the
    // reductions pair up.
    for (int64_t t0 = 0; t0 < s.n; t0 += s.chunk) {
      const int64_t c = std::min(s.chunk, s.n - t0);
      if (!chunk_has_weight(pw, t0, c)) continue;
      Tensor logits = buf.narrow(0, 0, c);
      Tensor h = s.hidden.narrow(0, t0, c);
      gemm(h, false, s.weight, true, logits, 1.0, 0.0);
      C* px = logits.data<C>();
      C* m = stats.data();
      C* sums = stats.data() + s.chunk;  // [Σ exp for c rows | target logit for c rows]
      if (lse_out) {
        parallel_for(0, c, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) m[i] = pw[t0 + i] == 0.0 ? neg_inf : row_max(px + i * s.v, s.v);
        });
        shard.all_reduce(m, c, dtype_of<C>::value, true);
        parallel_for(0, c, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const int64_t label = s.labels[t0 + i];
            const C* row = px + i * s.v;
            sums[i] = pw[t0 + i] == 0.0 || m[i] == neg_inf ? C(0) : sum_exp(row, s.v, m[i]);
            sums[c + i] = pw[t0 + i] != 0.0 && label >= lo && label < hi ? row[label - lo] : C(0);
          }
        });
        shard.all_reduce(sums, 2 * c, dtype_of<C>::value, false);
        for (int64_t i = 0; i < c; ++i) {
          const int64_t r = t0 + i;
          if (pw[r] == 0.0) continue;
          pl[r] = m[i] == neg_inf ? m[i] : m[i] + std::log(sums[i]);
          ce[r] = static_cast<double>(pl[r] - sums[c + i]);
        }
      }
      if (grads)
        parallel_for(0, c, grain, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            const int64_t r = t0 + i, label = s.labels[r];
            C* row = px + i * s.v;
            if (pw[r] == 0.0) {
              std::fill(row, row + s.v, C(0));
              continue;
            }
            row_grad<C, C>(row, row, s.v, pl[r], label >= lo && label < hi ? label - lo : -1,
                           static_cast<C>(pw[r] * grad_scale), nullptr, nullptr);
          }
        });
      chunk_grads(logits, h, s.weight, t0, st.dlogits_operand, dh, dw);
    }
  });
  return weighted_total(ce, pw);
}

void finish_linear_grads(const Tensor& hidden, const Tensor& weight, Tensor& dh, Tensor& dw,
                         Tensor* dhidden, Tensor* dweight) {
  if (dhidden) *dhidden = dh.to(hidden.dtype());
  if (dweight) {
    const bool reduced = weight.dtype() == DType::bf16 || weight.dtype() == DType::f16;
    *dweight = dw.to(reduced ? DType::f32 : weight.dtype());
  }
}

}  // namespace

double linear_cross_entropy_forward(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                                    const Tensor& row_weights, int64_t chunk_tokens, Tensor& lse,
                                    double grad_scale, Tensor* dhidden, Tensor* dweight, const VocabShard* shard) {
  LinearXentSetup s = linear_setup(hidden, weight, labels, row_weights, chunk_tokens);
  Tensor dh, dw;
  const double total =
      shard ? linear_pass_sharded(s, row_weights.data<double>(), *shard, Tensor(), &lse, grad_scale,
                                  dhidden ? &dh : nullptr, dweight ? &dw : nullptr)
            : linear_pass(s, row_weights.data<double>(), Tensor(), &lse, grad_scale, dhidden ? &dh : nullptr,
                          dweight ? &dw : nullptr);
  finish_linear_grads(hidden, weight, dh, dw, dhidden, dweight);
  return total;
}

void linear_cross_entropy_backward(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                                   const Tensor& row_weights, const Tensor& lse, double scale,
                                   int64_t chunk_tokens, Tensor* dhidden, Tensor* dweight, const VocabShard* shard) {
  LinearXentSetup s = linear_setup(hidden, weight, labels, row_weights, chunk_tokens);
  Tensor dh, dw;
  if (shard)
    linear_pass_sharded(s, row_weights.data<double>(), *shard, lse, nullptr, scale, dhidden ? &dh : nullptr,
                        dweight ? &dw : nullptr);
  else
    linear_pass(s, row_weights.data<double>(), lse, nullptr, scale, dhidden ? &dh : nullptr, dweight ? &dw : nullptr);
  finish_linear_grads(hidden, weight, dh, dw, dhidden, dweight);
}

}  // namespace loom::kernels::cpu
