#include "loom/nn/moe.h"

#include <numeric>

#include "loom/autograd/checkpoint.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/index.h"
#include "loom/ops/linear.h"
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
    const int64_t T = xt.size(0), D = xt.size(1), K = in[1].size(1), E = experts_;
    // Permute the T·K (token, slot) pairs so each expert's tokens are contiguous (stable order).
    std::vector<int64_t> idx = in[1].to_int_vector();
    std::vector<int64_t> counts(static_cast<size_t>(E), 0);
    for (int64_t e : idx) ++counts[e];
    std::vector<int64_t> offsets(static_cast<size_t>(E) + 1, 0);
    std::partial_sum(counts.begin(), counts.end(), offsets.begin() + 1);
    std::vector<int64_t> slot_tokens(idx.size()), slots(idx.size());
    std::vector<int64_t> fill = offsets;
    for (int64_t s = 0; s < T * K; ++s) {
      const int64_t pos = fill[idx[s]]++;
      slot_tokens[pos] = s / K;
      slots[pos] = s;
    }
    Tensor token_index = Tensor::from_vector(slot_tokens, {T * K});
    Tensor xp = ops::index_select(xt, 0, token_index);
    Tensor w1 = ops::cast(weight1_->tensor, xt.dtype()), w2 = ops::cast(weight2_->tensor, xt.dtype());
    std::vector<Tensor> outputs;
    for (int64_t e = 0; e < E; ++e) {
      if (counts[e] == 0) continue;
      Tensor h = ops::matmul(ops::narrow(xp, 0, offsets[e], counts[e]), ops::select(w1, 0, e));
      outputs.push_back(ops::matmul(mlp_activation(h, activation_, true), ops::select(w2, 0, e)));
    }
    Tensor yp = outputs.size() == 1 ? outputs[0] : ops::cat(outputs, 0);
    Tensor wp = ops::index_select(ops::reshape(ops::cast(in[2], xt.dtype()), {T * K}), 0,
                                  Tensor::from_vector(slots, {T * K}));
    yp = ops::mul(yp, ops::unsqueeze(wp, 1));
    return std::vector<Tensor>{ops::index_add(Tensor::zeros({T, D}, xt.dtype()), 0, token_index, yp)};
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
