// Model registry: model_type / architectures → a builder of the module tree. Every supported
// architecture is a decoder-only nn::CausalLM; what differs is the configuration (attention kind,
// qk-norm, MoE routing, MTP), which ModelArgs carries.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/models/model_args.h"
#include "loom/nn/causal_lm.h"

namespace loom::models {

using ModelBuilder = std::function<std::shared_ptr<nn::CausalLM>(const ModelArgs&)>;

// Registers (or replaces) the builder of `model_type`.
void register_model(const std::string& model_type, ModelBuilder builder);
bool is_registered(const std::string& model_type);

// Builds the model on the meta device (shapes only; call materialize(seed) or load a state dict).
std::shared_ptr<nn::CausalLM> build_model(const ModelArgs& args);

struct BuiltModel {
  ModelArgs args;
  std::shared_ptr<nn::CausalLM> model;
};
// Parses the `model:` section and builds it.
BuiltModel build_model(const nlohmann::ordered_json& model_section);

}  // namespace loom::models
