#include "loom/optim/adamw.h"

#include <sstream>

#include "loom/core/log.h"
#include "loom/optim/option_reader.h"

namespace loom::optim {

namespace {
const char* kAdamWKeys =
    "type, learning_rate, betas, eps, weight_decay, weight_decay_include, weight_decay_exclude, "
    "use_fused, enable_fused_opt, enable_cpu_offload, amsgrad, maximize";
}

void check_betas(const std::array<double, 2>& betas, const std::string& path) {
  for (int i = 0; i < 2; ++i)
    LOOM_CHECK(betas[i] >= 0.0 && betas[i] < 1.0, ConfigError, path, "[", i, "] = ", betas[i],
               " is outside [0, 1); use values like [0.9, 0.95]");
}

std::array<double, 2> parse_betas(OptionReader& reader, const std::string& key,
                                  std::array<double, 2> fallback) {
  auto list = reader.optional_number_list(key, 2);
  if (!list) return fallback;
  std::array<double, 2> betas{(*list)[0], (*list)[1]};
  check_betas(betas, reader.path(key));
  return betas;
}

void AdamWOptions::validate() const {
  check_betas(betas, "optimizer.betas");
  LOOM_CHECK(eps > 0.0, ConfigError, "optimizer.eps must be > 0, got ", eps,
             "; the default is 1.e-8");
  LOOM_CHECK(weight_decay >= 0.0, ConfigError, "optimizer.weight_decay must be >= 0, got ",
             weight_decay, "; use 0 to disable weight decay");
  LOOM_CHECK(learning_rate >= 0.0, ConfigError, "optimizer.learning_rate must be >= 0, got ",
             learning_rate);
}

AdamWOptions AdamWOptions::from_json(const nlohmann::ordered_json& section) {
  OptionReader r(section, "optimizer");
  AdamWOptions o;
  r.mark_read("type");
  o.learning_rate = r.number("learning_rate", o.learning_rate);
  o.betas = parse_betas(r, "betas", o.betas);
  o.eps = r.number("eps", o.eps);
  o.weight_decay = r.number("weight_decay", o.weight_decay);
  o.weight_decay_include = r.optional_string_list("weight_decay_include").value_or(std::vector<std::string>{});
  o.weight_decay_exclude = r.optional_string_list("weight_decay_exclude").value_or(std::vector<std::string>{});
  // Our update is always the fused single-pass kernel; the switches are accepted for
  // compatibility and change nothing.
  r.boolean("use_fused", false);
  r.boolean("enable_fused_opt", false);
  LOOM_CHECK(!r.boolean("enable_cpu_offload", false), ConfigError,
             "optimizer.enable_cpu_offload: true is not supported by the dynamic-graph AdamW; "
             "remove it (optimizer state already lives in host memory on CPU)");
  LOOM_CHECK(!r.boolean("amsgrad", false), ConfigError,
             "optimizer.amsgrad: true is not supported; remove it or set it to false");
  LOOM_CHECK(!r.boolean("maximize", false), ConfigError,
             "optimizer.maximize: true is not supported; remove it or set it to false");
  o.validate();
  r.warn_unread("AdamW", kAdamWKeys);
  return o;
}

AdamW::AdamW(const NamedParams& params, const AdamWOptions& options,
             const WeightDecayRules& model_rules)
    : Optimizer(options.learning_rate), options_(options) {
  options_.validate();
  WeightDecayRules rules = model_rules;
  rules.include = options_.weight_decay_include;
  rules.exclude = options_.weight_decay_exclude;
  for (const auto& p : trainable_params(params)) {
    const bool decay = applies_weight_decay(p.name, p.param.shape(), rules);
    add_param(p, decay ? options_.weight_decay : 0.0, UpdateRule::adamw);
  }
  allocate_state();
}

std::string AdamW::prepare_update(double lr, int64_t t) {
  for (const auto& s : params_) {
    Tensor grad = fp32_grad(s);
    if (grad.defined() && !adamw_step_is_finite(s, grad, lr, options_.betas[0], options_.betas[1], options_.eps, t))
      return s.name;
  }
  return "";
}

void AdamW::apply_update(double lr, int64_t t) {
  for (auto& s : params_) {
    Tensor grad = fp32_grad(s);
    if (!grad.defined()) continue;
    adamw_step(s, grad, lr, options_.betas[0], options_.betas[1], options_.eps, t);
  }
}

}  // namespace loom::optim
