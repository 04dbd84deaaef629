// The `model:` section: HF names and MindFormers aliases (docs/models.md "Keys"), per-architecture
// HF defaults, one warning listing unknown keys, and ConfigErrors naming model.<key> for missing,
// contradictory, ill-typed and unsupported values, including the fusion/precision fields of
// other_training_features.md §3–4.
#include <gtest/gtest.h>

#include "loom/models/model_args.h"
#include "model_test_util.h"

using namespace loom;
using namespace loom::models;
using loom::testing::Json;

namespace {

std::string config_error(const Json& j) {
  try {
    ModelArgs::from_json(j, "model", false);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no ConfigError";
}

Json llama() {
  return Json{{"model_type", "llama"}, {"vocab_size", 100}, {"hidden_size", 64}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"intermediate_size", 128}};
}

}  // namespace

TEST(ModelArgs, HfNamesAndMindFormersAliasesAreTheSameFields) {
  Json hf{{"model_type", "deepseek_v3"}, {"vocab_size", 100}, {"hidden_size", 64}, {"num_hidden_layers", 4},
          {"num_attention_heads", 4}, {"intermediate_size", 96}, {"n_routed_experts", 8},
          {"num_experts_per_tok", 2}, {"moe_intermediate_size", 16}, {"n_group", 4}, {"topk_group", 2},
          {"routed_scaling_factor", 2.0}, {"scoring_func", "sigmoid"}, {"n_shared_experts", 1},
          {"num_nextn_predict_layers", 1}, {"qk_nope_head_dim", 8}, {"qk_rope_head_dim", 4},
          {"rope_theta", 5000.0}, {"router_dense_type", "float32"}, {"balance_via_topk_bias", true},
          {"topk_bias_update_rate", 0.01}, {"kv_lora_rank", 16}, {"q_lora_rank", 24}, {"v_head_dim", 8},
          {"first_k_dense_replace", 1}, {"rms_norm_eps", 1e-5}};
  Json mf{{"model_type", "deepseek_v3"}, {"vocab_size", 100}, {"hidden_size", 64}, {"num_layers", 4},
          {"num_attention_heads", 4}, {"ffn_hidden_size", 96}, {"num_moe_experts", 8}, {"moe_router_topk", 2},
          {"moe_ffn_hidden_size", 16}, {"moe_router_num_groups", 4}, {"moe_router_group_topk", 2},
          {"moe_router_topk_scaling_factor", 2.0}, {"moe_router_score_function", "sigmoid"},
          {"shared_expert_num", 1}, {"mtp_num_layers", 1}, {"qk_head_dim", 8}, {"qk_pos_emb_head_dim", 4},
          {"rotary_base", 5000.0}, {"moe_router_dtype", "float32"}, {"moe_router_enable_expert_bias", true},
          {"moe_router_bias_update_rate", 0.01}, {"kv_lora_rank", 16}, {"q_lora_rank", 24}, {"v_head_dim", 8},
          {"first_k_dense_replace", 1}, {"layernorm_epsilon", 1e-5}};
  ModelArgs a = ModelArgs::from_json(hf), b = ModelArgs::from_json(mf);
  EXPECT_TRUE(a.unknown_keys.empty());
  EXPECT_TRUE(b.unknown_keys.empty());
  for (const ModelArgs* x : {&a, &b}) {
    EXPECT_EQ(x->num_layers, 4);
    EXPECT_EQ(x->intermediate_size, 96);
    EXPECT_EQ(x->num_experts, 8);
    EXPECT_EQ(x->moe_topk, 2);
    EXPECT_EQ(x->moe_intermediate_size, 16);
    EXPECT_EQ(x->moe_router_num_groups, 4);
    EXPECT_EQ(x->moe_router_group_topk, 2);
    EXPECT_EQ(x->routed_scaling_factor, 2.0);
    EXPECT_EQ(x->score_function, nn::ScoreFunction::sigmoid);
    EXPECT_EQ(x->shared_expert_intermediate_size, 16);
    EXPECT_EQ(x->mtp_num_layers, 1);
    EXPECT_EQ(x->qk_nope_head_dim, 8);
    EXPECT_EQ(x->qk_rope_head_dim, 4);
    EXPECT_EQ(x->rope_theta, 5000.0);
    EXPECT_TRUE(x->moe_router_enable_expert_bias);
    EXPECT_EQ(x->moe_router_bias_update_rate, 0.01);
    EXPECT_EQ(x->norm_epsilon, 1e-5);
  }
  // Both names with the same value are fine.
  Json both = llama();
  both["num_layers"] = 2;
  EXPECT_EQ(ModelArgs::from_json(both).num_layers, 2);
}

