// Pre-norm decoder layer:
//   h = x + self_attention(input_layernorm(x));  out = h + mlp(pre_mlp_layernorm(h))
// `mlp` is a dense MLP or, for MoE layers (config.is_moe_layer), a MoELayer.
#pragma once

#include <memory>

#include "loom/nn/attention.h"
#include "loom/nn/moe.h"

namespace loom::nn {

class TransformerLayer : public Module {
 public:
  // layer_number: index among decoder layers (MTP layers pass num_layers + k), which decides
  // dense vs MoE.
  TransformerLayer(const TransformerConfig& config, int64_t layer_number,
                   std::shared_ptr<RotaryEmbedding> rotary);
  Tensor forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends);

  AttentionLayer& self_attention() { return *attention_; }
  MoELayer* moe() { return moe_.get(); }  // null for dense layers
  int64_t layer_number() const { return layer_number_; }

 private:
  int64_t layer_number_;
  std::shared_ptr<Norm> input_layernorm_, pre_mlp_layernorm_;
  std::shared_ptr<AttentionLayer> attention_;
  std::shared_ptr<MLP> mlp_;
  std::shared_ptr<MoELayer> moe_;
};

}  // namespace loom::nn
