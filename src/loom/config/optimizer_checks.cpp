// The optimizer and lr_scheduler sections, checked through optim: it knows the optimizers and
// schedulers (names, aliases, keys, defaults, rules: training_hyperparameters.md §1-§2,
// MindFormers' optimizers and lr_schedule.py) and reads a section the same way for check-config and
// for the trainer's build. Config gives each problem its position and keeps the typed fields in
// step with what optim read. What Muon needs of the model and of the memory sections, which optim
// does not see, is checked here.
#include "loom/config/checks.h"
#include "loom/optim/lr_scheduler.h"
#include "loom/optim/optimizer_factory.h"

namespace loom::config::detail {

namespace {

void report(const optim::OptionProblems& problems, Diagnostics& diag) {
  using Severity = optim::OptionProblem::Severity;
  for (const optim::OptionProblem& p : problems.all()) {
    if (p.severity == Severity::error) diag.error(p.path, p.message);
    else if (p.about_key) diag.key_warn(p.path, p.message);
    else diag.warn(p.path, p.message);
  }
}

bool has_value(const Json& section, const char* key) {
  return section.is_object() && section.contains(key) && !section[key].is_null();
}

void read_optimizer(TrainConfig& c, Diagnostics& diag) {
  optim::OptionProblems problems;
  const optim::OptimizerSection read = optim::read_optimizer_section(c.optimizer.section, problems);
  report(problems, diag);
  OptimizerConfig& o = c.optimizer;
  o.type = read.type;
  std::vector<std::string> include, exclude;
  if (const auto* adamw = std::get_if<optim::AdamWOptions>(&read.options)) {
    o.betas = {adamw->betas[0], adamw->betas[1]};
    o.eps = adamw->eps;
    o.weight_decay = adamw->weight_decay;
    include = adamw->weight_decay_include;
    exclude = adamw->weight_decay_exclude;
  } else if (const auto* muon = std::get_if<optim::MuonOptions>(&read.options)) {
    o.eps = muon->eps;  // Muon's own defaults, not AdamW's, when the file leaves them out
    o.weight_decay = muon->weight_decay;
    include = muon->weight_decay_include;
    exclude = muon->weight_decay_exclude;
  }
  if (has_value(o.section, "weight_decay_include")) o.weight_decay_include = include;
  if (has_value(o.section, "weight_decay_exclude")) o.weight_decay_exclude = exclude;
}

void read_lr_scheduler(TrainConfig& c, Diagnostics& diag) {
  LrSchedulerConfig& s = c.lr_scheduler;
  optim::OptionProblems problems;
  const std::unique_ptr<optim::LrScheduler> schedule =
      optim::read_lr_scheduler(s.section, c.training.steps, problems);
  report(problems, diag);
  if (schedule) s.type = schedule->type();  // aliases become class names
  else if (has_value(s.section, "type") && s.section["type"].is_string()) s.type = s.section["type"].get<std::string>();
  if (has_value(s.section, "learning_rate") && s.section["learning_rate"].is_number())
    s.learning_rate = s.section["learning_rate"].get<double>();
}

}  // namespace

void read_option_sections(TrainConfig& c, Diagnostics& diag) {
  read_optimizer(c, diag);
  read_lr_scheduler(c, diag);
}

void check_optimizer(const TrainConfig& c, const models::ModelArgs& model, Diagnostics& diag) {
  if (c.optimizer.type != "Muon") return;
  // training_hyperparameters.md §1.2: Muon's construction-time prerequisites.
  if (!model.multi_latent_attention)
    diag.error("optimizer.type", "Muon optimizer only supports models with Multi-Latent Attention enabled. Set "
                                 "model.multi_latent_attention: True (an MLA model such as DeepSeek-V3) or use AdamW");
  const Json& swap = c.optimizer.extras.contains("swap") ? c.optimizer.extras["swap"] : Json();
  const bool optimizer_swap = swap.is_boolean() && swap.get<bool>();  // optim has typed it
  if (c.swap.enable || optimizer_swap)
    diag.error(c.swap.enable ? "swap.enable" : "optimizer.swap",
               "Muon does not support swap. Disable swap (swap.enable: False) or use AdamW");
}

}  // namespace loom::config::detail