TEST(ModelArgs, BothNamesWithDifferentValuesNameBothKeys) {
  Json j = llama();
  j["num_layers"] = 3;
  EXPECT_NE(config_error(j).find("model.num_hidden_layers = 2 and model.num_layers = 3 name the same setting"),
            std::string::npos)
      << config_error(j);
  Json k = llama();
  k["num_key_value_heads"] = 2;
  k["num_query_groups"] = 4;
  EXPECT_NE(config_error(k).find("model.num_key_value_heads = 2 and model.num_query_groups = 4"), std::string::npos);
}

TEST(ModelArgs, ArchitectureResolutionAndMismatch) {
  Json j = llama();
  j.erase("model_type");
  j["architectures"] = Json::array({"Qwen3ForCausalLM"});
  ModelArgs a = ModelArgs::from_json(j);
  EXPECT_EQ(a.model_type, "qwen3");
  EXPECT_TRUE(a.qk_layernorm);  // Qwen3 always normalises q and k
  j["model_type"] = "llama";
  EXPECT_NE(config_error(j).find("model.model_type = \"llama\" and model.architectures = \"Qwen3ForCausalLM\" disagree"),
            std::string::npos)
      << config_error(j);
  j.erase("model_type");
  j.erase("architectures");
  EXPECT_NE(config_error(j).find("model.model_type is required"), std::string::npos);
  j["model_type"] = "gpt2";
  EXPECT_NE(config_error(j).find("model.model_type = \"gpt2\" is not supported; use one of: llama (LlamaForCausalLM)"),
            std::string::npos);
}

TEST(ModelArgs, MissingRequiredAndContradictoryKeys) {
  Json j = llama();
  j.erase("hidden_size");
  EXPECT_NE(config_error(j).find("model.hidden_size is required for model_type llama"), std::string::npos);
  Json f = llama();
  f.erase("intermediate_size");
  EXPECT_NE(config_error(f).find("model.intermediate_size (or model.ffn_hidden_size) is required"), std::string::npos);
  Json g = llama();
  g["num_key_value_heads"] = 3;
  EXPECT_NE(config_error(g).find("model.num_attention_heads = 4 is not a multiple of model.num_key_value_heads = 3"),
            std::string::npos);
  Json h = llama();
  h["hidden_size"] = 66;
  EXPECT_NE(config_error(h).find("set model.head_dim explicitly"), std::string::npos);
  Json t = llama();
  t["hidden_size"] = "64";
  EXPECT_NE(config_error(t).find("model.hidden_size must be an integer, got \"64\""), std::string::npos);
  Json e = llama();
  e["num_experts"] = 4;
  EXPECT_NE(config_error(e).find("model.num_experts = 4: model_type llama is dense"), std::string::npos);
  Json m = loom::testing::tiny_deepseek_v3();
  m["topk_group"] = 3;
  EXPECT_NE(config_error(m).find("model.topk_group = 3 must be between 1 and model.n_group = 2"), std::string::npos);
  m = loom::testing::tiny_deepseek_v3();
  m["multi_latent_attention"] = false;
  EXPECT_NE(config_error(m).find("model.multi_latent_attention = False contradicts model_type deepseek_v3"),
            std::string::npos);
}

TEST(ModelArgs, FusionAndPrecisionFields) {
  // other_training_features.md §3: normalization RMSNorm|LayerNorm, fused_norm must stay True,
  // hidden_act gelu|silu|fusedswiglu.
  Json j = llama();
  j["normalization"] = "LayerNorm";
  j["hidden_act"] = "fusedswiglu";
  j["fused_norm"] = true;
  j["use_flash_attention"] = true;
  ModelArgs a = ModelArgs::from_json(j);
  EXPECT_EQ(a.normalization, nn::NormKind::layer_norm);
  EXPECT_EQ(a.activation, nn::Activation::fusedswiglu);
  j["fused_norm"] = false;
  EXPECT_NE(config_error(j).find("model.fused_norm = False is not supported: get_norm_cls supports only the fused"),
            std::string::npos);
  Json n = llama();
  n["normalization"] = "BatchNorm";
  EXPECT_NE(config_error(n).find("only \"RMSNorm\" or \"LayerNorm\""), std::string::npos);
  Json h = llama();
  h["hidden_act"] = "relu";
  EXPECT_NE(config_error(h).find("only gelu, silu and fusedswiglu are registered"), std::string::npos);
  // §4: dtype fields, defaults fp32 master / bf16 compute / fp32 sensitive ops.
  ModelArgs d = ModelArgs::from_json(llama());
  EXPECT_EQ(d.params_dtype, DType::f32);
  EXPECT_EQ(d.compute_dtype, DType::bf16);
  EXPECT_EQ(d.layernorm_compute_dtype, DType::f32);
  EXPECT_EQ(d.softmax_compute_dtype, DType::f32);
  EXPECT_EQ(d.rotary_dtype, DType::f32);
  EXPECT_EQ(d.router_dense_type, DType::f32);
  Json p = llama();
  p["compute_dtype"] = "float16";
  p["layernorm_compute_dtype"] = "bfloat16";
  EXPECT_EQ(ModelArgs::from_json(p).compute_dtype, DType::f16);
  p["rotary_dtype"] = "int8";
  EXPECT_NE(config_error(p).find("model.rotary_dtype = \"int8\" is not a dtype"), std::string::npos);
}

