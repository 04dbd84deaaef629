#include "loom/optim/optimizer_factory.h"

#include "loom/core/error.h"
#include "loom/optim/adamw.h"

namespace loom::optim {

std::unique_ptr<Optimizer> build_optimizer(const nlohmann::ordered_json& section,
                                           const NamedParams& params,
                                           const OptimizerContext& context) {
  std::string type = "AdamW";
  if (section.is_object() && section.contains("type") && !section["type"].is_null()) {
    LOOM_CHECK(section["type"].is_string(), ConfigError, "optimizer.type must be a string, got ",
               section["type"].dump());
    type = section["type"].get<std::string>();
  }
  if (type == "AdamW" || type == "adamw")
    return std::make_unique<AdamW>(params, AdamWOptions::from_json(section), context.model_no_decay);
  if (type == "Muon" || type == "muon")
    return std::make_unique<Muon>(params, MuonOptions::from_json(section), context.model,
                                  context.swap, context.model_no_decay, context.muon_sharding);
  LOOM_THROW(ConfigError, "optimizer.type '", type,
             "' is not a supported optimizer; use AdamW or Muon");
}

}  // namespace loom::optim
