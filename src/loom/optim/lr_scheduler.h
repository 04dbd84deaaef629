// Learning-rate schedules (MindFormers' core/lr/lr_schedule.py, spec training_hyperparameters.md
// §2). A schedule is a pure function of the optimizer step: lr_at(t) with t = the optimizer's
// global_step BEFORE the increment (0 for the first update). The math is float32 in the reference's
// operation order so the values match MindFormers' to the last bit; lr_at returns that float
// widened to double.
//
// Types (and lower-case aliases): ConstantWarmUpLR (constant_with_warmup), LinearWithWarmUpLR
// (linear), CosineWithWarmUpLR (cosine), CosineWithRestartsAndWarmUpLR (cosine_with_restarts),
// PolynomialWithWarmUpLR (polynomial), WarmUpStableDecayLR, CosineAnnealingLR (cosine_annealing),
// CosineAnnealingWarmRestarts (cosine_annealing_warm_restarts), ConstantWithCoolDownLR,
// LearningRateWiseLayer (lr_scale times the schedule its base_lr map describes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::optim {

class OptionProblems;

class LrScheduler {
 public:
  virtual ~LrScheduler() = default;
  virtual double lr_at(int64_t step) const = 0;
  // Canonical type name ("CosineWithWarmUpLR" even when built from "cosine").
  virtual std::string type() const = 0;
  // The resolved parameters ({"type", "learning_rate", "warmup_steps", ...}): what a checkpoint
  // records next to global_step (the schedule itself holds no mutable state).
  virtual nlohmann::ordered_json state() const = 0;
  // Compares a checkpoint's state() with this schedule and warns about every field that changed
  // (resuming with a new schedule is allowed; silently doing so is not).
  std::vector<std::string> load_state(const nlohmann::ordered_json& saved) const;
};

// Reads and checks the `lr_scheduler:` section as the configuration file wrote it (type or alias,
// learning_rate and the type's own keys): every problem goes to `problems` at lr_scheduler.<key>.
// `total_steps` is training.steps; a user value for lr_scheduler.total_steps is an error (the
// spec says never set it by hand); keys the type does not take are warned about and ignored (the
// reference ignores them silently). Returns the schedule a build would make (from the defaults
// where a value is wrong), or null when the type is missing or unknown.
std::unique_ptr<LrScheduler> read_lr_scheduler(const nlohmann::ordered_json& section, int64_t total_steps,
                                               OptionProblems& problems);
// read_lr_scheduler; ConfigError listing every error (the warnings are the configuration
// loader's to print).
std::unique_ptr<LrScheduler> build_lr_scheduler(const nlohmann::ordered_json& section,
                                                int64_t total_steps);

// Canonical names, in the order above.
std::vector<std::string> lr_scheduler_types();

}  // namespace loom::optim
