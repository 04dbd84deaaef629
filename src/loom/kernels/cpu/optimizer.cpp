#include "loom/kernels/cpu/optimizer.h"

#include <atomic>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/core/scalar_cast.h"

namespace loom::kernels::cpu {

namespace {

// Big enough that a chunk amortises the thread hand-off, small enough to split a 4k x 4k matrix.
constexpr int64_t kGrain = 1 << 15;
// Fixed chunk of the sum of squares: its partials are what make the result thread-independent.
constexpr int64_t kSquaresChunk = 1 << 14;

void check_fp32(const Tensor& t, int64_t n, const char* op, const char* arg) {
  LOOM_ASSERT(t.dtype() == DType::f32 && t.is_contiguous() && t.numel() == n, op, ": ", arg,
              " must be a contiguous float32 tensor of ", n, " elements, got ", dtype_name(t.dtype()),
              " ", t.shape().str());
}

void check_param(const Tensor& param, int64_t n, const char* op) {
  LOOM_ASSERT((param.dtype() == DType::bf16 || param.dtype() == DType::f16) &&
                  param.is_contiguous() && param.numel() == n,
              op, ": the model copy must be a contiguous bfloat16/float16 tensor of ", n,
              " elements, got ", dtype_name(param.dtype()), " ", param.shape().str());
}

struct NoParam {};

template <typename Out>
inline void store(Out* out, int64_t i, float x) {
  if constexpr (std::is_same_v<Out, bf16>) {
    out[i].bits = bf16_bits_rne(x);
  } else if constexpr (std::is_same_v<Out, f16>) {
    out[i] = f16(x);
  }
}

// One element of the AdamW step; the decision pass and the write pass share it, so the verdict
// is about exactly the values the write pass would store.
struct AdamWElement {
  float p, m, v;
};
inline AdamWElement adamw_element(float p, float g, float m, float v, const AdamWScalars& s) {
  const float decayed = p * s.decay;
  const float mi = m * s.beta1 + g * s.one_minus_beta1;
  const float vi = v * s.beta2 + (g * g) * s.one_minus_beta2;
  const float denom = std::sqrt(vi / s.bias_correction2) + s.eps;
  return {decayed - (mi / denom) * s.step_size, mi, vi};
}

// |x| < limit, false for NaN: the comparison form vectorises where std::isfinite may not.
inline int outside(float x, float limit) { return !(std::fabs(x) < limit); }

// The smallest magnitude a value of `dtype` rounds to infinity from (ties go to the even
// neighbour, which above the largest finite value is infinity): +inf for fp32 itself.
float overflow_limit(DType dtype) {
  switch (dtype) {
    case DType::bf16: return std::bit_cast<float>(0x7f7f8000u);  // halfway from 0x7f7f to 0x7f80
    case DType::f16: return 65520.f;                               // halfway from 65504 to 65536
    default: return std::numeric_limits<float>::infinity();
  }
}

// True when `chunk_bad(b, e)` finds nothing on any chunk of [0, n): the decision passes.
template <typename F>
bool no_chunk_outside(int64_t n, F&& chunk_bad) {
  std::atomic<bool> bad{false};
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    if (chunk_bad(b, e)) bad.store(true, std::memory_order_relaxed);
  });
  return !bad.load();
}

template <typename Out>
void adamw_chunk(float* __restrict p, const float* __restrict g, float* __restrict m,
                 float* __restrict v, Out* __restrict out, int64_t n, const AdamWScalars s) {
  // `omp simd`: GCC's -O2 cost model would otherwise leave this loop scalar.
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const AdamWElement x = adamw_element(p[i], g[i], m[i], v[i], s);
    m[i] = x.m;
    v[i] = x.v;
    p[i] = x.p;
    if constexpr (!std::is_same_v<Out, NoParam>) store(out, i, x.p);
  }
}

