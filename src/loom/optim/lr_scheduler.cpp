#include "loom/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <optional>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/text.h"
#include "loom/optim/option_reader.h"

namespace loom::optim {

using json = nlohmann::ordered_json;

namespace {

constexpr double kPi = std::numbers::pi;
// LrSchedulerConfig.learning_rate's default in the reference.
constexpr double kDefaultLearningRate = 1e-5;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

// Every schedule is a float32 function of the step plus its resolved parameters.
class FunctionLrScheduler : public LrScheduler {
 public:
  FunctionLrScheduler(std::string type, json state, std::function<float(float)> fn)
      : type_(std::move(type)), state_(std::move(state)), fn_(std::move(fn)) {}
  double lr_at(int64_t step) const override { return fn_(static_cast<float>(step)); }
  std::string type() const override { return type_; }
  json state() const override { return state_; }

 private:
  std::string type_;
  json state_;
  std::function<float(float)> fn_;
};

float f32(double x) { return static_cast<float>(x); }

// The shared warmup line, in the reference's op order: L0 + (L - L0) * (t / W).
float warmup_lr(float t, float w, double lr, double lr_init) {
  const float percent = t / w;
  return f32(lr_init) + f32(lr - lr_init) * percent;
}

// An absolute step count (>= 0); nullopt when absent or wrong.
std::optional<int64_t> read_steps(OptionReader& r, const std::string& key) {
  const std::optional<int64_t> steps = r.integer(key);
  if (steps && *steps < 0) r.error(key, "must be >= 0, got " + std::to_string(*steps));
  return steps;
}

// A fraction of training.steps, in [0, 1].
std::optional<double> read_ratio(OptionReader& r, const std::string& key) {
  const std::optional<double> ratio = r.number(key);
  if (ratio && !(*ratio >= 0.0 && *ratio <= 1.0)) r.error(key, "must be in [0, 1], got " + format_float(*ratio));
  return ratio;
}

// An integer >= 1 that the scheduler cannot do without.
int64_t read_required_count(OptionReader& r, const std::string& type, const std::string& key) {
  const std::optional<int64_t> n = r.integer(key);
  if (n && *n < 1) r.error(key, "must be >= 1, got " + std::to_string(*n));
  if (!n && !r.has(key)) r.error(key, "is required by " + type + " (a positive integer)");
  return n && *n >= 1 ? *n : 1;
}

// The reference's `_get_lr_steps`: a ratio of total_steps wins over an absolute step count.
// Unlike the reference (TypeError on None), a missing required count says which keys to set.
int64_t lr_steps(OptionReader& r, const std::string& type, const std::string& steps_key,
                 const std::string& ratio_key, int64_t total, std::optional<int64_t> fallback,
                 const std::string& missing_hint) {
  const std::optional<double> ratio = read_ratio(r, ratio_key);
  const std::optional<int64_t> steps = read_steps(r, steps_key);
  if (ratio) {
    if (r.has(steps_key))
      r.warn(steps_key, "is ignored because " + ratio_key + " is also set (" + ratio_key +
                            " wins); set only one of them");
    return static_cast<int64_t>(static_cast<double>(total) * *ratio);
  }
  if (steps) return *steps;
  if (!fallback && !r.has(steps_key) && !r.has(ratio_key))
    r.problems().error(r.section_name(), type + " needs " + steps_key + " or " + ratio_key + " (" + missing_hint + ")");
  return fallback.value_or(0);
}

struct Common {
  double lr;        // learning_rate
  double lr_init;   // warmup_lr_init
  int64_t warmup;   // W
  int64_t total;    // T
};

Common read_common(OptionReader& r, const std::string& type, int64_t total,
                   std::optional<int64_t> warmup_default) {
  Common c;
  c.lr = r.number("learning_rate").value_or(kDefaultLearningRate);
  if (!(c.lr >= 0.0)) r.error("learning_rate", "must be >= 0, got " + format_float(c.lr));
  c.lr_init = r.number("warmup_lr_init").value_or(0.0);
  c.warmup = lr_steps(r, type, "warmup_steps", "warmup_ratio", total, warmup_default,
                      "write warmup_steps: 0 for no warmup");
  if (!r.has("warmup_ratio") && r.has("warmup_steps") && c.warmup > total)
    r.warn("warmup_steps", "(" + std::to_string(c.warmup) + ") is longer than training.steps (" +
                               std::to_string(total) + "); the run never leaves warmup");
  c.total = total;
  return c;
}

json common_state(const std::string& type, const Common& c) {
  return json{{"type", type}, {"learning_rate", c.lr}, {"warmup_lr_init", c.lr_init},
              {"warmup_steps", c.warmup}, {"total_steps", c.total}};
}

// Polynomial and WSD decay from learning_rate down to lr_end.
double read_lr_end_below(OptionReader& r, const std::string& type, double lr) {
  const double lr_end = r.number("lr_end").value_or(1e-7);
  if (!(lr > lr_end))
    r.error("learning_rate", "(" + format_float(lr) + ") must be greater than lr_end (" + format_float(lr_end) +
                                 ") for " + type);
  return lr_end;
}

using Builder = std::unique_ptr<LrScheduler> (*)(OptionReader&, const std::string&, int64_t);

std::unique_ptr<LrScheduler> make(const std::string& type, json state, std::function<float(float)> fn) {
  return std::make_unique<FunctionLrScheduler>(type, std::move(state), std::move(fn));
}

std::unique_ptr<LrScheduler> constant_warmup(OptionReader& r, const std::string& type, int64_t total) {
  const Common c = read_common(r, type, total, std::nullopt);
  const float w = f32(c.warmup);
  return make(type, common_state(type, c), [c, w](float t) {
    return w > t ? warmup_lr(t, w, c.lr, c.lr_init) : f32(c.lr);
  });
}

std::unique_ptr<LrScheduler> linear_warmup(OptionReader& r, const std::string& type, int64_t total) {
  const Common c = read_common(r, type, total, std::nullopt);
  const float w = f32(c.warmup), tt = f32(c.total);
  const float linear_steps = f32(std::max<int64_t>(1, c.total - c.warmup));
  return make(type, common_state(type, c), [=](float t) {
    if (w > t) return warmup_lr(t, w, c.lr, c.lr_init);
    return f32(c.lr) * std::max(0.f, (tt - t) / linear_steps);
  });
}

std::unique_ptr<LrScheduler> cosine_warmup(OptionReader& r, const std::string& type, int64_t total) {
  const Common c = read_common(r, type, total, 0);
  const double cycles = r.number("num_cycles").value_or(0.5);
  const double lr_end = r.number("lr_end").value_or(0.0);
  const std::optional<double> decay_ratio = read_ratio(r, "decay_ratio");
  const std::optional<int64_t> decay_steps = read_steps(r, "decay_steps");
  int64_t d;
  if (decay_ratio && *decay_ratio != 0.0) {  // the reference tests `if decay_ratio`
    d = static_cast<int64_t>(static_cast<double>(total) * *decay_ratio);
  } else {
    d = std::max<int64_t>(1, decay_steps ? *decay_steps : total);
  }
  json state = common_state(type, c);
  state["num_cycles"] = cycles;
  state["lr_end"] = lr_end;
  state["decay_steps"] = d;
  const float w = f32(c.warmup), decay = f32(d), e = f32(lr_end);
  const float cosine_steps = f32(std::max<int64_t>(1, c.total - c.warmup));
  const float angle = f32(kPi * cycles * 2.0);
  return make(type, std::move(state), [=](float t) {
    // The decay cut-off is checked first: from step D on the rate is lr_end.
    if (t >= decay) return e;
    if (w > t) return warmup_lr(t, w, c.lr, c.lr_init);
    const float progress = (t - w) / cosine_steps;
    const float percent = std::max(0.f, 0.5f * (1.f + std::cos(angle * progress)));
    return e + (f32(c.lr) - e) * percent;
  });
}

std::unique_ptr<LrScheduler> cosine_restarts(OptionReader& r, const std::string& type, int64_t total) {
  const Common c = read_common(r, type, total, std::nullopt);
  const double cycles = r.number("num_cycles").value_or(1.0);
  const double lr_end = r.number("lr_end").value_or(0.0);
  const std::optional<int64_t> decay_steps = read_steps(r, "decay_steps");
  const int64_t d = std::max<int64_t>(1, decay_steps && *decay_steps != 0 ? *decay_steps : total);
  json state = common_state(type, c);
  state["num_cycles"] = cycles;
  state["lr_end"] = lr_end;
  state["decay_steps"] = d;
  const float w = f32(c.warmup), decay = f32(d), e = f32(lr_end), nc = f32(cycles), pi = f32(kPi);
  const float cosine_steps = f32(std::max<int64_t>(1, c.total - c.warmup));
  return make(type, std::move(state), [=](float t) {
    if (t >= decay) return e;
    if (w > t) return warmup_lr(t, w, c.lr, c.lr_init);
    const float progress = (t - w) / cosine_steps;
    // QUIRK fixed: past the last cycle the reference returns 0, not lr_end.
    if (!(1.f > progress)) return e;
    const float percent = std::max(0.f, 0.5f * (1.f + std::cos(pi * std::fmod(nc * progress, 1.f))));
    return e + (f32(c.lr) - e) * percent;
  });
}

std::unique_ptr<LrScheduler> polynomial_warmup(OptionReader& r, const std::string& type, int64_t total) {
  const Common c = read_common(r, type, total, std::nullopt);
  const double lr_end = read_lr_end_below(r, type, c.lr);
  const double power = r.number("power").value_or(1.0);
  const std::optional<int64_t> decay_steps = read_steps(r, "decay_steps");
  const int64_t d = std::max<int64_t>(1, decay_steps && *decay_steps != 0 ? *decay_steps : total - c.warmup);
  json state = common_state(type, c);
  state["lr_end"] = lr_end;
  state["power"] = power;
  state["decay_steps"] = d;
  const float w = f32(c.warmup), tt = f32(c.total), decay = f32(d), e = f32(lr_end), pw = f32(power);
  return make(type, std::move(state), [=](float t) {
    if (w > t) return warmup_lr(t, w, c.lr, c.lr_init);
    if (t > tt) return e;
    // Clamped at 0 (deliberate): with decay_steps < T - W the reference goes below lr_end, to
    // negative rates, or NaN for a fractional power.
    const float remaining = std::max(0.f, 1.f - (t - w) / decay);
    return (f32(c.lr) - e) * std::pow(remaining, pw) + e;
  });
}

std::unique_ptr<LrScheduler> warmup_stable_decay(OptionReader& r, const std::string& type, int64_t total) {
  const Common c = read_common(r, type, total, std::nullopt);
  const double lr_end = read_lr_end_below(r, type, c.lr);
  const int64_t start = lr_steps(r, type, "decay_start_steps", "decay_start_ratio", total, std::nullopt,
                                 "the step the decay starts at, or its fraction of training.steps in [0, 1]");
  json state = common_state(type, c);
  state["lr_end"] = lr_end;
  state["decay_start_steps"] = start;
  const float w = f32(c.warmup), s = f32(start), tt = f32(c.total), e = f32(lr_end);
  const float decay_len = f32(std::max<int64_t>(1, c.total - start));  // guards S == T
  return make(type, std::move(state), [=](float t) {
    if (w > t) return warmup_lr(t, w, c.lr, c.lr_init);
    // QUIRK fixed: the reference's stable branch is L·t/t, NaN at t = 0 without warmup.
    if (t < s) return f32(c.lr);
    if (t >= tt) return e;  // deliberate: no extrapolation below lr_end past the last step
    return f32(c.lr) - f32(c.lr - lr_end) * ((t - s) / decay_len);
  });
}

// These schedulers name their rate base_lr; learning_rate does not apply to them.
double base_lr(OptionReader& r, const std::string& type) {
  // The effective configuration writes learning_rate's default back: only another value warns.
  if (auto lr = r.number("learning_rate"); lr && *lr != kDefaultLearningRate)
    r.warn("learning_rate", "is not used by " + type + "; its base learning rate is base_lr");
  const std::optional<double> base = r.number("base_lr");
  if (!base && !r.has("base_lr"))
    r.error("base_lr", "is required by " + type + " (it uses base_lr instead of learning_rate)");
  return base.value_or(0.0);
}

std::unique_ptr<LrScheduler> cosine_annealing(OptionReader& r, const std::string& type, int64_t) {
  const double base = base_lr(r, type);
  const int64_t t_max = read_required_count(r, type, "t_max");  // steps of half a cosine period
  const double eta_min = r.number("eta_min").value_or(0.0);
  json state{{"type", type}, {"base_lr", base}, {"t_max", t_max}, {"eta_min", eta_min}};
  const float tm = f32(t_max), pi = f32(kPi);
  return make(type, std::move(state), [=](float t) {
    const float percent = std::max(0.f, 0.5f * (1.f + std::cos(pi * t / tm)));
    return f32(eta_min) + f32(base - eta_min) * percent;
  });
}

std::unique_ptr<LrScheduler> cosine_annealing_restarts(OptionReader& r, const std::string& type, int64_t) {
  const double base = base_lr(r, type);
  const int64_t t0 = read_required_count(r, type, "t_0");
  const std::optional<int64_t> mult = r.integer("t_mult");
  if (mult && *mult < 1) r.error("t_mult", "must be >= 1, got " + std::to_string(*mult));
  const int64_t t_mult = mult && *mult >= 1 ? *mult : 1;
  const double eta_min = r.number("eta_min").value_or(0.0);
  json state{{"type", type}, {"base_lr", base}, {"t_0", t0}, {"t_mult", t_mult}, {"eta_min", eta_min}};
  const float t0f = f32(t0), m = f32(t_mult), pi = f32(kPi), log_m = f32(std::log(static_cast<double>(t_mult)));
  return make(type, std::move(state), [=](float t) {
    float t_cur, t_i = t0f;
    if (t < t0f) {
      t_cur = t;
    } else if (t_mult == 1) {
      t_cur = t - std::floor(t / t0f) * t0f;
    } else {
      const float index = std::floor(std::log(t / t0f * (m - 1.f) + 1.f) / log_m);
      const float q = std::pow(m, index);
      t_cur = t - t0f * (1.f - q) / (1.f - m);
      t_i = t0f * q;
    }
    const float percent = std::max(0.f, 0.5f * (1.f + std::cos(pi * t_cur / t_i)));
    return f32(eta_min) + f32(base - eta_min) * percent;
  });
}

std::unique_ptr<LrScheduler> constant_cooldown(OptionReader& r, const std::string& type, int64_t total) {
  const Common c = read_common(r, type, total, std::nullopt);
  const int64_t keep = read_steps(r, "keep_steps").value_or(0);
  const int64_t decay = lr_steps(r, type, "decay_steps", "decay_ratio", total, std::nullopt,
                                 "the cool-down length, or its fraction of training.steps in [0, 1]");
  const double cycles = r.number("num_cycles").value_or(0.5);
  const double end1 = r.number("lr_end1").value_or(0.0);
  const int64_t final_steps = read_steps(r, "final_steps").value_or(0);
  const double end2 = r.number("lr_end2").value_or(end1);
  json state = common_state(type, c);
  state["keep_steps"] = keep;
  state["decay_steps"] = decay;
  state["num_cycles"] = cycles;
  state["lr_end1"] = end1;
  state["final_steps"] = final_steps;
  state["lr_end2"] = end2;
  const float w = f32(c.warmup), k = f32(keep), d = f32(decay), fin = f32(final_steps);
  const float e1 = f32(end1), e2 = f32(end2), angle = f32(2.0 * kPi * cycles);
  return make(type, std::move(state), [=](float t) {
    if (w > t) return warmup_lr(t, w, c.lr, c.lr_init);
    if (t < w + k) return f32(c.lr);
    if (t < w + k + d) {
      const float progress = (t - k - w) / d;
      return e1 + (f32(c.lr) - e1) * std::max(0.f, 0.5f * (1.f + std::cos(angle * progress)));
    }
    if (t < w + k + d + fin) return e1;
    return e2;
  });
}

std::unique_ptr<LrScheduler> read_schedule(const json& section, const std::string& name, int64_t total_steps,
                                           OptionProblems& problems);

// MindFormers' LearningRateWiseLayer(base_lr, lr_scale): lr_scale * base_lr(t), in float32. Its
// base_lr is a schedule of its own (any registered type, read like the section itself); when it
// writes no learning_rate it takes the section's.
std::unique_ptr<LrScheduler> wise_layer(OptionReader& r, const std::string& type, int64_t total) {
  const std::optional<double> scale = r.number("lr_scale");
  if (!scale && !r.has("lr_scale")) r.error("lr_scale", "is required by " + type + " (the factor of base_lr's rate)");
  if (scale && !(*scale >= 0.0)) r.error("lr_scale", "must be >= 0, got " + format_float(*scale));
  const json* base = r.raw("base_lr");
  if (!base || !base->is_object()) {
    r.error("base_lr", base ? "expected a map (a schedule such as {type: CosineWithWarmUpLR, learning_rate: 1.e-4, "
                              "warmup_ratio: 0.01}), got " + describe_json(*base)
                            : "is required by " + type + ": the schedule to scale, e.g. {type: ConstantWarmUpLR, "
                              "warmup_steps: 0}");
    return nullptr;
  }
  json inner = *base;
  if (const json* lr = r.raw("learning_rate")) {
    if (inner.contains("learning_rate"))
      r.error("learning_rate", "is also set in base_lr; write the rate in one place (base_lr.learning_rate)");
    else inner["learning_rate"] = *lr;
  }
  std::shared_ptr<LrScheduler> base_schedule = read_schedule(inner, r.path("base_lr"), total, r.problems());
  if (!base_schedule) return nullptr;
  const float factor = f32(scale.value_or(1.0));
  json state{{"type", type}, {"lr_scale", scale.value_or(1.0)}, {"base_lr", base_schedule->state()}};
  return make(type, std::move(state), [factor, base_schedule](float t) {
    return factor * f32(base_schedule->lr_at(static_cast<int64_t>(t)));
  });
}

struct Entry {
  const char* type;
  const char* alias;
  Builder build;
};

const Entry kEntries[] = {
    {"ConstantWarmUpLR", "constant_with_warmup", constant_warmup},
    {"LinearWithWarmUpLR", "linear", linear_warmup},
    {"CosineWithWarmUpLR", "cosine", cosine_warmup},
    {"CosineWithRestartsAndWarmUpLR", "cosine_with_restarts", cosine_restarts},
    {"PolynomialWithWarmUpLR", "polynomial", polynomial_warmup},
    {"WarmUpStableDecayLR", nullptr, warmup_stable_decay},
    {"CosineAnnealingLR", "cosine_annealing", cosine_annealing},
    {"CosineAnnealingWarmRestarts", "cosine_annealing_warm_restarts", cosine_annealing_restarts},
    {"ConstantWithCoolDownLR", nullptr, constant_cooldown},
    {"LearningRateWiseLayer", nullptr, wise_layer},
};

}  // namespace

std::vector<std::string> lr_scheduler_types() {
  std::vector<std::string> out;
  for (const Entry& e : kEntries) out.push_back(e.type);
  return out;
}

namespace {

std::unique_ptr<LrScheduler> read_schedule(const json& section, const std::string& name, int64_t total_steps,
                                           OptionProblems& problems) {
  OptionReader r(section, name, problems);
  std::vector<std::string> names;  // class names and aliases, as the messages list them
  for (const Entry& e : kEntries) {
    names.emplace_back(e.type);
    if (e.alias) names.emplace_back(e.alias);
  }
  const std::optional<std::string> requested = r.string("type");
  if (!requested && !r.has("type")) {
    r.error("type", "is required: one of " + join(lr_scheduler_types()));
    return nullptr;
  }
  const Entry* entry = nullptr;
  for (const Entry& e : kEntries)
    if (requested && (*requested == e.type || (e.alias && *requested == e.alias))) entry = &e;
  if (!entry) {
    if (requested)
      r.error("type", "unknown scheduler '" + *requested + "'" + did_you_mean(*requested, names) + " (supported: " +
                          join(names) + ")");
    return nullptr;
  }
  // training.steps is the schedule's length (spec training_hyperparameters.md §2).
  r.mark_read("total_steps");
  if (r.has("total_steps"))
    r.error("total_steps", "must not be set: Loom passes training.steps (" + std::to_string(total_steps) +
                               ") as total_steps; delete it and set training.steps instead");
  r.reject_null("learning_rate", "float", format_float(kDefaultLearningRate));
  std::unique_ptr<LrScheduler> scheduler = entry->build(r, entry->type, total_steps);
  r.warn_unread(entry->type);
  return scheduler;
}

}  // namespace

std::unique_ptr<LrScheduler> read_lr_scheduler(const json& section, int64_t total_steps, OptionProblems& problems) {
  return read_schedule(section, "lr_scheduler", total_steps, problems);
}

std::unique_ptr<LrScheduler> build_lr_scheduler(const json& section, int64_t total_steps) {
  LOOM_CHECK(total_steps >= 0, ConfigError, "training.steps: must be >= 0, got ", total_steps);
  OptionProblems problems;
  std::unique_ptr<LrScheduler> scheduler = read_lr_scheduler(section, total_steps, problems);
  problems.throw_if_errors();
  return scheduler;
}

std::vector<std::string> LrScheduler::load_state(const json& saved) const {
  const json now = state();
  std::vector<std::string> changed;
  for (auto it = now.begin(); it != now.end(); ++it) {
    auto s = saved.find(it.key());
    if (s == saved.end() || *s != *it) changed.push_back(it.key());
  }
  for (auto it = saved.begin(); it != saved.end(); ++it)
    if (!now.contains(it.key())) changed.push_back(it.key());
  if (!changed.empty())
    log::warn("lr_scheduler: the checkpoint was trained with a different schedule (", saved.dump(),
              "); continuing with ", now.dump(), " (changed: ", join(changed), ")");
  return changed;
}

}  // namespace loom::optim
