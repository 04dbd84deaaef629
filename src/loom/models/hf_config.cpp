#include "loom/models/hf_config.h"

#include "loom/core/error.h"

namespace loom::models {

using Json = nlohmann::ordered_json;

namespace {

Json rope_scaling_json(const ModelArgs& a) {
  if (a.llama3_rope.enabled)
    return Json{{"rope_type", "llama3"},
                {"factor", a.llama3_rope.factor},
                {"low_freq_factor", a.llama3_rope.low_freq_factor},
                {"high_freq_factor", a.llama3_rope.high_freq_factor},
                {"original_max_position_embeddings", a.llama3_rope.original_max_position_embeddings}};
  const auto& s = a.rope_scaling;
  if (s.kind == ops::RopeScaling::Kind::none) return nullptr;
  if (s.kind == ops::RopeScaling::Kind::linear) return Json{{"rope_type", "linear"}, {"factor", s.factor}};
  Json j{{"type", "yarn"},
         {"factor", s.factor},
         {"original_max_position_embeddings", s.original_max_position_embeddings},
         {"beta_fast", s.beta_fast},
         {"beta_slow", s.beta_slow}};
  if (s.mscale != 0) j["mscale"] = s.mscale;
  if (s.mscale_all_dim != 0) j["mscale_all_dim"] = s.mscale_all_dim;
  if (s.attention_factor) j["attention_factor"] = *s.attention_factor;
  if (!s.truncate) j["truncate"] = false;
  return j;
}

void require(bool ok, const std::string& field, const std::string& why) {
  LOOM_CHECK(ok, ConfigError, "cannot write an HF config: model.", field, " ", why);
}

}  // namespace

Json to_hf_config(const ModelArgs& a) {
  const std::string& t = a.model_type;
  require(a.normalization == nn::NormKind::rms_norm, "normalization",
          "= LayerNorm has no HF equivalent for " + t + "; HF models use RMSNorm");
  require(a.gated_linear_unit, "gated_linear_unit", "= False has no HF equivalent (HF MLPs are gated)");
  require(a.mtp_num_layers == 0 || t == "deepseek_v3", "num_nextn_predict_layers",
          "is only representable for deepseek_v3");
  Json j;
  j["architectures"] = Json::array({a.architecture});
  j["model_type"] = t;
  j["vocab_size"] = a.vocab_size;
  j["hidden_size"] = a.hidden_size;
  if (a.intermediate_size > 0) j["intermediate_size"] = a.intermediate_size;
  j["num_hidden_layers"] = a.num_layers;
  j["num_attention_heads"] = a.num_attention_heads;
  j["num_key_value_heads"] = a.num_key_value_heads;
  if (!a.multi_latent_attention) j["head_dim"] = a.head_dim;
  j["hidden_act"] = a.activation == nn::Activation::gelu ? "gelu" : "silu";
  j["max_position_embeddings"] = a.max_position_embeddings;
  j["rms_norm_eps"] = a.norm_epsilon;
  j["rope_theta"] = a.rope_theta;
  j["rope_scaling"] = rope_scaling_json(a);
  j["tie_word_embeddings"] = a.tie_word_embeddings;
  j["attention_bias"] = a.attention_bias;
  j["initializer_range"] = a.init_std;
  if (t == "llama") {
    require(!a.qk_layernorm, "use_qk_norm", "= True has no HF Llama equivalent (use model_type qwen3)");
    j["mlp_bias"] = a.mlp_bias;
  } else {
    require(!a.mlp_bias, "mlp_bias", "= True has no HF equivalent for " + t);
  }
  if (t == "qwen3" || t == "qwen3_moe") {
    require(a.qk_layernorm, "use_qk_norm", "= False has no HF equivalent: Qwen3 always normalises q and k");
    require(!a.rope_interleave, "rope_interleave", "= True has no HF equivalent for " + t);
  }
  if (t == "qwen3_moe") {
    require(a.shared_expert_intermediate_size == 0, "n_shared_experts", "must be 0: Qwen3-MoE has no shared experts");
    require(a.first_k_dense_replace == 0 && a.moe_layer_freq == 1, "first_k_dense_replace",
            "/ moe_layer_freq have no Qwen3-MoE equivalent (use decoder_sparse_step / mlp_only_layers)");
    require(a.score_function == nn::ScoreFunction::softmax && a.routed_scaling_factor == 1.0 &&
                a.moe_router_num_groups <= 1 && !a.moe_router_enable_expert_bias,
            "scoring_func", "must be plain softmax top-k routing for Qwen3-MoE (no groups, scaling or expert bias)");
    j["num_experts"] = a.num_experts;
    j["num_experts_per_tok"] = a.moe_topk;
    j["moe_intermediate_size"] = a.moe_intermediate_size;
    j["norm_topk_prob"] = a.norm_topk_prob;
    j["decoder_sparse_step"] = a.decoder_sparse_step;
    j["mlp_only_layers"] = a.mlp_only_layers;
    j["router_aux_loss_coef"] = a.moe_aux_loss_coeffs.empty() ? 0.0 : a.moe_aux_loss_coeffs.front();
  }
  if (t == "deepseek_v3") {
    require(a.decoder_sparse_step == 1 && a.mlp_only_layers.empty(), "decoder_sparse_step",
            "/ mlp_only_layers have no DeepSeek-V3 equivalent");
    require(a.shared_expert_intermediate_size % a.moe_intermediate_size == 0, "moe_shared_expert_intermediate_size",
            "must be a multiple of moe_intermediate_size (HF stores n_shared_experts)");
    j["q_lora_rank"] = a.q_lora_rank > 0 ? Json(a.q_lora_rank) : Json(nullptr);
    j["kv_lora_rank"] = a.kv_lora_rank;
    j["qk_nope_head_dim"] = a.qk_nope_head_dim;
    j["qk_rope_head_dim"] = a.qk_rope_head_dim;
    j["v_head_dim"] = a.v_head_dim;
    j["rope_interleave"] = a.rope_interleave;
    j["n_routed_experts"] = a.num_experts;
    j["n_shared_experts"] = a.shared_expert_intermediate_size / a.moe_intermediate_size;
    j["num_experts_per_tok"] = a.moe_topk;
    j["moe_intermediate_size"] = a.moe_intermediate_size;
    j["first_k_dense_replace"] = a.first_k_dense_replace;
    j["moe_layer_freq"] = a.moe_layer_freq;
    j["n_group"] = a.moe_router_num_groups > 1 ? a.moe_router_num_groups : 1;
    j["topk_group"] = a.moe_router_num_groups > 1 ? a.moe_router_group_topk : 1;
    j["routed_scaling_factor"] = a.routed_scaling_factor;
    j["scoring_func"] = a.score_function == nn::ScoreFunction::sigmoid ? "sigmoid" : "softmax";
    j["topk_method"] = a.topk_method.empty() ? "noaux_tc" : a.topk_method;
    j["norm_topk_prob"] = a.norm_topk_prob;
    j["num_nextn_predict_layers"] = a.mtp_num_layers;
  }
  for (auto it = a.hf_extras.begin(); it != a.hf_extras.end(); ++it)
    if (!j.contains(it.key())) j[it.key()] = it.value();
  return j;
}

}  // namespace loom::models