// The decision passes' chunks: plain functions of values and restrict pointers, like
// adamw_chunk, so that the loops vectorise (a lambda's captured references would not). Each
// returns whether any element is outside.
bool adamw_chunk_outside(const float* __restrict p, const float* __restrict g, const float* __restrict m,
                         const float* __restrict v, int64_t n, const AdamWScalars s, const float limit) {
  const float inf = std::numeric_limits<float>::infinity();
  int bad = 0;
#pragma omp simd reduction(|: bad)
  for (int64_t i = 0; i < n; ++i) {
    const AdamWElement x = adamw_element(p[i], g[i], m[i], v[i], s);
    bad |= outside(x.p, limit) | outside(x.m, inf) | outside(x.v, inf);
  }
  return bad != 0;
}

bool muon_momentum_chunk(const float* __restrict m, const float* __restrict g, float* __restrict u, int64_t n,
                         const float mu, const bool nesterov) {
  const float inf = std::numeric_limits<float>::infinity();
  int bad = 0;
  if (nesterov) {  // one loop per branch: a select inside would keep the loop scalar
#pragma omp simd reduction(|: bad)
    for (int64_t i = 0; i < n; ++i) {
      const float mi = m[i] * mu + g[i];  // the new momentum muon_apply stores
      bad |= outside(mi, inf);
      u[i] = round_bf16_rne(g[i] + mi * mu);
    }
  } else {
#pragma omp simd reduction(|: bad)
    for (int64_t i = 0; i < n; ++i) {
      const float mi = m[i] * mu + g[i];
      bad |= outside(mi, inf);
      u[i] = round_bf16_rne(mi);
    }
  }
  return bad != 0;
}

bool muon_apply_chunk_outside(const float* __restrict w, const float* __restrict u, int64_t n, const float decay,
                              const float limit) {
  int bad = 0;
#pragma omp simd reduction(|: bad)
  for (int64_t i = 0; i < n; ++i) bad |= outside(w[i] * decay - u[i], limit);
  return bad != 0;
}

template <typename Out>
void adamw_parallel(float* p, const float* g, float* m, float* v, Out* out, int64_t n,
                    const AdamWScalars& s) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    Out* o = nullptr;
    if constexpr (!std::is_same_v<Out, NoParam>) o = out + b;
    adamw_chunk<Out>(p + b, g + b, m + b, v + b, o, e - b, s);
  });
}

template <typename T>
double chunk_sum_of_squares(const T* x, int64_t n) {
  double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      const double v = static_cast<double>(cast_scalar<float>(x[i + l]));
      lanes[l] += v * v;
    }
  for (; i < n; ++i) {
    const double v = static_cast<double>(cast_scalar<float>(x[i]));
    lanes[0] += v * v;
  }
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

template <>
double chunk_sum_of_squares<double>(const double* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i] * x[i];
  return s;
}

}  // namespace

void adamw_update(Tensor& master, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  Tensor* param, const AdamWScalars& s) {
  const int64_t n = master.numel();
  check_fp32(master, n, "adamw_update", "master");
  check_fp32(grad, n, "adamw_update", "grad");
  check_fp32(exp_avg, n, "adamw_update", "exp_avg");
  check_fp32(exp_avg_sq, n, "adamw_update", "exp_avg_sq");
  float* p = master.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  if (param == nullptr) {
    adamw_parallel<NoParam>(p, g, m, v, nullptr, n, s);
    return;
  }
  check_param(*param, n, "adamw_update");
  if (param->dtype() == DType::bf16)
    adamw_parallel<bf16>(p, g, m, v, param->data<bf16>(), n, s);
  else
    adamw_parallel<f16>(p, g, m, v, param->data<f16>(), n, s);
}

