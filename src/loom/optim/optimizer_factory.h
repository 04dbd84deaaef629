// The optimizers `optimizer.type` names (AdamW, Muon: spec training_hyperparameters.md §1), read
// from the `optimizer:` section as the configuration file wrote it. Checking a section
// (read_optimizer_section, what config and check-config run) and building from it
// (build_optimizer, what the trainer runs) read it through the same code: one set of names,
// defaults, rules and messages.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/optim/adamw.h"
#include "loom/optim/muon.h"
#include "loom/optim/optimizer.h"
#include "loom/optim/option_reader.h"

namespace loom::optim {

// "AdamW", "Muon": the values optimizer.type takes (exactly; it defaults to AdamW).
const std::vector<std::string>& optimizer_types();

// An `optimizer:` section read and checked: its type and the options a build would use (the
// defaults where a value is wrong). monostate when the type is not one Loom builds.
struct OptimizerSection {
  std::string type;
  std::variant<std::monostate, AdamWOptions, MuonOptions> options;
};
// Every problem of the section goes to `problems`, at optimizer.<key>.
OptimizerSection read_optimizer_section(const nlohmann::ordered_json& section, OptionProblems& problems);

// What the trainer knows beyond the optimizer section.
struct OptimizerContext {
  std::optional<MuonModelInfo> model;  // required by Muon
  bool swap = false;                   // memory swap enabled (Muon rejects it)
  WeightDecayRules model_no_decay;     // model.no_weight_decay() names / keywords
  // Where each parameter's local tensor sits in the global one (Muon; null: all whole).
  std::shared_ptr<MuonSharding> muon_sharding;
};

// The optimizer of `section` over the model's named parameters; ConfigError listing every error
// of the section (its warnings are the configuration loader's to print).
std::unique_ptr<Optimizer> build_optimizer(const nlohmann::ordered_json& section, const NamedParams& params,
                                           const OptimizerContext& context = {});

}  // namespace loom::optim