TEST(ModelArgs, UnknownKeysAreCollectedForOneWarning) {
  Json j = llama();
  j["hiden_size"] = 64;
  j["rope_scaling"] = Json{{"type", "linear"}, {"factor", 2.0}, {"fator", 3}};
  j["bos_token_id"] = 1;  // HF metadata: known, kept for config.json
  ModelArgs a = ModelArgs::from_json(j, "model", false);
  EXPECT_EQ(a.unknown_keys, (std::vector<std::string>{"hiden_size", "rope_scaling.fator"}));
  EXPECT_EQ(a.hf_extras["bos_token_id"], 1);
  EXPECT_EQ(a.rope_scaling.kind, ops::RopeScaling::Kind::linear);
  EXPECT_EQ(a.rope_scaling.factor, 2.0);
}

TEST(ModelArgs, ArchitectureDefaultsFollowTheHfConfigClasses) {
  Json ds{{"model_type", "deepseek_v3"}, {"vocab_size", 129280}, {"hidden_size", 1792}, {"num_hidden_layers", 12},
          {"num_attention_heads", 8}, {"intermediate_size", 3072}, {"n_routed_experts", 8}, {"num_experts_per_tok", 4},
          {"seq_length", 4096}, {"use_flash_attention", true}, {"compute_dtype", "bfloat16"}};
  ModelArgs a = ModelArgs::from_json(ds);  // the spec's configuration.md example
  EXPECT_TRUE(a.unknown_keys.empty());
  EXPECT_EQ(a.q_lora_rank, 1536);
  EXPECT_EQ(a.kv_lora_rank, 512);
  EXPECT_EQ(a.first_k_dense_replace, 3);
  EXPECT_EQ(a.moe_router_num_groups, 8);
  EXPECT_EQ(a.moe_router_group_topk, 4);
  EXPECT_EQ(a.shared_expert_intermediate_size, 2048);
  EXPECT_EQ(a.score_function, nn::ScoreFunction::sigmoid);
  Json q{{"model_type", "qwen3_moe"}, {"vocab_size", 100}, {"hidden_size", 32}, {"num_hidden_layers", 2},
         {"num_attention_heads", 4}};
  ModelArgs b = ModelArgs::from_json(q);  // every layer sparse: no intermediate_size needed
  EXPECT_EQ(b.num_experts, 128);
  EXPECT_EQ(b.moe_topk, 8);
  EXPECT_FALSE(b.norm_topk_prob);
  EXPECT_EQ(b.moe_aux_loss_coeffs, std::vector<double>{0.001});
  // HF writes "q_lora_rank": null for DeepSeek-V2-Lite style models: no q compression.
  ds["q_lora_rank"] = nullptr;
  EXPECT_EQ(ModelArgs::from_json(ds).q_lora_rank, 0);
}

