// ModelArgs → HF config.json of the model's architecture (the inverse direction is
// ModelArgs::from_json, which reads HF names). Only what HF transformers can represent is written;
// a Loom-only setting (LayerNorm in a Llama, Qwen3 without qk-norm, ...) is a ConfigError naming
// the field, so a converted model never loads in HF with silently different math.
#pragma once

#include <nlohmann/json.hpp>

#include "loom/models/model_args.h"

namespace loom::models {

nlohmann::ordered_json to_hf_config(const ModelArgs& args);

}  // namespace loom::models
