// Shared by the mpirun tests of the parallel strategies (tensor, context, expert, pipeline): a
// rank's slice of a one-process tensor, read from the parameter's placement, and a comparison by
// normwise relative error.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "loom/core/tensor.h"
#include "loom/dist/device_mesh.h"
#include "loom/dist/parallelize.h"
#include "loom/nn/module.h"
#include "loom/optim/grad_norm.h"
#include "../dist_test_util.h"

namespace loom::testing {

// The pieces of `whole` that parameter p holds, in its local layout.
inline Tensor local_of(const Tensor& whole, const nn::Parameter& p) {
  Tensor out = Tensor::zeros(p.local_shape(), whole.dtype());
  for (const nn::Piece& piece : p.pieces()) {
    Tensor dst = out, src = whole;
    for (int d = 0; d < piece.shape.ndim(); ++d) {
      dst = dst.narrow(d, piece.local_offset[static_cast<size_t>(d)], piece.shape[d]);
      src = src.narrow(d, piece.global_offset[static_cast<size_t>(d)], piece.shape[d]);
    }
    dst.copy_(src);
  }
  return out;
}

// The tensor's normwise relative error ‖got − want‖₂ / ‖want‖₂ is at most tol (Higham, "Accuracy
// and Stability of Numerical Algorithms", §1.2): a tensor of 1e-3 grads is held to the same
// relative accuracy as one of 1e+1 grads, which an element-wise tol · (1 + |want|) is not (it
// lets a 1e-3 grad be off by 2% at tol 2e-5). A zero `want` must be matched by a zero `got`
// within tol absolute; tol 0 asks for equal values. `what` names the tensor in failures, with
// the element that differs most.
inline void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  auto a = got.contiguous().to_double_vector(), b = want.contiguous().to_double_vector();
  ASSERT_EQ(a.size(), b.size()) << what;
  double diff = 0, norm = 0, worst = -1;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i];
    diff += d * d;
    norm += b[i] * b[i];
    if (std::isnan(d) || std::fabs(d) > worst) {
      worst = std::isnan(d) ? INFINITY : std::fabs(d);
      at = i;
    }
  }
  const double error = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
  ASSERT_TRUE(error <= tol) << what << ": normwise relative error " << error << " > " << tol << " (‖want‖ "
                            << std::sqrt(norm) << "; largest difference at [" << at << "]: " << a[at] << " vs "
                            << b[at] << ")";
}

// The grad norm of the split model (each rank's local grads, divided by their replica factors and
// summed over the world) equals the one-process model's within 1e-6 relative: every element is
// counted once, sharded pieces once and replicated ones once per copy set.
inline void expect_grad_norm_matches(nn::Module& plain, nn::Module& split, const dist::ParallelModel& parallel,
                                     dist::DeviceMesh& mesh) {
  optim::NamedParams full, local;
  for (auto& [name, p] : plain.named_parameters()) full.push_back({name, p->tensor});
  for (auto& [name, t] : split.local_parameters()) local.push_back({name, t});
  const double want = optim::global_grad_norm(full);
  const double got = optim::global_grad_norm(
      local, [&](const optim::NamedParam& p) { return parallel.replica_factor(p.name); },
      [&](double v) { return mesh.world().all_reduce_scalar(v); });
  EXPECT_NEAR(got, want, 1e-6 * want);
}

// reference_step's counterpart on the split model: data-parallel rank d of dp takes global
// micro-batch j·dp + d at micro step j (the tp/ep ranks of a data shard take the same one), grads
// go through `parallel`. Returns the loss averaged over the micro-batches and the world.
inline double parallel_step(nn::CausalLM& model, dist::ParallelModel& parallel, dist::DeviceMesh& mesh, int64_t vocab,
                            int64_t B, int64_t S, int64_t micro, int64_t dp, int64_t d) {
  parallel.zero_grad();
  double loss = 0;
  for (int64_t j = 0; j < micro; ++j) {
    nn::LMOutput out = model.forward(micro_batch(vocab, B, S, j * dp + d));
    Tensor scaled = micro > 1 ? ops::scale(out.loss, 1.0 / static_cast<double>(micro)) : out.loss;
    autograd::backward(scaled, Tensor::full(scaled.shape(), parallel.backward_scale()));
    loss += out.loss.item() / static_cast<double>(micro);
  }
  parallel.finish_backward();
  return mesh.world().all_reduce_scalar(loss) / mesh.world_size();
}

}  // namespace loom::testing
