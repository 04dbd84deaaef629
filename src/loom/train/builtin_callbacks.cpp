#include "loom/train/builtin_callbacks.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/core/log.h"
#include "loom/optim/grad_norm.h"
#include "loom/optim/param_groups.h"
#include "loom/train/rank_report.h"
#include "loom/train/train_state_monitor.h"
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
    const TrainStateReport report = train_state_report(t, *ctx.metrics);
    for (const auto& [tag, value] : report.scalars) t.metrics_writer().add_scalar(tag, value, ctx.metrics->step);
    if (report.embedding_norm) check_embedding_health(t, *report.embedding_norm, ctx.metrics->step);
  }

 private:
  // The reference's checkpoint health monitor: a step whose embedding grad norm exceeds
  // embedding_local_norm_threshold leaves unhealthy weights; a checkpoint saved at it says so, and
  // a resume from its save directory passes it by (runtime/checkpoint_reader.h).
  static void check_embedding_health(Trainer& t, double norm, int64_t step) {
    const double threshold = t.config().monitor.health_checkpoint.embedding_local_norm_threshold;
    t.state().healthy = !(norm > threshold);
    if (!t.state().healthy && t.rank() == 0)
      log::warn("step ", step, ": the embedding grad norm ", norm, " is above monitor.health_checkpoint."
                "embedding_local_norm_threshold ", threshold, ": a checkpoint of this step is marked unhealthy and a "
                "resume from its save directory takes the latest healthy one");
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

// MindFormers' MaxLogitsMonitor(step_interval=1): the maximum attention logit of every layer
// (the QK-clip statistic, over all heads and every rank that saw other tokens) as
// max_attention_logit/layer_<i>, with their max and mean; the maxima restart every step. The
// trainer turns the tracking on when this callback is configured, and adds it (as the reference
// does) when Muon's QK-clip tracks them anyway.
class MaxLogitsMonitor : public Callback {
 public:
  explicit MaxLogitsMonitor(int64_t step_interval) : step_interval_(step_interval) {}
  std::string name() const override { return "MaxLogitsMonitor"; }
  void on_step_end(CallbackContext& ctx) override {
    Trainer& t = *ctx.trainer;
    const std::map<int64_t, float> maxima = t.model_hooks().max_attention_logits();  // every rank: collectives
    if (maxima.empty() || ctx.metrics->step % step_interval_ != 0) return;
    double max = -std::numeric_limits<double>::infinity(), sum = 0;
    for (const auto& [layer, value] : maxima) {
      t.metrics_writer().add_scalar("max_attention_logit/layer_" + std::to_string(layer), value, ctx.metrics->step);
      max = std::max(max, static_cast<double>(value));
      sum += value;
    }
    t.metrics_writer().add_scalar("max_attention_logit/max", max, ctx.metrics->step);
    t.metrics_writer().add_scalar("max_attention_logit/mean", sum / static_cast<double>(maxima.size()),
                                  ctx.metrics->step);
  }

 private:
  int64_t step_interval_;
};

}  // namespace

std::unique_ptr<Callback> make_max_logits_monitor(int64_t step_interval) {
  return std::make_unique<MaxLogitsMonitor>(step_interval);
}

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
  r.add("MaxLogitsMonitor", [](const nlohmann::ordered_json& kw) -> std::unique_ptr<Callback> {
    check_kwargs(kw, {"step_interval"}, "MaxLogitsMonitor", "callbacks");
    return std::make_unique<MaxLogitsMonitor>(positive_int_kwarg(kw, "step_interval", 1, "callbacks"));
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
