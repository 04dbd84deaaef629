// optimizer and lr_scheduler rules: training_hyperparameters.md (AdamW ranges, Muon
// prerequisites, scheduler types and fields, total_steps, warmup) and reference §2-§3.
#include <cmath>

#include "loom/config/checks.h"
#include "loom/config/yaml_scalar.h"

namespace loom::config::detail {

namespace {

void check_betas(const std::vector<double>& betas, const std::string& path, Diagnostics& diag) {
  if (betas.size() != 2) {
    diag.error(path, "must hold exactly 2 values [beta1, beta2], got " + std::to_string(betas.size()));
    return;
  }
  for (std::size_t i = 0; i < 2; ++i)
    if (!(betas[i] >= 0.0 && betas[i] < 1.0))
      diag.error(index_path(path, i), "must be in [0, 1), got " + format_float(betas[i]));
}

void check_adamw(const TrainConfig& c, Diagnostics& diag) {
  const OptimizerConfig& o = c.optimizer;
  check_betas(o.betas, "optimizer.betas", diag);
  if (!(o.eps > 0)) diag.error("optimizer.eps", "must be > 0, got " + format_float(o.eps));
  // The reference rejects `weight_decay: 0` written as an int (QUIRK); float accepts int here.
  if (!(o.weight_decay >= 0)) diag.error("optimizer.weight_decay", "must be >= 0, got " + format_float(o.weight_decay));
  for (const char* flag : {"enable_fused_opt", "use_fused", "amsgrad", "maximize"})
    extra_bool(o.extras, flag, "optimizer", diag);
  if (extra_bool(o.extras, "enable_cpu_offload", "optimizer", diag).value_or(false))
    diag.error("optimizer.enable_cpu_offload", "AdamW does not support enable_cpu_offload: true; use "
                                               "parallelism.cpu_offload to offload sharded state instead");
  if (o.extras.contains("learning_rate"))
    diag.warn("optimizer.learning_rate", "is ignored: the learning rate comes from lr_scheduler.learning_rate");
  warn_unknown_extras(o.extras, {"enable_cpu_offload", "enable_fused_opt", "use_fused", "amsgrad", "maximize",
                                 "learning_rate"},
                      "optimizer", "AdamW", diag);
}

void check_ns_coefficients(const Json& v, Diagnostics& diag) {
  const std::string path = "optimizer.ns_coefficients";
  auto is_triplet = [](const Json& t) {
    if (!t.is_array() || t.size() != 3) return false;
    for (const auto& x : t)
      if (!x.is_number() || x.is_boolean()) return false;
    return true;
  };
  if (is_triplet(v)) return;
  bool segmented = v.is_array() && !v.empty();
  if (segmented)
    for (const auto& seg : v) {
      const bool ok = seg.is_array() && seg.size() == 2 && is_triplet(seg[0]) && seg[1].is_number_integer() &&
                      seg[1].get<std::int64_t>() >= 1;
      segmented &= ok;
    }
  if (!segmented)
    diag.error(path, "must be a flat triplet [a, b, c] or segments [[[a, b, c], count], ...] with count >= 1, got " +
                         describe_json(v));
}

void check_muon(const TrainConfig& c, const models::ModelArgs& model, Diagnostics& diag) {
  const OptimizerConfig& o = c.optimizer;
  const Json& x = o.extras;
  // training_hyperparameters.md §1.2: Muon's construction-time prerequisites.
  if (!model.multi_latent_attention)
    diag.error("optimizer.type", "Muon optimizer only supports models with Multi-Latent Attention enabled. Set "
                                 "model.multi_latent_attention: True (an MLA model such as DeepSeek-V3) or use AdamW");
  if (c.swap.enable || extra_bool(x, "swap", "optimizer", diag).value_or(false))
    diag.error(c.swap.enable ? "swap.enable" : "optimizer.swap",
               "Muon does not support swap. Disable swap (swap.enable: False) or use AdamW");
  if (!(o.eps > 0)) diag.error("optimizer.eps", "must be > 0, got " + format_float(o.eps));
  if (!(o.weight_decay >= 0)) diag.error("optimizer.weight_decay", "must be >= 0, got " + format_float(o.weight_decay));
  if (c.is_explicit("optimizer.betas") && o.betas != OptimizerConfig{}.betas)
    diag.warn("optimizer.betas", "is not used by Muon; its AdamW fallback (embeddings, output layer, 1-D "
                                 "parameters) takes optimizer.adamw_betas");
  if (auto m = extra_float(x, "momentum", "optimizer", diag); m && !(*m >= 0 && *m < 1))
    diag.error("optimizer.momentum", "must be in [0, 1), got " + format_float(*m));
  if (auto r = extra_float(x, "matched_adamw_rms", "optimizer", diag); r && !(*r > 0))
    diag.error("optimizer.matched_adamw_rms", "must be > 0, got " + format_float(*r));
  extra_bool(x, "nesterov", "optimizer", diag);
  extra_bool(x, "use_fused_adamw", "optimizer", diag);
  if (auto n = extra_int(x, "ns_steps", "optimizer", diag); n && *n < 1)
    diag.error("optimizer.ns_steps", "must be >= 1, got " + std::to_string(*n));
  if (auto it = x.find("ns_coefficients"); it != x.end()) check_ns_coefficients(*it, diag);
  if (auto it = x.find("adamw_betas"); it != x.end()) {
    std::vector<double> betas;
    bool numbers = it->is_array();
    if (numbers)
      for (const auto& b : *it) {
        numbers &= b.is_number() && !b.is_boolean();
        if (numbers) betas.push_back(b.get<double>());
      }
    if (!numbers) diag.error("optimizer.adamw_betas", "expected List[float], got " + describe_json(*it));
    else check_betas(betas, "optimizer.adamw_betas", diag);
  }
  if (auto e = extra_float(x, "adamw_eps", "optimizer", diag); e && !(*e > 0))
    diag.error("optimizer.adamw_eps", "must be > 0, got " + format_float(*e));
  const bool clip = extra_bool(x, "qk_clip_enabled", "optimizer", diag).value_or(true);
  if (auto t = extra_float(x, "qk_clip_threshold", "optimizer", diag); clip && t && !(*t > 0))
    diag.error("optimizer.qk_clip_threshold", "must be > 0 while qk_clip_enabled is true, got " + format_float(*t));
  if (auto s = extra_string(x, "comm_strategy", "optimizer", diag);
      s && *s != "allgather" && *s != "allgather_deredundency")
    diag.error("optimizer.comm_strategy", "must be 'allgather' or 'allgather_deredundency', got '" + *s + "'" +
                                              did_you_mean(*s, {"allgather", "allgather_deredundency"}));
  if (auto it = x.find("adamw_include"); it != x.end()) {
    bool strings = it->is_array();
    if (strings)
      for (const auto& s : *it) strings &= s.is_string();
    if (!strings) diag.error("optimizer.adamw_include", "expected List[str] of name patterns, got " + describe_json(*it));
  }
  if (x.contains("learning_rate"))
    diag.warn("optimizer.learning_rate", "is ignored: the learning rate comes from lr_scheduler.learning_rate");
  warn_unknown_extras(x, {"matched_adamw_rms", "momentum", "nesterov", "ns_steps", "ns_coefficients", "adamw_betas",
                          "adamw_eps", "qk_clip_enabled", "qk_clip_threshold", "comm_strategy", "use_fused_adamw",
                          "adamw_include", "swap", "learning_rate"},
                      "optimizer", "Muon", diag);
}

struct SchedulerSpec {
  const char* name;
  const char* alias;  // lower-case registry alias, "" if none
  bool uses_learning_rate;
  bool warmup_required;  // warmup_steps defaults to None: warmup_steps or warmup_ratio is needed
  std::vector<std::pair<const char*, char>> params;  // name, 'i' int | 'f' float (int accepted)
  std::vector<const char*> required;
};

const std::vector<SchedulerSpec>& schedulers() {
  using P = std::vector<std::pair<const char*, char>>;
  const P warmup = {{"warmup_steps", 'i'}, {"warmup_lr_init", 'f'}, {"warmup_ratio", 'f'}};
  auto with = [&](P extra) {
    P all = warmup;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  };
  static const std::vector<SchedulerSpec> table = {
      {"ConstantWarmUpLR", "constant_with_warmup", true, true, warmup, {}},
      {"LinearWithWarmUpLR", "linear", true, true, warmup, {}},
      {"CosineWithWarmUpLR", "cosine", true, false,
       with({{"num_cycles", 'f'}, {"lr_end", 'f'}, {"decay_steps", 'i'}, {"decay_ratio", 'f'}}), {}},
      {"CosineWithRestartsAndWarmUpLR", "cosine_with_restarts", true, true,
       with({{"num_cycles", 'f'}, {"lr_end", 'f'}, {"decay_steps", 'i'}}), {}},
      {"PolynomialWithWarmUpLR", "polynomial", true, true,
       with({{"lr_end", 'f'}, {"power", 'f'}, {"decay_steps", 'i'}}), {}},
      {"WarmUpStableDecayLR", "", true, true,
       with({{"lr_end", 'f'}, {"decay_start_steps", 'i'}, {"decay_start_ratio", 'f'}}), {}},
      {"CosineAnnealingLR", "cosine_annealing", false, false, {{"base_lr", 'f'}, {"t_max", 'i'}, {"eta_min", 'f'}},
       {"base_lr", "t_max"}},
      {"CosineAnnealingWarmRestarts", "cosine_annealing_warm_restarts", false, false,
       {{"base_lr", 'f'}, {"t_0", 'i'}, {"t_mult", 'i'}, {"eta_min", 'f'}}, {"base_lr", "t_0"}},
      {"ConstantWithCoolDownLR", "", true, true,
       with({{"keep_steps", 'i'}, {"decay_steps", 'i'}, {"decay_ratio", 'f'}, {"num_cycles", 'f'}, {"lr_end1", 'f'},
             {"final_steps", 'i'}, {"lr_end2", 'f'}}),
       {}},
  };
  return table;
}

void check_unit_interval(const Json& x, const char* key, Diagnostics& diag) {
  if (auto r = extra_float(x, key, "lr_scheduler", diag); r && !(*r >= 0 && *r <= 1))
    diag.error(std::string("lr_scheduler.") + key, "must be in [0, 1], got " + format_float(*r));
}

void check_non_negative(const Json& x, const char* key, Diagnostics& diag) {
  if (auto n = extra_int(x, key, "lr_scheduler", diag); n && *n < 0)
    diag.error(std::string("lr_scheduler.") + key, "must be >= 0, got " + std::to_string(*n));
}

}  // namespace

void check_optimizer(const TrainConfig& c, const models::ModelArgs& model, Diagnostics& diag) {
  const std::string& type = c.optimizer.type;
  if (type == "AdamW") check_adamw(c, diag);
  else if (type == "Muon") check_muon(c, model, diag);
  else
    diag.error("optimizer.type", "must be 'AdamW' or 'Muon', got '" + type + "'" + did_you_mean(type, {"AdamW", "Muon"}));
  if (c.optimizer.weight_decay_include)
    for (std::size_t i = 0; i < c.optimizer.weight_decay_include->size(); ++i)
      if ((*c.optimizer.weight_decay_include)[i].empty())
        diag.error(index_path("optimizer.weight_decay_include", i), "empty name pattern");
}

void check_lr_scheduler(TrainConfig& c, Diagnostics& diag) {
  LrSchedulerConfig& s = c.lr_scheduler;
  const Json& x = s.extras;
  std::vector<std::string> names;
  for (const auto& spec : schedulers()) {
    names.emplace_back(spec.name);
    if (*spec.alias) names.emplace_back(spec.alias);
  }
  if (s.type.empty()) {
    diag.error("lr_scheduler.type", "is required: one of ConstantWarmUpLR, LinearWithWarmUpLR, CosineWithWarmUpLR, "
                                    "CosineWithRestartsAndWarmUpLR, PolynomialWithWarmUpLR, WarmUpStableDecayLR, "
                                    "CosineAnnealingLR, CosineAnnealingWarmRestarts, ConstantWithCoolDownLR");
    return;
  }
  const SchedulerSpec* spec = nullptr;
  for (const auto& candidate : schedulers())
    if (s.type == candidate.name || (*candidate.alias && s.type == candidate.alias)) spec = &candidate;
  if (!spec) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    diag.error("lr_scheduler.type", "unknown scheduler '" + s.type + "'" + did_you_mean(s.type, names) +
                                        " (supported: " + list + ")");
    return;
  }
  s.type = spec->name;  // aliases resolve to the class name

