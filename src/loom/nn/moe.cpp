#include "loom/nn/moe.h"

#include "loom/autograd/checkpoint.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/moe.h"
#include "loom/ops/shape.h"

namespace loom::nn {

GroupedExperts::GroupedExperts(const TransformerConfig& c)
    : Module("GroupedExperts"),
      experts_(c.num_experts),
      ffn_(c.moe_intermediate_size),
      activation_(c.activation) {
  weight1_ = &register_parameter("weight1", {experts_, c.hidden_size, 2 * ffn_}, c.params_dtype,
                                 Init::normal(c.init_std), Device::meta());
  weight2_ = &register_parameter("weight2", {experts_, ffn_, c.hidden_size}, c.params_dtype,
                                 Init::normal(c.init_std), Device::meta());
}

Tensor GroupedExperts::forward(const Tensor& x, const Tensor& indices, const Tensor& weights) {
  return invoke({x, indices, weights}, [this](const std::vector<Tensor>& in) {
    const Tensor& xt = in[0];
    // Token copies grouped by expert, one GEMM per expert for gate|up and for down, then the
    // weighted sum back per token (routing weights stay in router_dense_type).
    ops::MoePermutation perm = ops::moe_permute(xt, in[1], experts_);
    Tensor h = ops::grouped_gemm(perm.permuted, ops::cast(weight1_->tensor, xt.dtype()), perm.tokens_per_expert);
    Tensor y = ops::grouped_gemm(mlp_activation(h, activation_, true), ops::cast(weight2_->tensor, xt.dtype()),
                                 perm.tokens_per_expert);
    return std::vector<Tensor>{ops::moe_unpermute(y, perm.row_map, in[2])};
  })[0];
}

MoELayer::MoELayer(const TransformerConfig& c) : Module("MoELayer") {
  router_ = register_module("router", std::make_shared<TopKRouter>(c));
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
    Tensor y = experts_->forward(xt, r.indices, r.weights);
    if (shared_experts_) y = ops::add(y, shared_experts_->forward(xt));
    return ops::reshape(y, {B, S, D});
  });
}

}  // namespace loom::nn
