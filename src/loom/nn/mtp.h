// DeepSeek-V3 multi-token prediction layer (DeepSeek-V3 technical report; MindFormers'
// multi_token_prediction.py). Depth k combines the previous depth's hidden states with the
// embedding of the token k positions ahead:
//   h' = eh_proj([enorm(Emb(t_{i+k})) ; hnorm(h^{k-1}_i)])     (embedding first, as MindFormers)
//   h^k = transformer_layer(h');  logits via final_layernorm and the shared output head.
#pragma once

#include <memory>
#include <vector>

#include "loom/nn/transformer_layer.h"

namespace loom::nn {

class MTPLayer : public Module {
 public:
  MTPLayer(const TransformerConfig& config, int64_t depth, std::shared_ptr<RotaryEmbedding> rotary);
  // hidden [B,S,D] (previous depth, before any final norm), embeds [B,S,D] of the shifted ids.
  Tensor forward(const Tensor& hidden, const Tensor& embeds, const Tensor& position_ids,
                 const Tensor& doc_ends);
  Norm& final_layernorm() { return *final_layernorm_; }
  TransformerLayer& transformer_layer() { return *layer_; }

 private:
  std::shared_ptr<Norm> enorm_, hnorm_, final_layernorm_;
  std::shared_ptr<Linear> eh_proj_;
  std::shared_ptr<TransformerLayer> layer_;
};

// `mtp.layers.{k}`, k = 0..num_nextn_predict_layers-1.
class MTPBlock : public Module {
 public:
  MTPBlock(const TransformerConfig& config, std::shared_ptr<RotaryEmbedding> rotary);
  std::vector<MTPLayer*> layers();

 private:
  std::shared_ptr<ModuleList> layers_;
};

}  // namespace loom::nn
