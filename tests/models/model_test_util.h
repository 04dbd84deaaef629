// Tiny model sections of the four architectures (HF names mixed with MindFormers aliases, as a
// user's YAML may have them) and a random batch.
#pragma once

#include <nlohmann/json.hpp>

#include "loom/core/rng.h"
#include "loom/nn/causal_lm.h"

namespace loom::testing {

using Json = nlohmann::ordered_json;

inline Json tiny_llama() {
  return Json{{"model_type", "llama"},   {"vocab_size", 24},          {"hidden_size", 16},
              {"num_layers", 2},         {"num_attention_heads", 4},  {"num_query_groups", 2},
              {"ffn_hidden_size", 20},   {"rms_norm_eps", 1e-5},      {"compute_dtype", "float32"},
              {"tie_word_embeddings", true}};
}

inline Json tiny_qwen3() {
  return Json{{"model_type", "qwen3"}, {"architectures", "Qwen3ForCausalLM"}, {"vocab_size", 24},
              {"hidden_size", 16},     {"num_hidden_layers", 2},              {"num_attention_heads", 2},
              {"num_key_value_heads", 1}, {"head_dim", 8},                    {"intermediate_size", 20},
              {"rope_theta", 1e6},     {"compute_dtype", "float32"}};
}

inline Json tiny_qwen3_moe() {
  return Json{{"model_type", "qwen3_moe"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 20},
              {"num_experts", 4}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 8},
              {"norm_topk_prob", true}, {"mlp_only_layers", Json::array({0})},
              {"moe_router_load_balancing_type", "aux_loss"}, {"router_aux_loss_coef", 0.01},
              {"compute_dtype", "float32"}};
}

inline Json tiny_deepseek_v3() {
  return Json{{"model_type", "deepseek_v3"}, {"architectures", "DeepseekV3ForCausalLM"},
              {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 2}, {"num_attention_heads", 2},
              {"intermediate_size", 20}, {"moe_intermediate_size", 6}, {"n_routed_experts", 4},
              {"num_experts_per_tok", 2}, {"n_group", 2}, {"topk_group", 1}, {"n_shared_experts", 1},
              {"first_k_dense_replace", 1}, {"routed_scaling_factor", 2.5}, {"q_lora_rank", 8},
              {"kv_lora_rank", 6}, {"qk_nope_head_dim", 4}, {"qk_pos_emb_head_dim", 2}, {"v_head_dim", 4},
              {"num_nextn_predict_layers", 1}, {"mtp_loss_scaling_factor", 0.3},
              {"moe_router_load_balancing_type", "seq_aux_loss"}, {"moe_aux_loss_coeff", 0.001},
              {"position_embedding_type", "yarn"}, {"rotary_scaling_factor", 4}, {"original_max_position_embeddings", 4},
              {"mscale", 1.0}, {"mscale_all_dim", 1.0}, {"compute_dtype", "float32"}};
}

inline nn::LMBatch random_batch(int64_t vocab, int64_t B, int64_t S, uint64_t seed) {
  nn::LMBatch b;
  std::vector<int32_t> ids, labels;
  std::vector<float> mask;
  for (int64_t i = 0; i < B * S; ++i) {
    ids.push_back(static_cast<int32_t>(stream_uniform({seed, 1, 0}, i) * vocab) % vocab);
    labels.push_back(static_cast<int32_t>(stream_uniform({seed, 2, 0}, i) * vocab) % vocab);
    mask.push_back(i % 5 == 3 ? 0.f : 1.f);
  }
  b.input_ids = Tensor::from_vector(ids, {B, S});
  b.labels = Tensor::from_vector(labels, {B, S});
  b.loss_mask = Tensor::from_vector(mask, {B, S});
  return b;
}

}  // namespace loom::testing
