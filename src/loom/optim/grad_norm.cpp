#include "loom/optim/grad_norm.h"

#include <cmath>

#include "loom/kernels/kernel_table.h"

namespace loom::optim {

namespace {

constexpr double kClipEps = 1e-6;

}  // namespace

double grad_sum_of_squares(const Tensor& grad) {
  return kernels::for_tensor(grad, "grad norm").sum_squares(grad);
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
  // The clip coefficient multiplies as an fp32 scalar (the reference's fp32 mul), whatever the
  // grad's dtype.
  const double f = static_cast<double>(static_cast<float>(factor));
  for (const auto& p : params) {
    const Tensor& grad = p.param.grad();
    if (!grad.defined()) continue;
    Tensor g = grad.contiguous();
    kernels::for_tensor(g, "clip_grad_norm").scale_(g, f);
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
