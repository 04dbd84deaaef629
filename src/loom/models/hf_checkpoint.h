// HF model folders in and out: config.json plus model.safetensors, or shards named by
// model.safetensors.index.json ({"metadata": {"total_size"}, "weight_map": {name: file}}).
// load_hf_model reads a folder on its own (loom convert); a training run that starts from an HF
// folder converts its weights for the model it built (from_hf_weights).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/core/tensor.h"
#include "loom/models/model_args.h"

namespace loom::models {

// True when `dir` holds config.json and model.safetensors or model.safetensors.index.json.
bool is_hf_folder(const std::string& dir);
nlohmann::ordered_json read_hf_config(const std::string& dir);
// Every tensor of the folder under its HF name (views of the mapped files unless copy). Shard
// files are checked against the index: missing files, tensors the index names but the shard lacks,
// and names the index does not list are CheckpointErrors naming the file.
std::map<std::string, Tensor> read_hf_tensors(const std::string& dir, bool copy = false);

struct HfModel {
  ModelArgs args;                          // from config.json
  std::map<std::string, Tensor> state;     // Loom names and layouts
};
// config.json → ModelArgs (HF names), weights → Loom state dict. `overrides` (a model section,
// e.g. the YAML's) are applied on top of config.json before parsing: precision fields and the
// like; structural keys that disagree with the folder are errors from the conversion.
HfModel load_hf_model(const std::string& dir, const nlohmann::ordered_json& overrides = nlohmann::ordered_json::object());

struct HfSaveOptions {
  int64_t max_shard_bytes = 5'000'000'000;  // HF's default "5GB"
  std::optional<DType> dtype;               // cast floating weights (e.g. bfloat16); default: as stored
};
// Writes config.json and the weights under HF names into `dir` (created if needed): one
// model.safetensors, or model-0000i-of-0000n.safetensors shards plus the index when larger than
// max_shard_bytes. Every file is written atomically.
void save_hf_model(const std::string& dir, const ModelArgs& args, const std::map<std::string, Tensor>& loom_state,
                   const HfSaveOptions& options = {});

}  // namespace loom::models
