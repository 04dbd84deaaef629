#include "loom/nn/mtp.h"

#include "loom/ops/shape.h"

namespace loom::nn {

MTPLayer::MTPLayer(const TransformerConfig& c, int64_t depth, std::shared_ptr<RotaryEmbedding> rotary)
    : Module("MultiTokenPredictionLayer") {
  enorm_ = register_module("enorm", make_norm(c, c.hidden_size));
  hnorm_ = register_module("hnorm", make_norm(c, c.hidden_size));
  LinearOptions o;
  o.dtype = c.params_dtype;
  o.init = Init::normal(c.init_std);
  eh_proj_ = register_module("eh_proj", std::make_shared<Linear>(2 * c.hidden_size, c.hidden_size, o));
  layer_ = register_module("transformer_layer",
                           std::make_shared<TransformerLayer>(c, c.num_layers + depth, std::move(rotary)));
  final_layernorm_ = register_module("final_layernorm", make_norm(c, c.hidden_size));
}

Tensor MTPLayer::forward(const Tensor& hidden, const Tensor& embeds, const Tensor& position_ids,
                         const Tensor& doc_ends) {
  return invoke({hidden, embeds, position_ids, doc_ends}, [this](const std::vector<Tensor>& in) {
    Tensor h = eh_proj_->forward(ops::cat({enorm_->forward(in[1]), hnorm_->forward(in[0])}, 2));
    return std::vector<Tensor>{layer_->forward(h, in[2], in[3])};
  })[0];
}

MTPBlock::MTPBlock(const TransformerConfig& c, std::shared_ptr<RotaryEmbedding> rotary)
    : Module("MultiTokenPredictionBlock") {
  layers_ = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t k = 0; k < c.mtp_num_layers; ++k) layers_->append(std::make_shared<MTPLayer>(c, k, rotary));
}

std::vector<MTPLayer*> MTPBlock::layers() {
  std::vector<MTPLayer*> out;
  for (size_t i = 0; i < layers_->size(); ++i) out.push_back(static_cast<MTPLayer*>(layers_->at(i).get()));
  return out;
}

}  // namespace loom::nn
