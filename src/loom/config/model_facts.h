// The few model facts the configuration checks need, read from the pass-through `model` keys
// (HF or MindFormers names) without building the model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "loom/config/diagnostics.h"
#include "loom/config/sections.h"

namespace loom::config {

struct ModelFacts {
  std::optional<std::int64_t> num_layers;  // num_hidden_layers | num_layers
  std::string num_layers_key;              // which key gave it
  std::int64_t mtp_layers = 0;             // num_nextn_predict_layers | mtp_num_layers
  bool multi_latent_attention = false;     // explicit key, else implied by a DeepSeek-V3/MLA model
  std::optional<std::int64_t> num_attention_heads;
  std::optional<std::int64_t> num_experts;  // n_routed_experts | num_experts | num_moe_experts
  std::optional<std::int64_t> seq_length;   // model.seq_length, else dataloader.config.seq_length
  bool use_attn_mask_compression = false;

  // Layers that recompute/swap specs address: the decoder layers then the MTP layers.
  std::optional<std::int64_t> total_layers() const {
    if (!num_layers) return std::nullopt;
    return *num_layers + mtp_layers;
  }
};

// Reads the facts; a key of the wrong type (num_hidden_layers: "12") is reported to `diag`.
ModelFacts model_facts(const TrainConfig& config, Diagnostics& diag);

}  // namespace loom::config
