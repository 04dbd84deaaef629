// AdamW (semantics §2.1, spec training_hyperparameters.md §1.1) with decoupled weight decay,
// bias corrections and fp32 master weights. One fused pass per parameter.
#pragma once

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/optim/optimizer.h"
#include "loom/optim/param_groups.h"

namespace loom::optim {

class OptionReader;

struct AdamWOptions {
  // Used only when no LR scheduler is attached (the trainer always attaches one).
  double learning_rate = 1e-3;
  std::array<double, 2> betas{0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.01;
  std::vector<std::string> weight_decay_include;
  std::vector<std::string> weight_decay_exclude;

  // Parses the `optimizer:` section (type AdamW). Validation errors are ConfigErrors naming
  // optimizer.<key>; unknown keys are warned about and ignored. `weight_decay: 0` (a YAML int)
  // is accepted (the reference raises TypeError: a QUIRK not reproduced).
  static AdamWOptions from_json(const nlohmann::ordered_json& section);
  // Range checks of the spec (betas in [0,1), eps > 0, weight_decay >= 0).
  void validate() const;
};

class AdamW : public Optimizer {
 public:
  // `params`: the model's named parameters; frozen ones (requires_grad false) are skipped.
  // `model_rules` carries the model's own no-decay names/keywords (may be empty).
  AdamW(const NamedParams& params, const AdamWOptions& options,
        const WeightDecayRules& model_rules = {});
  std::string type() const override { return "AdamW"; }
  const AdamWOptions& options() const { return options_; }

 protected:
  std::string prepare_update(double lr, int64_t t) override;
  void apply_update(double lr, int64_t t) override;

 private:
  AdamWOptions options_;
};

// Shared by AdamW and Muon: "optimizer.<key> must be a list of 2 numbers in [0, 1)".
std::array<double, 2> parse_betas(OptionReader& reader, const std::string& key,
                                  std::array<double, 2> fallback);
void check_betas(const std::array<double, 2>& betas, const std::string& path);

}  // namespace loom::optim