void copy_master_to_param(const Tensor& master, Tensor& param) {
  const int64_t n = master.numel();
  check_fp32(master, n, "copy_master_to_param", "master");
  check_param(param, n, "copy_master_to_param");
  const float* src = master.data<float>();
  if (param.dtype() == DType::bf16) {
    bf16* dst = param.data<bf16>();
    parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
      for (int64_t i = b; i < e; ++i) dst[i].bits = bf16_bits_rne(src[i]);
    });
  } else {
    f16* dst = param.data<f16>();
    parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = f16(src[i]);
    });
  }
}

bool adamw_update_is_finite(const Tensor& master, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, DType param_dtype, const AdamWScalars& s) {
  const int64_t n = master.numel();
  check_fp32(master, n, "adamw_update_is_finite", "master");
  check_fp32(grad, n, "adamw_update_is_finite", "grad");
  check_fp32(exp_avg, n, "adamw_update_is_finite", "exp_avg");
  check_fp32(exp_avg_sq, n, "adamw_update_is_finite", "exp_avg_sq");
  const float* p = master.data<float>();
  const float* g = grad.data<float>();
  const float* m = exp_avg.data<float>();
  const float* v = exp_avg_sq.data<float>();
  const float limit = overflow_limit(param_dtype);
  return no_chunk_outside(n, [&](int64_t b, int64_t e) {
    return adamw_chunk_outside(p + b, g + b, m + b, v + b, e - b, s, limit);
  });
}

bool muon_momentum(const Tensor& momentum, const Tensor& grad, float mu, bool nesterov, Tensor& update) {
  const int64_t n = momentum.numel();
  check_fp32(momentum, n, "muon_momentum", "momentum");
  check_fp32(grad, n, "muon_momentum", "grad");
  check_fp32(update, n, "muon_momentum", "update");
  const float* m = momentum.data<float>();
  const float* g = grad.data<float>();
  float* u = update.data<float>();
  return no_chunk_outside(n, [&](int64_t b, int64_t e) {
    return muon_momentum_chunk(m + b, g + b, u + b, e - b, mu, nesterov);
  });
}

bool muon_apply_is_finite(const Tensor& master, const Tensor& update, float decay, DType param_dtype) {
  const int64_t n = master.numel();
  check_fp32(master, n, "muon_apply_is_finite", "master");
  check_fp32(update, n, "muon_apply_is_finite", "update");
  const float* w = master.data<float>();
  const float* u = update.data<float>();
  const float limit = overflow_limit(param_dtype);
  return no_chunk_outside(n, [&](int64_t b, int64_t e) {
    return muon_apply_chunk_outside(w + b, u + b, e - b, decay, limit);
  });
}

void muon_apply(Tensor& master, Tensor& momentum, const Tensor& grad, float mu, const Tensor& update,
                float decay) {
  const int64_t n = master.numel();
  check_fp32(master, n, "muon_apply", "master");
  check_fp32(momentum, n, "muon_apply", "momentum");
  check_fp32(grad, n, "muon_apply", "grad");
  check_fp32(update, n, "muon_apply", "update");
  float* w = master.data<float>();
  float* m = momentum.data<float>();
  const float* g = grad.data<float>();
  const float* u = update.data<float>();
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) {
      m[i] = m[i] * mu + g[i];
      w[i] = w[i] * decay - u[i];
    }
  });
}

double sum_squares(const Tensor& x) {
  check_floating(x, "sum_squares", "input");
  const Tensor xc = x.contiguous();
  const int64_t n = xc.numel();
  if (n == 0) return 0.0;
  const int64_t chunks = (n + kSquaresChunk - 1) / kSquaresChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  LOOM_DISPATCH_FLOATING(xc.dtype(), "sum_squares", [&] {
    const scalar_t* p = xc.data<scalar_t>();
    parallel_for(0, chunks, 4, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        const int64_t b = c * kSquaresChunk;
        partial[c] = chunk_sum_of_squares<scalar_t>(p + b, std::min(kSquaresChunk, n - b));
      }
    });
  });
  double total = 0.0;
  for (double v : partial) total += v;
  return total;
}

}  // namespace loom::kernels::cpu
