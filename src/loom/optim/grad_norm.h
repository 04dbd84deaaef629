// The global gradient norm and clipping of the training step (MindFormers'
// _calculate_global_grad_norm; spec other_training_features.md §2).
//
//   total_sq = Σ_p sum(g_p²) / replica_factor(p)       (per-tensor sums in fp64, fixed order)
//   total_sq = all_reduce_sum(total_sq)                 (multi-process; identity on one process)
//   norm     = sqrt(total_sq)
//   clip     = max_norm / (norm + 1e-6); when clip < 1 every grad is scaled by it in place
//   returns the pre-clip norm (what the trainer logs)
//
// Sums are deterministic: each tensor is cut into fixed 16K-element chunks whose partial sums
// are added in chunk order, whatever the thread count. A non-finite norm is returned as is and
// the grads are left untouched (the reference would scale by 0 or NaN); the trainer reports it.
#pragma once

#include <functional>

#include "loom/optim/named_param.h"

namespace loom::optim {

// How many ranks hold an identical copy of this parameter's local grad (1 on one process;
// the distributed layer supplies placements' replicate factors later).
using ReplicaFactorFn = std::function<double(const NamedParam&)>;
// Sums a value over every rank (the distributed layer supplies it).
using AllReduceSumFn = std::function<double(double)>;

// Σ g² of one gradient (any floating dtype, any layout), accumulated in fp64.
double grad_sum_of_squares(const Tensor& grad);

// The global L2 norm of the parameters' grads (params without a grad are skipped).
double global_grad_norm(const NamedParams& params, const ReplicaFactorFn& replica_factor = {},
                        const AllReduceSumFn& all_reduce_sum = {});

// Multiplies every defined grad by `factor` in place (fp32 multiply, rounded for bf16/f16).
void scale_grads(const NamedParams& params, double factor);

// Norm + clip as above. `max_norm` must be > 0 (ValueError; the config rejects it earlier).
double clip_grad_norm(const NamedParams& params, double max_norm,
                      const ReplicaFactorFn& replica_factor = {},
                      const AllReduceSumFn& all_reduce_sum = {});

}  // namespace loom::optim
