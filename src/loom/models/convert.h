// `loom convert`: HF folders ↔ Loom model checkpoints (MindFormers' checkpoint file naming).
//
//   from HF: <out>/checkpoint-model-0000000-0000001.safetensors (Loom names, the folder is a valid
//            checkpoint.load_path) + <out>/model_config.json (the model section, HF names); the
//            safetensors metadata also carries the model section under "model_config".
//   to HF:   a Loom iteration folder, a save folder (resolved through
//            latest_checkpointed_iteration.txt) or one model .safetensors file → an HF folder.
//            The model section comes from `model_section` when given, else the file's
//            "model_config" metadata, else a model_config.json next to it or one level up.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/models/hf_checkpoint.h"

namespace loom::models {

// Returns the written model file.
std::string convert_from_hf(const std::string& hf_dir, const std::string& out_dir,
                            const nlohmann::ordered_json& overrides = nlohmann::ordered_json::object());

struct LoomCheckpoint {
  std::map<std::string, Tensor> state;  // Loom names
  std::optional<nlohmann::ordered_json> model_section;  // when the checkpoint records one
  std::string source;                   // the file(s) read, for messages
};
// Reads the model weights of a Loom checkpoint (optimizer files are ignored). A multi-process
// checkpoint is merged when every tensor is whole in the files (replicated); sharded tensors are a
// CheckpointError asking to consolidate first.
LoomCheckpoint read_loom_checkpoint(const std::string& path);

void convert_to_hf(const std::string& checkpoint, const std::string& out_dir,
                   const std::optional<nlohmann::ordered_json>& model_section = std::nullopt,
                   const HfSaveOptions& options = {});

}  // namespace loom::models
