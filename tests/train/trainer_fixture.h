// A tiny training setup for trainer tests: a learnable token dataset (repeating patterns, so the
// loss can fall quickly) written with the data layer's writer, and a tiny Llama config.
#pragma once

#include <string>
#include <vector>

#include "loom/config/config.h"
#include "loom/data/indexed_dataset_builder.h"
#include "loom/train/trainer.h"
#include "testing/temp_dir.h"

namespace loom::testing {

inline std::string write_pattern_dataset(const TempDir& dir, int64_t vocab = 64, int64_t docs = 64, int64_t doc_len = 130) {
  const std::string prefix = dir.file("tokens");
  data::IndexedDatasetBuilder b(prefix + ".bin", data::TokenDType::u16);
  for (int64_t d = 0; d < docs; ++d) {
    std::vector<int64_t> tokens;
    const int64_t stride = 1 + d % 5;
    for (int64_t i = 0; i < doc_len; ++i) tokens.push_back((d * 7 + i * stride) % (vocab - 3) + 3);
    std::vector<int32_t> lengths{static_cast<int32_t>(tokens.size())};
    b.add_document(tokens, lengths);
  }
  b.finalize(prefix + ".idx");
  return prefix;
}

// A tiny fp32 Llama config over `data_prefix`; `extra` is appended YAML (top-level keys).
inline std::string tiny_config_yaml(const std::string& data_prefix, int64_t steps, int64_t local_batch,
                                    int64_t global_batch, const std::string& extra = "") {
  return "training:\n  steps: " + std::to_string(steps) + "\n  local_batch_size: " + std::to_string(local_batch) +
         "\n  global_batch_size: " + std::to_string(global_batch) +
         "\n  max_norm: 1.0\n  seed: 7\n  deterministic: True\n"
         "optimizer:\n  type: AdamW\n  weight_decay: 0.01\n"
         "lr_scheduler:\n  type: ConstantWarmUpLR\n  learning_rate: 3.e-3\n  warmup_steps: 0\n"
         "train_dataset:\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n    sizes: [400, 0, 0]\n"
         "    config:\n      seq_length: 32\n      split: '1,0,0'\n      data_path: ['" + data_prefix + "']\n"
         "      create_attention_mask: False\n  num_parallel_workers: 1\n"
         "model:\n  model_type: llama\n  vocab_size: 64\n  hidden_size: 32\n  intermediate_size: 64\n"
         "  num_hidden_layers: 2\n  num_attention_heads: 4\n  num_key_value_heads: 2\n"
         "  max_position_embeddings: 64\n  params_dtype: float32\n  compute_dtype: float32\n" + extra;
}

// Loaded and resolved for one process, as the trainer takes it.
inline config::LoadedConfig tiny_config(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  config::LoadOptions o;
  o.overrides = overrides;
  o.world_size = 1;
  return config::load_config_text(yaml, "<test config>", o);
}

inline train::TrainerOptions quiet_options(const std::string& run_dir) {
  train::TrainerOptions o;
  o.run_dir = run_dir;
  o.quiet = true;
  o.install_signal_handlers = false;
  return o;
}

}  // namespace loom::testing
