// Mixture-of-experts layer (DeepSeek-V3, Qwen3-MoE), in the four steps strategies attach to:
//   route    router: top-k experts and weights of every token (over all E experts)
//   dispatch token_dispatcher: token copies grouped by expert (expert parallelism wraps this)
//   compute  experts: grouped SwiGLU over the experts this module holds, `experts.weight1`
//            [E, hidden, 2·ffn] = gate columns then up columns, `experts.weight2` [E, ffn, hidden]
//   combine  token_dispatcher: Σ_k w_k·expert_k(x) back in token order
// plus the shared experts' dense MLP when configured.
#pragma once

#include <memory>

#include "loom/nn/mlp.h"
#include "loom/nn/router.h"
#include "loom/nn/token_dispatcher.h"

namespace loom::nn {

// The routed experts. They only compute: how many experts there are is weight1's dim 0 at
// forward time (E on one process, the local E/ep once expert parallelism has replaced the
// weights by their shard), and the rows arrive already grouped by expert.
class GroupedExperts : public Module {
 public:
  explicit GroupedExperts(const TransformerConfig& config);
  // tokens [M, hidden] grouped by expert, tokens_per_expert int [experts held] summing to M →
  // expert outputs [M, hidden], row for row.
  Tensor forward(const Tensor& tokens, const Tensor& tokens_per_expert);
  Parameter& weight1() { return *weight1_; }
  Parameter& weight2() { return *weight2_; }

 private:
  Activation activation_;
  Parameter* weight1_;
  Parameter* weight2_;
};

class MoELayer : public Module {
 public:
  explicit MoELayer(const TransformerConfig& config);
  Tensor forward(const Tensor& x);  // [B, S, hidden]
  TopKRouter& router() { return *router_; }
  MoETokenDispatcher& token_dispatcher() { return *token_dispatcher_; }
  GroupedExperts& experts() { return *experts_; }
  // The balance loss of the last forward (detached scalar; undefined when none is configured).
  const Tensor& last_aux_loss() const { return last_aux_loss_; }

 private:
  std::shared_ptr<TopKRouter> router_;
  std::shared_ptr<MoETokenDispatcher> token_dispatcher_;
  std::shared_ptr<GroupedExperts> experts_;
  std::shared_ptr<MLP> shared_experts_;
  Tensor last_aux_loss_;
};

}  // namespace loom::nn
