#include "loom/nn/mlp.h"

#include "loom/ops/elementwise.h"
#include "loom/ops/shape.h"

namespace loom::nn {

Tensor mlp_activation(const Tensor& h, Activation activation, bool gated) {
  if (!gated) return activation == Activation::gelu ? ops::gelu(h) : ops::silu(h);
  const int64_t width = h.size(-1);
  LOOM_CHECK(width % 2 == 0, ShapeError, "gated MLP: fc1 output width ", width,
             " is odd; it must hold gate and up halves");
  if (activation != Activation::gelu) return ops::swiglu_packed(h);
  auto halves = ops::split(h, {width / 2, width / 2}, h.dim() - 1);
  return ops::mul(ops::gelu(halves[0]), halves[1]);
}

MLP::MLP(const TransformerConfig& c, int64_t ffn_hidden_size)
    : Module("MLP"), activation_(c.activation), gated_(c.gated_linear_unit) {
  LOOM_CHECK(ffn_hidden_size > 0, ValueError, "MLP: ffn hidden size must be positive, got ",
             ffn_hidden_size);
  LinearOptions o;
  o.bias = c.mlp_bias;
  o.dtype = c.params_dtype;
  o.init = Init::normal(c.init_std);
  fc1_ = register_module("linear_fc1",
                         std::make_shared<Linear>(c.hidden_size, (gated_ ? 2 : 1) * ffn_hidden_size, o));
  fc2_ = register_module("linear_fc2", std::make_shared<Linear>(ffn_hidden_size, c.hidden_size, o));
}

Tensor MLP::forward(const Tensor& x) {
  return invoke1(x, [this](const Tensor& in) {
    return fc2_->forward(mlp_activation(fc1_->forward(in), activation_, gated_));
  });
}

}  // namespace loom::nn
