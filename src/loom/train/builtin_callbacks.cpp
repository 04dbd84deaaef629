#include "loom/train/builtin_callbacks.h"

#include "loom/core/log.h"
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
      for (const auto& [layer, counts] : t.model().tokens_per_expert()) {
        if (!targets.empty() && !targets.count(layer)) continue;
        for (size_t e = 0; e < counts.size(); ++e)
          t.metrics_writer().add_scalar("tokens_per_expert/layer_" + std::to_string(layer) + "/expert_" + std::to_string(e),
                                        static_cast<double>(counts[e]), ctx.metrics->step);
      }
    }
    if (t.config().monitor.train_state.local_loss)
      t.metrics_writer().add_scalar("local_loss", ctx.metrics->loss, ctx.metrics->step);
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
    for (const auto& [layer, counts] : ctx.trainer->model().tokens_per_expert()) {
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

}  // namespace loom::train
