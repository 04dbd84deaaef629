#include "loom/nn/transformer_layer.h"

#include "loom/nn/mla.h"
#include "loom/ops/elementwise.h"

namespace loom::nn {

bool TransformerConfig::is_moe_layer(int64_t layer) const {
  if (num_experts <= 0 || layer < first_k_dense_replace) return false;
  for (int64_t l : mlp_only_layers)
    if (l == layer) return false;
  if (moe_layer_freq > 1 && layer % moe_layer_freq != 0) return false;
  if (decoder_sparse_step > 1 && (layer + 1) % decoder_sparse_step != 0) return false;
  return true;
}

TransformerLayer::TransformerLayer(const TransformerConfig& c, int64_t layer_number,
                                   std::shared_ptr<RotaryEmbedding> rotary)
    : Module("TransformerLayer"), layer_number_(layer_number) {
  input_layernorm_ = register_module("input_layernorm", make_norm(c, c.hidden_size));
  if (c.multi_latent_attention)
    attention_ = register_module("self_attention", std::make_shared<MLASelfAttention>(c, rotary));
  else
    attention_ = register_module("self_attention", std::make_shared<SelfAttention>(c, rotary));
  pre_mlp_layernorm_ = register_module("pre_mlp_layernorm", make_norm(c, c.hidden_size));
  if (c.is_moe_layer(layer_number))
    moe_ = register_module("mlp", std::make_shared<MoELayer>(c));
  else
    mlp_ = register_module("mlp", std::make_shared<MLP>(c, c.intermediate_size));
}

Tensor TransformerLayer::forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) {
  return invoke({x, position_ids, doc_ends}, [this](const std::vector<Tensor>& in) {
    Tensor h = ops::add(in[0], attention_->forward(input_layernorm_->forward(in[0]), in[1], in[2]));
    Tensor n = pre_mlp_layernorm_->forward(h);
    return std::vector<Tensor>{ops::add(h, moe_ ? moe_->forward(n) : mlp_->forward(n))};
  })[0];
}

}  // namespace loom::nn
