#include "loom/optim/adamw.h"

#include "loom/core/text.h"
#include "loom/optim/option_reader.h"

namespace loom::optim {

std::optional<std::array<double, 2>> read_betas(OptionReader& reader, const std::string& key) {
  const std::optional<std::vector<double>> list = reader.number_list(key);
  if (!list) return std::nullopt;
  if (list->size() != 2) {
    reader.error(key, "must hold exactly 2 values [beta1, beta2], got " + std::to_string(list->size()));
    return std::nullopt;
  }
  return std::array<double, 2>{(*list)[0], (*list)[1]};
}

void check_betas(const std::array<double, 2>& betas, const std::string& path, OptionProblems& problems) {
  for (size_t i = 0; i < 2; ++i)
    if (!(betas[i] >= 0.0 && betas[i] < 1.0))
      problems.error(path + "[" + std::to_string(i) + "]",
                     "must be in [0, 1), got " + format_float(betas[i]) + "; use values like [0.9, 0.95]");
}

void read_weight_decay_rules(OptionReader& reader, std::vector<std::string>& include,
                             std::vector<std::string>& exclude) {
  if (auto rules = reader.string_list("weight_decay_include")) {
    include = *rules;
    // An empty rule matches every name (as a substring): decay would apply to everything.
    for (size_t i = 0; i < include.size(); ++i)
      if (include[i].empty())
        reader.problems().error(reader.path("weight_decay_include") + "[" + std::to_string(i) + "]",
                                "empty name pattern: it would match every parameter; remove it");
  }
  if (auto rules = reader.string_list("weight_decay_exclude")) exclude = *rules;
}

std::optional<double> read_unused_learning_rate(OptionReader& reader) {
  const std::optional<double> lr = reader.number("learning_rate");
  if (lr) reader.warn("learning_rate", "is ignored: the learning rate comes from lr_scheduler.learning_rate");
  return lr;
}

AdamWOptions AdamWOptions::read(OptionReader& r) {
  AdamWOptions o;
  r.mark_read("type");  // the factory's
  r.reject_null("betas", "List[float]", "[0.9, 0.95]");
  r.reject_null("eps", "float", format_float(o.eps));
  r.reject_null("weight_decay", "float", format_float(o.weight_decay));
  o.learning_rate = read_unused_learning_rate(r).value_or(o.learning_rate);
  o.betas = read_betas(r, "betas").value_or(o.betas);
  o.eps = r.number("eps").value_or(o.eps);
  o.weight_decay = r.number("weight_decay").value_or(o.weight_decay);
  read_weight_decay_rules(r, o.weight_decay_include, o.weight_decay_exclude);
  // The update is always the fused single-pass kernel: these switches change nothing.
  r.boolean("use_fused");
  r.boolean("enable_fused_opt");
  if (r.boolean("enable_cpu_offload").value_or(false))
    r.error("enable_cpu_offload", "AdamW does not support enable_cpu_offload: true; use parallelism.cpu_offload to "
                                  "offload sharded state instead");
  for (const char* flag : {"amsgrad", "maximize"})
    if (r.boolean(flag).value_or(false))
      r.error(flag, std::string("AdamW does not support ") + flag + ": true; remove it or set it to false");
  o.check(r.problems());
  r.warn_unread("AdamW");
  return o;
}

AdamWOptions AdamWOptions::from_json(const nlohmann::ordered_json& section) {
  OptionProblems problems;
  OptionReader reader(section, "optimizer", problems);
  AdamWOptions o = read(reader);
  problems.throw_if_errors();
  return o;
}

void AdamWOptions::check(OptionProblems& problems) const {
  check_betas(betas, "optimizer.betas", problems);
  if (!(eps > 0.0))
    problems.error("optimizer.eps", "must be > 0, got " + format_float(eps) + "; the default is " +
                                        format_float(AdamWOptions{}.eps));
  if (!(weight_decay >= 0.0))
    problems.error("optimizer.weight_decay",
                   "must be >= 0, got " + format_float(weight_decay) + "; use 0 to disable weight decay");
  if (!(learning_rate >= 0.0))
    problems.error("optimizer.learning_rate", "must be >= 0, got " + format_float(learning_rate));
}

void AdamWOptions::validate() const {
  OptionProblems problems;
  check(problems);
  problems.throw_if_errors();
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