  // The framework injects total_steps = training.steps (training_hyperparameters.md §2).
  if (x.contains("total_steps"))
    diag.error("lr_scheduler.total_steps", "must not be set: Loom passes training.steps (" +
                                               std::to_string(c.training.steps) +
                                               ") as total_steps; delete it and set training.steps instead");
  if (!spec->uses_learning_rate && c.is_explicit("lr_scheduler.learning_rate") &&
      s.learning_rate != LrSchedulerConfig{}.learning_rate)
    diag.warn("lr_scheduler.learning_rate", std::string("is not used by ") + spec->name +
                                                "; its base learning rate is base_lr");
  if (spec->uses_learning_rate && !(s.learning_rate >= 0))
    diag.error("lr_scheduler.learning_rate", "must be >= 0, got " + format_float(s.learning_rate));

  std::vector<std::string> known;
  for (const auto& [name, kind] : spec->params) {
    known.emplace_back(name);
    if (kind == 'i') extra_int(x, name, "lr_scheduler", diag);
    else extra_float(x, name, "lr_scheduler", diag);
  }
  for (const char* req : spec->required)
    if (!x.contains(req) || x[req].is_null())
      diag.error(std::string("lr_scheduler.") + req, std::string("is required by ") + spec->name +
                                                         (std::string(req) == "base_lr"
                                                              ? " (it uses base_lr instead of learning_rate)"
                                                              : ""));
  const bool has_steps = x.contains("warmup_steps") && !x["warmup_steps"].is_null();
  const bool has_ratio = x.contains("warmup_ratio") && !x["warmup_ratio"].is_null();
  if (has_steps && has_ratio)
    diag.warn("lr_scheduler.warmup_steps", "is ignored because warmup_ratio is also set (warmup_ratio wins); "
                                           "set only one of them");
  if (spec->warmup_required && !has_steps && !has_ratio)
    diag.error("lr_scheduler", std::string(spec->name) + " needs warmup_steps or warmup_ratio (write warmup_steps: 0 "
                                                         "for no warmup)");
  check_unit_interval(x, "warmup_ratio", diag);
  check_unit_interval(x, "decay_ratio", diag);
  check_unit_interval(x, "decay_start_ratio", diag);
  for (const char* k : {"warmup_steps", "decay_steps", "decay_start_steps", "keep_steps", "final_steps"})
    if (x.contains(k)) check_non_negative(x, k, diag);
  if (auto w = extra_int(x, "warmup_steps", "lr_scheduler", diag); w && !has_ratio && *w > c.training.steps)
    diag.warn("lr_scheduler.warmup_steps", "(" + std::to_string(*w) + ") is longer than training.steps (" +
                                               std::to_string(c.training.steps) + "); the run never leaves warmup");
  for (const char* k : {"t_max", "t_0", "t_mult"})
    if (auto n = extra_int(x, k, "lr_scheduler", diag); n && *n < 1)
      diag.error(std::string("lr_scheduler.") + k, "must be >= 1, got " + std::to_string(*n));
  if (std::string(spec->name) == "PolynomialWithWarmUpLR" || std::string(spec->name) == "WarmUpStableDecayLR") {
    const double lr_end = extra_float(x, "lr_end", "lr_scheduler", diag).value_or(1e-7);
    if (!(s.learning_rate > lr_end))
      diag.error("lr_scheduler.learning_rate", "(" + format_float(s.learning_rate) + ") must be greater than lr_end (" +
                                                   format_float(lr_end) + ") for " + spec->name);
  }
  warn_unknown_extras(x, [&] {
    std::vector<std::string> all = known;
    all.emplace_back("total_steps");  // reported above
    return all;
  }(), "lr_scheduler", spec->name, diag);
}

}  // namespace loom::config::detail
