// MoE top-k router (DeepSeek-V3's Gate, MindFormers TopKRouter, HF Qwen3-MoE gate):
//   s      = softmax(x Wᵀ) or sigmoid(x Wᵀ), in router_dense_type
//   choice = s + expert_bias                 (bias only for selection; aux-loss-free balancing)
//   groups : with n_group > 1, keep the topk_group groups with the largest sum of their top-2
//            choices (the top-1 for one-expert groups), the rest cannot be chosen: masked with
//            −inf as in DeepSeek's reference and Megatron, not with 0 as in transformers, which
//            lets a dropped group win once the biased choices are negative (docs/models.md)
//   idx    = topk(choice, K);  w = s[idx]  (original scores, never the bias)
//   w      = w / (Σ w + 1e-20) if norm_topk_prob, top-1 included (transformers; DeepSeek's
//            reference too for sigmoid; Megatron skips it for top-1);  w = w · routed_scaling_factor
// Balance losses (coefficient α, K = topk, E = experts, p = s for softmax, s/Σs for sigmoid,
// c_i = tokens routed to expert i):
//   aux_loss     : α·E/(K·T²)·Σ_i c_i·Σ_t p_ti over the micro-batch's T tokens
//   seq_aux_loss : the same per sequence (T = S), averaged over the batch
//   gbs_aux_loss : aux_loss with c replaced by the mean counts of the step's micro-batches so far
// Their gradient is injected into the routing weights (aux_loss.h); the values are exposed for
// logging.
#pragma once

#include "loom/nn/module.h"
#include "loom/nn/transformer_config.h"

namespace loom::nn {

struct Routing {
  Tensor indices;  // int64 [T, K], experts of each token, best first
  Tensor weights;  // [T, K] router_dense_type, differentiable (balance-loss grads attached)
  Tensor aux_loss;  // detached scalar: Σ over the configured balance losses (undefined if none)
};

class TopKRouter : public Module {
 public:
  explicit TopKRouter(const TransformerConfig& config);

  // x [B, S, hidden] → routing of the B·S tokens (row-major).
  Routing route(const Tensor& x);

  // Aux-loss-free balancing (MindFormers _update_expert_bias): b_i += u·sign(mean(c) − c_i),
  // counts [E] = tokens routed to each expert over the step (summed across ranks by the caller).
  void update_expert_bias(const Tensor& counts);
  bool has_expert_bias() const { return expert_bias_ != nullptr; }
  Tensor& expert_bias() { return *expert_bias_; }

  // Tokens routed to each expert since the last reset (int64 [E]; recomputed forwards excluded).
  const Tensor& tokens_per_expert() const { return tokens_per_expert_; }
  void reset_tokens_per_expert();
  // Gradient of the balance losses per unit of their value (the trainer's loss scale).
  void set_aux_loss_grad_scale(double scale) { aux_grad_scale_ = scale; }
  Parameter& weight() { return *weight_; }

 private:
  std::vector<int64_t> select(const std::vector<double>& choice, int64_t tokens) const;
  Tensor balance_loss(const Tensor& scores, const std::vector<int64_t>& idx, int64_t batch,
                      int64_t seq);
  double balance_coefficient(size_t i) const;  // α of moe_load_balancing_types[i]

  TransformerConfig config_;
  int64_t experts_, topk_;
  Parameter* weight_;
  Tensor* expert_bias_ = nullptr;
  Tensor tokens_per_expert_;
  // gbs_aux_loss state: counts and micro-batches since the last reset.
  std::vector<double> step_counts_;
  int64_t step_micro_batches_ = 0;
  double aux_grad_scale_ = 1.0;
};

}  // namespace loom::nn
