// A small configuration the planner tests resolve at any world size (no dataset needed: the
// planner reads the model and the layout only).
#pragma once

#include <string>
#include <vector>

#include "loom/config/config.h"

namespace loom::plan::testing {

// vocab 1000 (not a multiple of 3 or 8: FSDP pads), 4 layers, hidden 64, 4 heads, 2 KV heads.
inline std::string tiny_yaml(const std::string& extra_model = "", const std::string& type = "llama") {
  return "training:\n  local_batch_size: 2\n  global_batch_size: 8\n"
         "optimizer:\n  type: AdamW\n"
         "lr_scheduler:\n  type: ConstantWarmUpLR\n  learning_rate: 1.e-3\n  warmup_steps: 0\n"
         "train_dataset:\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n    config:\n"
         "      seq_length: 32\n"
         "model:\n  model_type: " + type + "\n  vocab_size: 1000\n  hidden_size: 64\n  intermediate_size: 96\n"
         "  num_hidden_layers: 4\n  num_attention_heads: 4\n  num_key_value_heads: 2\n"
         "  max_position_embeddings: 64\n  params_dtype: float32\n  compute_dtype: float32\n" +
         extra_model;
}

// A MoE model: 8 routed experts, top-2, every layer sparse.
inline std::string moe_yaml() {
  return tiny_yaml("  num_experts: 8\n  num_experts_per_tok: 2\n  moe_intermediate_size: 32\n", "qwen3_moe");
}

inline config::LoadedConfig load(const std::string& yaml, int world_size, const std::vector<std::string>& sets = {}) {
  config::LoadOptions o;
  o.world_size = world_size;
  o.overrides = sets;
  return config::load_config_text(yaml, "<plan test>", o);
}

}  // namespace loom::plan::testing