TEST(ModelArgs, RopeScalingNestedAndFlatForms) {
  Json hf = loom::testing::tiny_deepseek_v3();
  for (const char* k : {"position_embedding_type", "rotary_scaling_factor", "original_max_position_embeddings",
                        "mscale", "mscale_all_dim"})
    hf.erase(k);
  hf["rope_scaling"] = Json{{"type", "yarn"}, {"factor", 4}, {"original_max_position_embeddings", 4},
                            {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  ModelArgs a = ModelArgs::from_json(hf), b = ModelArgs::from_json(loom::testing::tiny_deepseek_v3());
  for (const ModelArgs* x : {&a, &b}) {
    EXPECT_EQ(x->rope_scaling.kind, ops::RopeScaling::Kind::yarn);
    EXPECT_EQ(x->rope_scaling.factor, 4.0);
    EXPECT_EQ(x->rope_scaling.original_max_position_embeddings, 4);
    EXPECT_EQ(x->rope_scaling.mscale_all_dim, 1.0);
    EXPECT_EQ(x->rope_scaling.beta_fast, 32.0);
  }
  hf["rotary_scaling_factor"] = 8;
  EXPECT_NE(config_error(hf).find("model.rope_scaling.factor = 4 and model.rotary_scaling_factor = 8 disagree"),
            std::string::npos)
      << config_error(hf);
  Json l = llama();
  l["rope_scaling"] = Json{{"rope_type", "dynamic"}, {"factor", 2.0}};
  EXPECT_NE(config_error(l).find("rope_scaling type \"dynamic\" is not supported"), std::string::npos);
}

// The collecting reading (what the configuration layer uses): every problem of the section, each
// with the key it is about, and nothing thrown.
TEST(ModelArgs, ReadingCollectsEveryProblemWithItsKey) {
  Json j = llama();
  j["hidden_size"] = "64";
  j["hidden_act"] = "relu";
  j["num_layers"] = 3;  // num_hidden_layers says 2
  ModelReading r = read_model_args(j);
  ASSERT_EQ(r.errors.size(), 3u);
  EXPECT_EQ(r.errors[0], (ModelIssue{"model.hidden_size", "model.hidden_size must be an integer, got \"64\""}));
  EXPECT_EQ(r.errors[1].path, "model.num_layers");
  EXPECT_NE(r.errors[1].message.find("model.num_hidden_layers = 2 and model.num_layers = 3 name the same setting"),
            std::string::npos);
  EXPECT_EQ(r.errors[2].path, "model.hidden_act");
  EXPECT_TRUE(r.architecture_known);
  EXPECT_FALSE(r.buildable());
  // from_json reports the same problems, all of them in one ConfigError.
  const std::string e = config_error(j);
  EXPECT_NE(e.find(r.errors[0].message + "\n"), std::string::npos) << e;
  EXPECT_NE(e.find(r.errors[2].message), std::string::npos) << e;
}

// A section that does not (yet) describe a model Loom builds has gaps, not errors, and still
// gives the facts it states.
TEST(ModelArgs, GapsAreWhatABuildableModelStillNeeds) {
  ModelReading partial = read_model_args(Json{{"model_type", "deepseek_v3"}, {"num_hidden_layers", 12},
                                              {"num_attention_heads", 8}, {"num_nextn_predict_layers", 1}});
  EXPECT_TRUE(partial.errors.empty());
  ASSERT_EQ(partial.gaps.size(), 3u);
  EXPECT_EQ(partial.gaps[0].path, "model.vocab_size");
  EXPECT_EQ(partial.gaps[1].path, "model.hidden_size");
  EXPECT_EQ(partial.gaps[2].path, "model.intermediate_size");  // first_k_dense_replace = 3 dense layers
  EXPECT_EQ(partial.args.num_layers, 12);
  EXPECT_EQ(partial.args.mtp_num_layers, 1);
  EXPECT_EQ(partial.args.num_experts, 256);  // the DeepSeek-V3 default
  EXPECT_TRUE(partial.args.multi_latent_attention);

  ModelReading other = read_model_args(Json{{"model_type", "gpt2"}, {"num_layers", 4}, {"kv_lora_rank", 8},
                                            {"n_routed_experts", 6}, {"use_attn_mask_compression", true}});
  EXPECT_FALSE(other.architecture_known);
  EXPECT_TRUE(other.errors.empty());
  ASSERT_EQ(other.gaps.size(), 1u);
  EXPECT_EQ(other.gaps[0].path, "model.model_type");
  EXPECT_NE(other.gaps[0].message.find("model.model_type = \"gpt2\" is not supported"), std::string::npos);
  EXPECT_EQ(other.args.num_layers, 4);
  EXPECT_EQ(other.args.num_experts, 6);
  EXPECT_TRUE(other.args.multi_latent_attention);
  EXPECT_TRUE(other.args.use_attn_mask_compression);

  Json dense = llama();
  dense.erase("intermediate_size");
  ModelReading no_ffn = read_model_args(dense);
  EXPECT_TRUE(no_ffn.errors.empty());
  ASSERT_EQ(no_ffn.gaps.size(), 1u);
  EXPECT_EQ(no_ffn.gaps[0].path, "model.intermediate_size");
}

TEST(ModelArgs, ReadingListsKnownKeysAndWarnings) {
  Json j = llama();
  j["hiden_size"] = 64;
  j["softmax_compute_dtype"] = "bfloat16";
  ModelReading r = read_model_args(j);
  EXPECT_TRUE(r.buildable());
  EXPECT_EQ(r.args.unknown_keys, std::vector<std::string>{"hiden_size"});
  for (const char* k : {"hidden_size", "num_layers", "rope_scaling.factor", "use_attn_mask_compression"})
    EXPECT_NE(std::find(r.known_keys.begin(), r.known_keys.end(), k), r.known_keys.end()) << k;
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0].path, "model.softmax_compute_dtype");
}
