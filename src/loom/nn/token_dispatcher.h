// MoE token dispatcher (`mlp.token_dispatcher`, Megatron's name): moves token copies to their
// experts and back. Its two steps are named operations of this module (nn/module.h), so expert
// parallelism attaches from outside by wrapping them (dist/expert_parallel.h) while the MoE layer
// stays the same:
//
//   "dispatch"  inputs  {x [T, hidden], indices int64 [T, K], weights [T, K]}
//               outputs {tokens [M, hidden], tokens_per_expert int64 [E'], state...}
//     One process: the T·K copies of the rows of x grouped by expert in ascending expert order
//     (stable by token, then slot; ops::moe_permute), E' = every expert, state = {row_map [T, K],
//     weights}. Under EP the wrapper sends the copies to the ranks that own their experts
//     (all-to-all), so `tokens` are the rows this rank's E' = E/ep local experts compute, and it
//     appends what its combine needs (splits, the resort permutation) to `state`.
//   "combine"   inputs  {expert_output [M, hidden], state...}   outputs {y [T, hidden]}
//     One process: y_t = Σ_k weights[t, k] · expert_output[row_map[t, k]], summed over k in
//     slot order (ops::moe_unpermute; a fixed order, so results do not depend on the layout).
//     Under EP the wrapper first returns the rows to the ranks their tokens came from.
//
// `state` is opaque to the MoE layer: it hands combine exactly what dispatch returned, so a
// strategy carries its per-call bookkeeping in tensors (correct under recompute and with several
// micro-batches in flight), never in its own mutable members.
#pragma once

#include <vector>

#include "loom/nn/module.h"

namespace loom::nn {

struct DispatchedTokens {
  Tensor tokens;             // [M, hidden], grouped by expert in the order of tokens_per_expert
  Tensor tokens_per_expert;  // int64 [experts these rows are for], summing to M
  std::vector<Tensor> combine_state;  // passed back to combine unchanged
};

class MoETokenDispatcher : public Module {
 public:
  // num_experts: every routed expert (the router's count), the range of the routing indices.
  explicit MoETokenDispatcher(int64_t num_experts);
  DispatchedTokens dispatch(const Tensor& x, const Tensor& indices, const Tensor& weights);
  Tensor combine(const Tensor& expert_output, const std::vector<Tensor>& combine_state);

 private:
  int64_t num_experts_;
};

}  // namespace loom::nn
