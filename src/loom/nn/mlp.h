// Feed-forward block. Gated (SwiGLU / GeGLU): linear_fc1 [2·ffn, hidden] holds the gate rows then
// the up rows (docs/models.md), y = fc2(act(gate) ⊙ up). Ungated: y = fc2(act(fc1 x)).
#pragma once

#include <memory>

#include "loom/nn/linear.h"
#include "loom/nn/transformer_config.h"

namespace loom::nn {

class MLP : public Module {
 public:
  MLP(const TransformerConfig& config, int64_t ffn_hidden_size);
  Tensor forward(const Tensor& x);
  int64_t ffn_hidden_size() const { return fc2_->in_features(); }  // local under tensor parallelism
  const std::shared_ptr<Linear>& linear_fc1() const { return fc1_; }
  const std::shared_ptr<Linear>& linear_fc2() const { return fc2_; }

 private:
  Activation activation_;
  bool gated_;
  std::shared_ptr<Linear> fc1_, fc2_;
};

// act(gate) ⊙ up for a gated MLP (gate_up [..., 2·ffn]: gate columns then up columns), act(x)
// otherwise. Shared by the dense MLP and the grouped experts.
Tensor mlp_activation(const Tensor& h, Activation activation, bool gated);

}  // namespace loom::nn
