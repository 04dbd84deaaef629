#include "loom/optim/grad_norm.h"

#include <cmath>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/core/scalar_cast.h"

namespace loom::optim {

namespace {

constexpr int64_t kChunk = 1 << 14;
constexpr double kClipEps = 1e-6;

template <typename T>
double chunk_sum_of_squares(const T* x, int64_t n) {
  // Eight fixed lanes: vectorisable without reassociating anything the order depends on.
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

double grad_sum_of_squares(const Tensor& grad) {
  const Tensor g = grad.contiguous();
  const int64_t n = g.numel();
  if (n == 0) return 0.0;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  LOOM_DISPATCH_FLOATING(g.dtype(), "grad_sum_of_squares", [&] {
    const scalar_t* x = g.data<scalar_t>();
    parallel_for(0, chunks, 4, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        const int64_t b = c * kChunk;
        partial[c] = chunk_sum_of_squares<scalar_t>(x + b, std::min(kChunk, n - b));
      }
    });
  });
  double total = 0.0;
  for (double p : partial) total += p;
  return total;
}

double global_grad_norm(const NamedParams& params, const ReplicaFactorFn& replica_factor,
                        const AllReduceSumFn& all_reduce_sum) {
  double total = 0.0;
  for (const auto& p : params) {
    const Tensor& g = p.param.grad();
    if (!g.defined()) continue;
    double sq = grad_sum_of_squares(g);
    if (replica_factor) {
      const double f = replica_factor(p);
      LOOM_CHECK(f >= 1.0, ValueError, "grad norm: replica factor of '", p.name, "' is ", f,
                 "; it must be >= 1");
      sq /= f;
    }
    total += sq;
  }
  if (all_reduce_sum) total = all_reduce_sum(total);
  return std::sqrt(total);
}

void scale_grads(const NamedParams& params, double factor) {
  const float f = static_cast<float>(factor);
  for (const auto& p : params) {
    const Tensor& grad = p.param.grad();
    if (!grad.defined()) continue;
    Tensor g = grad.contiguous();
    LOOM_DISPATCH_FLOATING(g.dtype(), "scale_grads", [&] {
      scalar_t* x = g.data<scalar_t>();
      parallel_for(0, g.numel(), 1 << 15, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          x[i] = cast_scalar<scalar_t>(cast_scalar<compute_t<scalar_t>>(x[i]) * f);
      });
    });
    if (!g.shares_storage_with(grad)) Tensor(grad).copy_(g);
  }
}

double clip_grad_norm(const NamedParams& params, double max_norm,
                      const ReplicaFactorFn& replica_factor, const AllReduceSumFn& all_reduce_sum) {
  LOOM_CHECK(max_norm > 0.0, ValueError, "clip_grad_norm: max_norm must be > 0, got ", max_norm,
             " (training.max_norm; 0 or a negative value would zero or reverse the gradients)");
  const double norm = global_grad_norm(params, replica_factor, all_reduce_sum);
  if (!std::isfinite(norm)) return norm;
  const double clip = max_norm / (norm + kClipEps);
  if (clip < 1.0) scale_grads(params, clip);
  return norm;
}

}  // namespace loom::optim
