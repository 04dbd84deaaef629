// ModelArgs: the typed `model:` section. Built from HF config.json names or the MindFormers aliases
// of semantics.md §4 (both accepted; both given and different is an error naming both keys), with
// the HF config-class defaults of the chosen architecture for anything not given, except the
// sizes that define the model (vocab_size, hidden_size, num_hidden_layers, num_attention_heads and,
// when a dense layer exists, intermediate_size), which are required.
//
// Architectures (model_type ↔ architectures): llama ↔ LlamaForCausalLM, qwen3 ↔
// Qwen3ForCausalLM, qwen3_moe ↔ Qwen3MoeForCausalLM, deepseek_v3 ↔ DeepseekV3ForCausalLM.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/nn/transformer_config.h"

namespace loom::models {

struct ArchitectureInfo {
  const char* model_type;
  const char* architecture;
};
const std::vector<ArchitectureInfo>& supported_architectures();

struct ModelArgs : nn::TransformerConfig {
  std::string model_type;    // "llama" | "qwen3" | "qwen3_moe" | "deepseek_v3"
  std::string architecture;  // "LlamaForCausalLM" | ...
  bool use_flash_attention = true;  // accepted; Loom's attention is always flash-style
  std::string topk_method;          // DeepSeek: "noaux_tc" | "greedy" | "group_limited_greedy"
  std::string hidden_act = "silu";  // as written (silu | gelu | fusedswiglu)
  // Keys of the section that no field uses (reported in one warning by from_json).
  std::vector<std::string> unknown_keys;
  // HF keys with no effect on training (bos/eos ids, torch_dtype, ...), kept for config.json.
  nlohmann::ordered_json hf_extras = nlohmann::ordered_json::object();

  // Parses and validates the section; `prefix` names it in messages ("model").
  // ConfigError naming `model.<key>` on a missing, ill-typed, contradictory or unsupported key.
  static ModelArgs from_json(const nlohmann::ordered_json& section, const std::string& prefix = "model",
                             bool warn_unknown = true);

  bool is_moe() const { return num_experts > 0; }
  bool has_dense_layers() const;
  // Checks the cross-field rules again (after code changed fields).
  void validate(const std::string& prefix = "model") const;
};

}  // namespace loom::models
