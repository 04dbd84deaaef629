// Shared by the single-process and mpirun tests of the dist layer: tiny models of the registry,
// deterministic batches, and a reference one-process training step to compare FSDP against.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/autograd/engine.h"
#include "loom/core/rng.h"
#include "loom/models/registry.h"
#include "loom/nn/causal_lm.h"
#include "loom/ops/elementwise.h"

namespace loom::testing {

using Json = nlohmann::ordered_json;

// Row counts that do not divide by 2, 3 or 4 (vocab 25, hidden 18, ffn 22) so shards are uneven
// and some padding exists.
inline Json dist_tiny_llama(bool tied = false) {
  return Json{{"model_type", "llama"},     {"vocab_size", 25},         {"hidden_size", 18},
              {"num_layers", 3},           {"num_attention_heads", 3}, {"num_query_groups", 1},
              {"ffn_hidden_size", 22},     {"rms_norm_eps", 1e-5},     {"compute_dtype", "float32"},
              {"tie_word_embeddings", tied}};
}

// MoE + MLA + MTP: every kind of unit (dense layer, MoE layer, MTP layer, root with the shared
// embedding used by MTP).
inline Json dist_tiny_deepseek_v3() {
  return Json{{"model_type", "deepseek_v3"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 2},
              {"num_attention_heads", 2}, {"intermediate_size", 20}, {"moe_intermediate_size", 6},
              {"n_routed_experts", 4}, {"num_experts_per_tok", 2}, {"n_group", 2}, {"topk_group", 1},
              {"n_shared_experts", 1}, {"first_k_dense_replace", 1}, {"routed_scaling_factor", 2.5},
              {"q_lora_rank", 8}, {"kv_lora_rank", 6}, {"qk_nope_head_dim", 4}, {"qk_pos_emb_head_dim", 2},
              {"v_head_dim", 4}, {"num_nextn_predict_layers", 1}, {"mtp_loss_scaling_factor", 0.3},
              {"moe_router_load_balancing_type", "seq_aux_loss"}, {"moe_aux_loss_coeff", 0.001},
              {"compute_dtype", "float32"}};
}

// Micro-batch `index` of a deterministic stream (the same on every rank).
inline nn::LMBatch micro_batch(int64_t vocab, int64_t B, int64_t S, int64_t index) {
  nn::LMBatch b;
  std::vector<int32_t> ids, labels;
  std::vector<float> mask;
  const uint64_t seed = 1000 + static_cast<uint64_t>(index);
  for (int64_t i = 0; i < B * S; ++i) {
    ids.push_back(static_cast<int32_t>(stream_uniform({seed, 1, 0}, i) * vocab) % static_cast<int32_t>(vocab));
    labels.push_back(static_cast<int32_t>(stream_uniform({seed, 2, 0}, i) * vocab) % static_cast<int32_t>(vocab));
    mask.push_back(i % 7 == 3 ? 0.f : 1.f);
  }
  b.input_ids = Tensor::from_vector(ids, {B, S});
  b.labels = Tensor::from_vector(labels, {B, S});
  b.loss_mask = Tensor::from_vector(mask, {B, S});
  return b;
}

// One process, `micro` micro-batches: backward(loss / micro) each (MindFormers' _forward_backward
// with A = micro), grads accumulated. Returns Σ loss_i / micro and fills grads by name.
inline double reference_step(nn::CausalLM& model, int64_t vocab, int64_t B, int64_t S, int64_t first, int64_t micro,
                             std::map<std::string, Tensor>* grads) {
  model.zero_grad();
  double loss = 0;
  for (int64_t i = 0; i < micro; ++i) {
    nn::LMOutput out = model.forward(micro_batch(vocab, B, S, first + i));
    Tensor scaled = micro > 1 ? ops::scale(out.loss, 1.0 / static_cast<double>(micro)) : out.loss;
    autograd::backward(scaled);
    loss += out.loss.item() / static_cast<double>(micro);
  }
  if (grads)
    for (auto& [name, p] : model.named_parameters()) (*grads)[name] = p->tensor.grad();
  return loss;
}

}  // namespace loom::testing
