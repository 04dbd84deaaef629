// ModelArgs: the typed `model:` section. Built from HF config.json names or the MindFormers aliases
// of MindFormers' transformer_config_utils.py (both accepted; both given and different is an error
// naming both keys), with the HF config-class defaults of the chosen architecture for anything not
// given, except the sizes that define the model (vocab_size, hidden_size, num_hidden_layers,
// num_attention_heads and, when a dense layer exists, intermediate_size), which are required.
//
// Architectures (model_type ↔ architectures): llama ↔ LlamaForCausalLM, qwen3 ↔
// Qwen3ForCausalLM, qwen3_moe ↔ Qwen3MoeForCausalLM, deepseek_v3 ↔ DeepseekV3ForCausalLM.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/models/key_reader.h"
#include "loom/nn/transformer_config.h"

namespace loom::models {

struct ArchitectureInfo {
  const char* model_type;
  const char* architecture;
};
const std::vector<ArchitectureInfo>& supported_architectures();

// Deeper than any model trained (hundreds of layers), low enough that a per-layer loop over a
// mistyped depth ends at once.
inline constexpr int64_t kMaxLayers = int64_t{1} << 20;

struct ModelArgs : nn::TransformerConfig {
  std::string model_type;    // "llama" | "qwen3" | "qwen3_moe" | "deepseek_v3"
  std::string architecture;  // "LlamaForCausalLM" | ...
  bool use_flash_attention = true;  // accepted; Loom's attention is always flash-style
  std::string topk_method;          // DeepSeek: "noaux_tc" | "greedy" | "group_limited_greedy"
  std::string hidden_act = "silu";  // as written (silu | gelu | fusedswiglu)
  // The batches carry compressed masks (actual_seq_len) instead of dense [S, S] ones: what
  // context parallelism needs (parallel_training.md §3.3). The model reads the masks it is given.
  bool use_attn_mask_compression = false;
  // Keys of the section that no field uses (reported in one warning by from_json).
  std::vector<std::string> unknown_keys;
  // HF keys with no effect on training (bos/eos ids, torch_dtype, ...), kept for config.json.
  nlohmann::ordered_json hf_extras = nlohmann::ordered_json::object();

  // Parses and validates the section; `prefix` names it in messages ("model"). One ConfigError
  // listing every missing, ill-typed, contradictory or unsupported key, each naming `model.<key>`.
  // Logs the warnings of read_model_args and, with warn_unknown, the unknown keys.
  static ModelArgs from_json(const nlohmann::ordered_json& section, const std::string& prefix = "model",
                             bool warn_unknown = true);

  bool is_moe() const { return num_experts > 0; }
  bool has_dense_layers() const;
  // Checks the cross-field rules again (after code changed fields); ConfigError listing each.
  void validate(const std::string& prefix = "model") const;
  // The same rules, collected: broken ones go to `errors`, a missing size the model needs to `gaps`.
  void validate(const std::string& prefix, std::vector<ModelIssue>& errors, std::vector<ModelIssue>& gaps) const;
};

// One reading of a `model:` section, every problem collected (the configuration layer reads the
// section this way, once, and points each problem at its line). `args` holds what the section
// says as far as it goes: with gaps it is partial (sizes not given are 0), but every fact it has
// (depth, heads, experts, MLA, seq_length, ...) is what the model would use.
struct ModelReading {
  ModelArgs args;
  // model_type / architectures name a supported architecture, so its defaults and rules applied.
  bool architecture_known = false;
  // Keys written wrong: ill-typed, contradictory, unsupported values, broken cross-field rules.
  std::vector<ModelIssue> errors;
  // What keeps the section from describing a model Loom can build although nothing written is
  // wrong: an unsupported architecture, a required size not given.
  std::vector<ModelIssue> gaps;
  // Settings accepted but not honoured as written (quantization_config, softmax dtype).
  std::vector<ModelIssue> warnings;
  // Every key the architecture reads, nested ones as "rope_scaling.factor": what a key in
  // args.unknown_keys may be a misspelling of.
  std::vector<std::string> known_keys;

  bool buildable() const { return errors.empty() && gaps.empty(); }
};

ModelReading read_model_args(const nlohmann::ordered_json& section, const std::string& prefix = "model");

}  // namespace loom::models
