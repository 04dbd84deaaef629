// Mixture-of-experts layer (semantics.md §7.1, §7.2): router → routed experts (grouped SwiGLU
// weights, `experts.weight1` [E, hidden, 2·ffn] = gate columns then up columns, `experts.weight2`
// [E, ffn, hidden]) → Σ_k w_k·expert_k(x), plus the shared experts' dense MLP when configured.
#pragma once

#include <memory>

#include "loom/nn/mlp.h"
#include "loom/nn/router.h"

namespace loom::nn {

class GroupedExperts : public Module {
 public:
  explicit GroupedExperts(const TransformerConfig& config);
  // x [T, hidden], indices int64 [T, K], weights [T, K] → [T, hidden].
  Tensor forward(const Tensor& x, const Tensor& indices, const Tensor& weights);
  Parameter& weight1() { return *weight1_; }
  Parameter& weight2() { return *weight2_; }

 private:
  int64_t experts_, ffn_;
  Activation activation_;
  Parameter* weight1_;
  Parameter* weight2_;
};

class MoELayer : public Module {
 public:
  explicit MoELayer(const TransformerConfig& config);
  Tensor forward(const Tensor& x);  // [B, S, hidden]
  TopKRouter& router() { return *router_; }
  // The balance loss of the last forward (detached scalar; undefined when none is configured).
  const Tensor& last_aux_loss() const { return last_aux_loss_; }

 private:
  std::shared_ptr<TopKRouter> router_;
  std::shared_ptr<GroupedExperts> experts_;
  std::shared_ptr<MLP> shared_experts_;
  Tensor last_aux_loss_;
};

}  // namespace loom::nn
