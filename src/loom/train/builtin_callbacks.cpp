#include "loom/train/builtin_callbacks.h"

#include <cmath>

#include "loom/core/log.h"
#include "loom/optim/grad_norm.h"
#include "loom/optim/param_groups.h"
#include "loom/train/rank_report.h"
#include "loom/train/trainer.h"

namespace loom::train {

namespace {

class LossCallback : public Callback {
 public:
  explicit LossCallback(int64_t log_interval) : log_interval_(log_interval) {}
  std::string name() const override { return "LossCallback"; }
  void on_step_end(CallbackContext& ctx) override {
    if (ctx.trainer->options().quiet || !ctx.metrics) return;
    if (ctx.metrics->step % log_interval_ != 0 && ctx.metrics->step != ctx.metrics->max_steps) return;
    log::info(format_log_line(*ctx.metrics));
  }

 private:
  int64_t log_interval_;
};

class MonitorCallback : public Callback {
 public:
  std::string name() const override { return "MonitorCallback"; }
  void on_step_end(CallbackContext& ctx) override {
    Trainer& t = *ctx.trainer;
    const auto& moe = t.config().monitor.moe_monitor;
    if (moe.save_tokens_per_expert_interval && ctx.metrics->step % *moe.save_tokens_per_expert_interval == 0) {
      std::set<int64_t> targets;
      if (moe.target_layers) {
        if (auto* n = std::get_if<int64_t>(&*moe.target_layers))
          for (int64_t i = 0; i < *n; ++i) targets.insert(i);
        else
          for (int64_t i : std::get<std::vector<int64_t>>(*moe.target_layers)) targets.insert(i);
      }
      for (const auto& [layer, counts] : t.model_hooks().tokens_per_expert()) {
        if (!targets.empty() && !targets.count(layer)) continue;
        for (size_t e = 0; e < counts.size(); ++e)
          t.metrics_writer().add_scalar("tokens_per_expert/layer_" + std::to_string(layer) + "/expert_" + std::to_string(e),
                                        static_cast<double>(counts[e]), ctx.metrics->step);
      }
    }
    const auto& ts = t.config().monitor.train_state;
    if (ts.local_loss) t.metrics_writer().add_scalar("local_loss", ctx.metrics->loss, ctx.metrics->step);
    // local_norm: the grad norm of each selected parameter (true = every one; a name, substring
    // or glob, or a list of them), after clipping, as this process holds it.
    std::vector<std::string> rules;
    bool all = false;
    if (auto* b = std::get_if<bool>(&ts.local_norm)) all = *b;
    else if (auto* one = std::get_if<std::string>(&ts.local_norm)) { if (!one->empty()) rules.push_back(*one); }
    else rules = std::get<std::vector<std::string>>(ts.local_norm);
    if (all || !rules.empty())
      for (auto& [name, p] : t.model().module().named_parameters()) {
        const Tensor& g = p->tensor.grad();
        if (!g.defined() || !(all || optim::matches_any(rules, name))) continue;
        t.metrics_writer().add_scalar("local_norm/" + name, std::sqrt(optim::grad_sum_of_squares(g)), ctx.metrics->step);
      }
    t.metrics_writer().write(*ctx.metrics);
  }
};

class CheckpointCallback : public Callback {
 public:
  std::string name() const override { return "CheckpointCallback"; }
  void on_step_end(CallbackContext& ctx) override {
    Trainer& t = *ctx.trainer;
    if (t.checkpoints().should_save(t.state().global_step)) t.save_checkpoint();
  }
  void on_train_end(CallbackContext& ctx) override {
    Trainer& t = *ctx.trainer;
    // Always a save at the end (and on Ctrl-C), unless this very step was just saved.
    if (t.config().checkpoint.enable_save && t.checkpoints().last_saved_iteration() != t.state().global_step &&
        t.state().global_step > 0)
      t.save_checkpoint();
  }
};

class TokensPerExpertLogger : public Callback {
 public:
  explicit TokensPerExpertLogger(int64_t interval) : interval_(interval) {}
  std::string name() const override { return "TokensPerExpertLogger"; }
  void on_step_end(CallbackContext& ctx) override {
    if (ctx.metrics->step % interval_ != 0) return;
    for (const auto& [layer, counts] : ctx.trainer->model_hooks().tokens_per_expert()) {
      std::string line = "tokens per expert, layer " + std::to_string(layer) + ":";
      for (int64_t c : counts) line += " " + std::to_string(c);
      log::info(line);
    }
  }

 private:
  int64_t interval_;
};

}  // namespace

std::vector<std::unique_ptr<Callback>> make_builtin_callbacks(Trainer& trainer) {
  std::vector<std::unique_ptr<Callback>> out;
  // First: its counters must see the step's traffic only, not a checkpoint's.
  if (trainer.options().rank_report_step >= 0) out.push_back(make_rank_report_callback(trainer.options().rank_report_step));
  out.push_back(std::make_unique<MonitorCallback>());
  out.push_back(std::make_unique<LossCallback>(1));
  if (trainer.config().checkpoint.enable_save) out.push_back(std::make_unique<CheckpointCallback>());
  return out;
}

void register_builtin_callbacks() {
  auto& r = CallbackRegistry::instance();
  if (r.contains("LossCallback")) return;
  r.add("LossCallback", [](const nlohmann::ordered_json& kw) -> std::unique_ptr<Callback> {
    check_kwargs(kw, {"log_interval"}, "LossCallback", "callbacks");
    return std::make_unique<LossCallback>(positive_int_kwarg(kw, "log_interval", 1, "callbacks"));
  });
  r.add("TokensPerExpertLogger", [](const nlohmann::ordered_json& kw) -> std::unique_ptr<Callback> {
    check_kwargs(kw, {"interval"}, "TokensPerExpertLogger", "callbacks");
    return std::make_unique<TokensPerExpertLogger>(positive_int_kwarg(kw, "interval", 1, "callbacks"));
  });
}

std::vector<std::unique_ptr<Callback>> make_configured_callbacks(const std::vector<config::CallbackConfig>& entries) {
  register_builtin_callbacks();
  std::vector<std::unique_ptr<Callback>> out;
  for (size_t i = 0; i < entries.size(); ++i)
    out.push_back(CallbackRegistry::instance().create(entries[i].type, entries[i].extras,
                                                      "callbacks[" + std::to_string(i) + "]"));
  return out;
}

}  // namespace loom::train
