#include "loom/models/registry.h"

#include <map>

#include "loom/core/error.h"

namespace loom::models {

namespace {

std::shared_ptr<nn::CausalLM> build_causal_lm(const ModelArgs& args) {
  return std::make_shared<nn::CausalLM>(static_cast<const nn::TransformerConfig&>(args));
}

std::map<std::string, ModelBuilder>& builders() {
  static std::map<std::string, ModelBuilder> b = [] {
    std::map<std::string, ModelBuilder> m;
    for (const auto& info : supported_architectures()) m[info.model_type] = build_causal_lm;
    return m;
  }();
  return b;
}

}  // namespace

void register_model(const std::string& model_type, ModelBuilder builder) {
  builders()[model_type] = std::move(builder);
}

bool is_registered(const std::string& model_type) { return builders().count(model_type) > 0; }

std::shared_ptr<nn::CausalLM> build_model(const ModelArgs& args) {
  auto it = builders().find(args.model_type);
  LOOM_CHECK(it != builders().end(), ConfigError, "model.model_type = \"", args.model_type,
             "\" has no registered builder");
  args.validate();
  return it->second(args);
}

BuiltModel build_model(const nlohmann::ordered_json& model_section) {
  BuiltModel b;
  b.args = ModelArgs::from_json(model_section);
  b.model = build_model(b.args);
  return b;
}

}  // namespace loom::models
