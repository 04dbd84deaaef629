#include "loom/nn/moe.h"

#include "loom/autograd/checkpoint.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/moe.h"
#include "loom/ops/shape.h"
#include "loom/ops/weight_cast.h"

namespace loom::nn {

GroupedExperts::GroupedExperts(const TransformerConfig& c) : Module("GroupedExperts"), activation_(c.activation) {
  const int64_t E = c.num_experts, ffn = c.moe_intermediate_size;
  weight1_ = &register_parameter("weight1", {E, c.hidden_size, 2 * ffn}, c.params_dtype, Init::normal(c.init_std),
                                 Device::meta());
  weight2_ = &register_parameter("weight2", {E, ffn, c.hidden_size}, c.params_dtype, Init::normal(c.init_std),
                                 Device::meta());
  weight1_->multiplied_in_compute_dtype = weight2_->multiplied_in_compute_dtype = true;
}

Tensor GroupedExperts::forward(const Tensor& tokens, const Tensor& tokens_per_expert) {
  return invoke({tokens, tokens_per_expert}, [this](const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    const Tensor& counts = in[1];
    // One GEMM per expert for gate|up and for down; grouped_gemm checks that the counts are
    // those of weight1's experts. The routing weights are applied in combine.
    Tensor h = ops::grouped_gemm(x, ops::cast_weight(weight1_->tensor, x.dtype()), counts);
    return std::vector<Tensor>{ops::grouped_gemm(mlp_activation(h, activation_, true),
                                                 ops::cast_weight(weight2_->tensor, x.dtype()), counts)};
  })[0];
}

MoELayer::MoELayer(const TransformerConfig& c) : Module("MoELayer") {
  router_ = register_module("router", std::make_shared<TopKRouter>(c));
  token_dispatcher_ = register_module("token_dispatcher", std::make_shared<MoETokenDispatcher>(c.num_experts));
  experts_ = register_module("experts", std::make_shared<GroupedExperts>(c));
  if (c.shared_expert_intermediate_size > 0)
    shared_experts_ = register_module("shared_experts", std::make_shared<MLP>(c, c.shared_expert_intermediate_size));
}

Tensor MoELayer::forward(const Tensor& x) {
  return invoke1(x, [this](const Tensor& in) {
    const int64_t B = in.size(0), S = in.size(1), D = in.size(2);
    Routing r = router_->route(in);
    if (!autograd::is_recomputing()) last_aux_loss_ = r.aux_loss;
    Tensor xt = ops::reshape(in, {B * S, D});
    DispatchedTokens d = token_dispatcher_->dispatch(xt, r.indices, r.weights);
    Tensor expert_output = experts_->forward(d.tokens, d.tokens_per_expert);
    Tensor y = token_dispatcher_->combine(expert_output, d.combine_state);
    if (shared_experts_) y = ops::add(y, shared_experts_->forward(xt));
    return ops::reshape(y, {B, S, D});
  });
}

}  // namespace loom::nn
