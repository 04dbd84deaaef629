// Shared helpers of the nn tests: a tiny float64 configuration and the parameter list of a module
// (for finite-difference checks over every weight).
#pragma once

#include <vector>

#include "loom/nn/module.h"
#include "loom/nn/transformer_config.h"

namespace loom::testing {

// 2 layers, hidden 8, 2 heads of 4 with 1 kv head, ffn 6, vocab 11; everything in float64 so
// finite differences are exact to ~1e-9.
inline nn::TransformerConfig tiny_f64_config() {
  nn::TransformerConfig c;
  c.vocab_size = 11;
  c.hidden_size = 8;
  c.num_layers = 2;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 1;
  c.head_dim = 4;
  c.intermediate_size = 6;
  c.max_position_embeddings = 16;
  c.norm_epsilon = 1e-6;
  c.init_std = 0.4;  // large enough that every nonlinearity is exercised
  c.params_dtype = DType::f64;
  c.compute_dtype = DType::f64;
  c.layernorm_compute_dtype = DType::f64;
  c.rotary_dtype = DType::f64;
  c.router_dense_type = DType::f64;
  return c;
}

inline std::vector<Tensor> parameters_of(nn::Module& m) {
  std::vector<Tensor> out;
  for (auto& [name, p] : m.named_parameters()) out.push_back(p->tensor);
  return out;
}

}  // namespace loom::testing
