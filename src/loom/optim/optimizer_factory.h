// Builds the optimizer named by `optimizer.type` (AdamW | Muon; lower-case accepted) from the
// `optimizer:` section and the model's named parameters.
#pragma once

#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "loom/optim/muon.h"
#include "loom/optim/optimizer.h"

namespace loom::optim {

// What the trainer knows beyond the optimizer section.
struct OptimizerContext {
  std::optional<MuonModelInfo> model;  // required by Muon
  bool swap = false;                   // memory swap enabled (Muon rejects it)
  WeightDecayRules model_no_decay;     // model.no_weight_decay() names / keywords
  // Where each parameter's local tensor sits in the global one (Muon; null: all whole).
  std::shared_ptr<MuonSharding> muon_sharding;
};

std::unique_ptr<Optimizer> build_optimizer(const nlohmann::ordered_json& section,
                                           const NamedParams& params,
                                           const OptimizerContext& context = {});

}  // namespace loom::optim
