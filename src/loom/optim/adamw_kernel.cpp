#include "loom/optim/adamw_kernel.h"

#include <cmath>
#include <type_traits>

#include "loom/core/parallel.h"

namespace loom::optim {

namespace {

// Big enough that a chunk amortises the thread hand-off, small enough to split a 4k x 4k matrix.
constexpr int64_t kGrain = 1 << 15;

struct NoParam {};

template <typename Out>
inline void store(Out* out, int64_t i, float x) {
  if constexpr (std::is_same_v<Out, bf16>) {
    out[i].bits = bf16_bits_rne(x);
  } else if constexpr (std::is_same_v<Out, f16>) {
    out[i] = f16(x);
  }
}

template <typename Out>
void adamw_chunk(float* __restrict p, const float* __restrict g, float* __restrict m,
                 float* __restrict v, Out* __restrict out, int64_t n, const AdamWScalars s) {
  // Same order as the reference: p' = p*decay; m = m*b1 + g*(1-b1); v = v*b2 + g*g*(1-b2);
  // p = p' - (m / (sqrt(v/bc2) + eps)) * step_size.
  // `omp simd`: GCC's -O2 cost model would otherwise leave this loop scalar.
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float decayed = p[i] * s.decay;
    const float mi = m[i] * s.beta1 + gi * s.one_minus_beta1;
    const float vi = v[i] * s.beta2 + (gi * gi) * s.one_minus_beta2;
    const float denom = std::sqrt(vi / s.bias_correction2) + s.eps;
    const float pi = decayed - (mi / denom) * s.step_size;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi;
    if constexpr (!std::is_same_v<Out, NoParam>) store(out, i, pi);
  }
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

}  // namespace

AdamWScalars AdamWScalars::make(double lr, double weight_decay, double beta1, double beta2,
                                double eps, int64_t t) {
  AdamWScalars s;
  s.decay = static_cast<float>(1.0 - lr * weight_decay);
  s.beta1 = static_cast<float>(beta1);
  s.one_minus_beta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta2 = static_cast<float>(1.0 - beta2);
  const double td = static_cast<double>(t);
  s.bias_correction2 = static_cast<float>(1.0 - std::pow(beta2, td));
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, td)));
  s.eps = static_cast<float>(eps);
  return s;
}

void adamw_update(float* master, const float* grad, float* m, float* v, int64_t n,
                  const AdamWScalars& s) {
  adamw_parallel<NoParam>(master, grad, m, v, nullptr, n, s);
}

void adamw_update(float* master, const float* grad, float* m, float* v, bf16* param, int64_t n,
                  const AdamWScalars& s) {
  adamw_parallel<bf16>(master, grad, m, v, param, n, s);
}

void adamw_update(float* master, const float* grad, float* m, float* v, f16* param, int64_t n,
                  const AdamWScalars& s) {
  adamw_parallel<f16>(master, grad, m, v, param, n, s);
}

void copy_master_to_param(const float* master, bf16* param, int64_t n) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
#pragma omp simd
    for (int64_t i = b; i < e; ++i) param[i].bits = bf16_bits_rne(master[i]);
  });
}

void copy_master_to_param(const float* master, f16* param, int64_t n) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) param[i] = f16(master[i]);
  });
}

}  // namespace loom::optim
