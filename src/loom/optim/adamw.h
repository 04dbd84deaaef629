// AdamW (Loshchilov & Hutter, as MindFormers' pynative/optimizer/adamw.py computes it; spec
// training_hyperparameters.md §1.1) with decoupled weight decay, bias corrections and fp32 master
// weights. One fused pass per parameter.
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loom/optim/optimizer.h"
#include "loom/optim/param_groups.h"

namespace loom::optim {

class OptionProblems;
class OptionReader;

struct AdamWOptions {
  // Used only when no LR scheduler is attached (the trainer always attaches one).
  double learning_rate = 1e-3;
  std::array<double, 2> betas{0.9, 0.95};
  double eps = 1e-8;
  double weight_decay = 0.01;
  std::vector<std::string> weight_decay_include;
  std::vector<std::string> weight_decay_exclude;

  // Reads the `optimizer:` section of type AdamW (spec training_hyperparameters.md §1.1): every
  // key and every rule, each problem to the reader at optimizer.<key>. Keys AdamW does not take
  // are warned about and ignored. `weight_decay: 0` (a YAML int) is accepted (the reference
  // raises TypeError: a QUIRK not reproduced).
  static AdamWOptions read(OptionReader& reader);
  // read() of `section`; ConfigError listing every error.
  static AdamWOptions from_json(const nlohmann::ordered_json& section);
  // The value rules (betas in [0, 1), eps > 0, weight_decay >= 0, learning_rate >= 0).
  void check(OptionProblems& problems) const;
  // check(); ConfigError listing every error (the constructor runs it).
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

// Shared by AdamW and Muon (whose fallback for embeddings, the output layer and 1-D parameters is
// AdamW):
// `key` as [beta1, beta2] (two numbers; nullopt and an error otherwise).
std::optional<std::array<double, 2>> read_betas(OptionReader& reader, const std::string& key);
// Each beta in [0, 1), at "<path>[i]".
void check_betas(const std::array<double, 2>& betas, const std::string& path, OptionProblems& problems);
// weight_decay_include / weight_decay_exclude: lists of parameter-name rules.
void read_weight_decay_rules(OptionReader& reader, std::vector<std::string>& include,
                             std::vector<std::string>& exclude);
// optimizer.learning_rate, which only an optimizer without a scheduler uses: the trainer always
// attaches one, so a written value is read and said to be ignored.
std::optional<double> read_unused_learning_rate(OptionReader& reader);

}  // namespace loom::optim
