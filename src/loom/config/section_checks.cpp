// Rules of the reference's __post_init__ checks and the spec's field descriptions for the
// sections that are not parallelism, optimizer, scheduler or memory (the model section is read
// by model_section.cpp, the data loader's keys by dataset_section.cpp).
#include <algorithm>
#include <cmath>
#include <regex>

#include "loom/config/checks.h"
#include "loom/config/yaml_scalar.h"
#include "loom/data/tokenizer/tokenizer.h"

namespace loom::config::detail {

namespace {

std::string type_of(const Json& v) { return optim::json_type_name(v); }

const Json* find_key(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

}  // namespace

std::optional<double> extra_float(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag) {
  const Json* v = find_key(obj, key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_number() || v->is_boolean()) {
    diag.error(prefix + "." + key, "expected float, got " + type_of(*v) + " " + describe_json(*v));
    return std::nullopt;
  }
  return v->get<double>();
}

std::optional<std::int64_t> extra_int(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag) {
  const Json* v = find_key(obj, key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_number_integer()) {
    diag.error(prefix + "." + key, "expected int, got " + type_of(*v) + " " + describe_json(*v));
    return std::nullopt;
  }
  return v->get<std::int64_t>();
}

std::optional<bool> extra_bool(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag) {
  const Json* v = find_key(obj, key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_boolean()) {
    diag.error(prefix + "." + key, "expected bool, got " + type_of(*v) + " " + describe_json(*v));
    return std::nullopt;
  }
  return v->get<bool>();
}

std::optional<std::string> extra_string(const Json& obj, const char* key, const std::string& prefix,
                                        Diagnostics& diag) {
  const Json* v = find_key(obj, key);
  if (!v || v->is_null()) return std::nullopt;
  if (!v->is_string()) {
    diag.error(prefix + "." + key, "expected str, got " + type_of(*v) + " " + describe_json(*v));
    return std::nullopt;
  }
  return v->get<std::string>();
}

void warn_unknown_extras(const Json& extras, const std::vector<std::string>& known, const std::string& prefix,
                         const std::string& consumer, Diagnostics& diag) {
  for (auto it = extras.begin(); it != extras.end(); ++it) {
    bool is_known = false;
    for (const auto& k : known) is_known |= k == it.key();
    if (is_known) continue;
    diag.key_warn(child_path(prefix, it.key()), "is not a parameter of " + consumer + " and is ignored" +
                                                did_you_mean(it.key(), known));
  }
}

bool check_regex(const std::string& pattern, const std::string& path, Diagnostics& diag) {
  // std::regex compiles and matches recursively: bound the pattern before it sees it.
  if (pattern.size() > kMaxRegexLength) {
    diag.error(path, "regular expression of " + std::to_string(pattern.size()) + " characters; module patterns are "
                     "short (at most " + std::to_string(kMaxRegexLength) + ")");
    return false;
  }
  int depth = 0, max_depth = 0;
  for (char ch : pattern) {
    if (ch == '(') max_depth = std::max(max_depth, ++depth);
    else if (ch == ')') --depth;
  }
  if (max_depth > kMaxRegexGroupDepth) {
    diag.error(path, "regular expression nests " + std::to_string(max_depth) + " groups; at most " +
                         std::to_string(kMaxRegexGroupDepth) + " are allowed");
    return false;
  }
  try {
    std::regex re(pattern, std::regex::ECMAScript);
    return true;
  } catch (const std::regex_error& e) {
    diag.error(path, "'" + pattern + "' is not a valid regular expression (ECMAScript syntax): " + e.what());
    return false;
  }
}

namespace {

void require_at_least(std::int64_t value, std::int64_t minimum, const std::string& path, Diagnostics& diag,
                      const std::string& why = "") {
  if (value < minimum)
    diag.error(path, "must be >= " + std::to_string(minimum) + ", got " + std::to_string(value) + why);
}

void check_training(const TrainConfig& c, Diagnostics& diag) {
  const TrainingConfig& t = c.training;
  // Reference TrainingConfig.__post_init__ messages.
  if (t.global_batch_size <= 0)
    diag.error("training.global_batch_size", "training.global_batch_size in config must be positive, got " +
                                                 std::to_string(t.global_batch_size));
  if (t.local_batch_size <= 0)
    diag.error("training.local_batch_size", "training.local_batch_size in config must be positive, got " +
                                                std::to_string(t.local_batch_size));
  if (t.steps <= 0)
    diag.error("training.steps", "must be positive (the number of optimizer steps), got " + std::to_string(t.steps));
  // The spec asks to keep max_norm positive; the reference would zero (0) or reverse (< 0)
  // every gradient instead of disabling clipping, so Loom refuses such a value.
  if (!(t.max_norm > 0))
    diag.error("training.max_norm", "must be positive, got " + format_float(t.max_norm) +
                                        ": 0 or a negative max_norm does not disable clipping, it scales every "
                                        "gradient to zero or reverses it; use a larger value for weaker clipping");
  if (t.eval_interval < 0)
    diag.error("training.eval_interval", "must be >= 0 (optimizer steps between evaluations; 0 evaluates never), "
                                         "got " + std::to_string(t.eval_interval));
  if (t.eval_iters == 0 || t.eval_iters < -1)
    diag.error("training.eval_iters", "must be a positive number of global batches, or -1 for the whole validation "
                                      "split, got " + std::to_string(t.eval_iters));
  if (t.rampup_batch_size) {
    const auto& r = *t.rampup_batch_size;
    const std::string p = "training.rampup_batch_size";
    if (r.size() != 3) {
      diag.error(p, "expected 3 ints [start_global_batch_size, batch_size_increment, rampup_samples], got " +
                        std::to_string(r.size()) + " values");
    } else {
      bool ok = true;
      if (r[1] <= 0) {
        diag.error(index_path(p, 1), "rampup_batch_size[1] (batch_size_increment) must be > 0, got " +
                                         std::to_string(r[1]) + ".");
        ok = false;
      }
      if (r[2] < 0) {
        diag.error(index_path(p, 2), "rampup_batch_size[2] (rampup_samples) must be >= 0, got " +
                                         std::to_string(r[2]) + ".");
        ok = false;
      }
      if (r[0] <= 0) {
        diag.error(index_path(p, 0), "rampup_batch_size[0] start_global_batch_size(" + std::to_string(r[0]) +
                                         ") must be positive.");
        ok = false;
      }
      if (ok && t.global_batch_size > 0) {
        if (t.global_batch_size < r[0])
          diag.error(p, "training.global_batch_size(" + std::to_string(t.global_batch_size) +
                            ") must be >= rampup_batch_size[0] start_global_batch_size(" + std::to_string(r[0]) + ").");
        else if ((t.global_batch_size - r[0]) % r[1] != 0)
          diag.error(p, "(global_batch_size - start_global_batch_size)=" + std::to_string(t.global_batch_size - r[0]) +
                            " must be divisible by batch_size_increment=" + std::to_string(r[1]) + ".");
      }
    }
  }
}

void check_checkpoint(const TrainConfig& c, Diagnostics& diag) {
  const CheckpointConfig& k = c.checkpoint;
  // Not checked by the reference, which divides by or loops over these.
  require_at_least(k.save_interleaved_steps, 1, "checkpoint.save_interleaved_steps", diag);
  require_at_least(k.save_max, 1, "checkpoint.save_max", diag);
  require_at_least(k.load_worker_number, 1, "checkpoint.load_worker_number", diag);
  require_at_least(k.reshard_worker_num, 1, "checkpoint.reshard_worker_num", diag);
  if (k.prefix && k.prefix->find('/') != std::string::npos)
    diag.error("checkpoint.prefix", "'" + *k.prefix + "' must be a file name prefix, without '/'");
}

void check_dataset(const TrainConfig& c, Diagnostics& diag) {
  const DataloaderConfig& d = c.train_dataset.dataloader;
  if (d.type.empty()) {
    std::vector<std::string> keys;
    for (auto it = d.extras.begin(); it != d.extras.end(); ++it) keys.push_back(it.key());
    const std::string near = closest_match("type", keys);
    diag.error("train_dataset.dataloader.type",
               "is required: the data loader class, e.g. BlendedMegatronDatasetDataLoader" +
                   (near.empty() ? std::string() : " (found '" + near + "'; did you mean 'type'?)"));
  }
  require_at_least(c.train_dataset.num_parallel_workers, 1, "train_dataset.num_parallel_workers", diag);
  // The loader's worker threads are bounded: more than 256 is a typo, not a machine.
  if (c.train_dataset.num_parallel_workers > 256)
    diag.error("train_dataset.num_parallel_workers",
               "must be <= 256, got " + std::to_string(c.train_dataset.num_parallel_workers));
  require_at_least(c.train_dataset.prefetch_size, 0, "train_dataset.prefetch_size", diag);
  if (d.column_names.empty())
    diag.error("train_dataset.dataloader.column_names", "must name at least one column, e.g. [input_ids, labels]");
}

void check_monitor(const TrainConfig& c, Diagnostics& diag) {
  const MonitorConfig& m = c.monitor;
  if (m.moe_monitor.save_tokens_per_expert_interval && *m.moe_monitor.save_tokens_per_expert_interval <= 0)
    diag.error("monitor.moe_monitor.save_tokens_per_expert_interval",
               "must be a positive int (or null to disable), got " +
                   std::to_string(*m.moe_monitor.save_tokens_per_expert_interval));
  if (m.moe_monitor.target_layers) {
    const std::string p = "monitor.moe_monitor.target_layers";
    if (const auto* n = std::get_if<std::int64_t>(&*m.moe_monitor.target_layers)) {
      if (*n <= 0) diag.error(p, "an int means the first N layers and must be > 0, got " + std::to_string(*n));
    } else {
      const auto& ids = std::get<std::vector<std::int64_t>>(*m.moe_monitor.target_layers);
      for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] < 0) diag.error(index_path(p, i), "layer ids must be >= 0, got " + std::to_string(ids[i]));
    }
  }
  require_at_least(m.tensorboard.log_interval, 1, "monitor.tensorboard.log_interval", diag);
  require_at_least(m.tensorboard.queue_size, 1, "monitor.tensorboard.queue_size", diag);
  require_at_least(m.health_checkpoint.global_norm_skip_time, 0, "monitor.health_checkpoint.global_norm_skip_time",
                   diag);
}

void check_profiler(const TrainConfig& c, Diagnostics& diag) {
  const ProfilerConfig& p = c.profiler;
  // Reference ProfilerConfig.__post_init__ (always, enabled or not).
  if (p.start_step <= 0)
    diag.error("profiler.start_step", "must be positive, got " + std::to_string(p.start_step));
  if (p.end_step <= 0) diag.error("profiler.end_step", "must be positive, got " + std::to_string(p.end_step));
  if (p.start_step > 0 && p.end_step > 0 && p.start_step > p.end_step)
    diag.error("profiler.start_step", "start_step (" + std::to_string(p.start_step) + ") must be <= end_step (" +
                                          std::to_string(p.end_step) + ")");
  if (p.profiler_level < 0 || p.profiler_level > 2)
    diag.error("profiler.profiler_level", "must be 0, 1 or 2, got " + std::to_string(p.profiler_level));
  if (p.profiler_rank)
    for (std::size_t i = 0; i < p.profiler_rank->size(); ++i)
      if ((*p.profiler_rank)[i] < 0)
        diag.error(index_path("profiler.profiler_rank", i), "ranks are >= 0, got " + std::to_string((*p.profiler_rank)[i]));
  if (p.enable_profiling && p.start_step > c.training.steps)
    diag.warn("profiler.start_step", "is after the last training step (" + std::to_string(c.training.steps) +
                                         "); nothing will be profiled");
}

void check_callbacks(const TrainConfig& c, Diagnostics& diag) {
  for (std::size_t i = 0; i < c.callbacks.size(); ++i)
    if (c.callbacks[i].type.empty())
      diag.error(index_path("callbacks", i) + ".type", "is required: the registered callback class name");
}

void check_lora(const TrainConfig& c, Diagnostics& diag) {
  if (!c.lora_config) return;
  const LoraConfig& l = *c.lora_config;
  if (l.target_modules.empty())
    diag.error("lora_config.target_modules", "must be a regular expression over module paths, e.g. "
                                             "'.*(linear_qkv|linear_proj)'; it is empty, so LoRA would adapt nothing");
  else
    check_regex(l.target_modules, "lora_config.target_modules", diag);
  if (l.exclude_layers) check_regex(*l.exclude_layers, "lora_config.exclude_layers", diag);
  require_at_least(l.lora_rank, 1, "lora_config.lora_rank", diag);
  if (!(l.lora_dropout >= 0 && l.lora_dropout < 1))
    diag.error("lora_config.lora_dropout", "must be in [0, 1), got " + format_float(l.lora_dropout));
}

struct FieldNames {
  std::vector<std::string> names;
  template <class T>
  void operator()(const char* n, T&) { names.emplace_back(n); }
  template <class T>
  void alias(const char*, const char*, T&) {}
};

// Unknown top-level keys are kept (the reference allows extras there), but one that is a typo
// of a section name would silently drop that whole section, and a section's own field at the
// top level is almost always an indentation slip.
void check_top_level(const TrainConfig& c, Diagnostics& diag) {
  static const std::vector<std::string> sections = {
      "checkpoint", "training", "parallelism", "optimizer", "lr_scheduler", "train_dataset", "model",
      "monitor", "context", "profiler", "recompute", "recompute_comm", "swap", "callbacks", "lora_config"};
  struct Owner {
    const char* section;
    std::vector<std::string> fields;
  };
  auto fields_of = [](auto section) {
    FieldNames names;
    decltype(section)::visit(section, names);
    return names.names;
  };
  const std::vector<Owner> owners = {{"training", fields_of(TrainingConfig{})},
                                     {"parallelism", fields_of(ParallelismConfig{})},
                                     {"checkpoint", fields_of(CheckpointConfig{})},
                                     {"profiler", fields_of(ProfilerConfig{})}};
  for (auto it = c.extras.begin(); it != c.extras.end(); ++it) {
    const std::string& key = it.key();
    const std::string near = closest_match(key, sections);
    if (!near.empty()) {
      diag.key_error(key, "'" + key + "' is not a section; did you mean '" + near +
                          "'? (as written, the whole section would be ignored)");
      continue;
    }
    for (const auto& o : owners) {
      bool found = false;
      for (const auto& f : o.fields) found |= f == key;
      if (found) {
        diag.key_warn(key, "a top-level '" + key + "' is ignored; it is a field of the " + o.section +
                           " section: indent it under '" + o.section + ":'");
        break;
      }
    }
  }
}

}  // namespace

void check_sections(const TrainConfig& config, Diagnostics& diag) {
  check_training(config, diag);
  check_checkpoint(config, diag);
  check_dataset(config, diag);
  check_monitor(config, diag);
  check_profiler(config, diag);
  check_callbacks(config, diag);
  check_lora(config, diag);
  check_top_level(config, diag);
  warn_inert_fields(config, diag);
}

void check_sampling(const TrainConfig& c, const models::ModelArgs& model, Diagnostics& diag) {
  const TrainingConfig& t = c.training;
  if (t.sample_interval < 0)
    diag.error("training.sample_interval", "must be >= 0 (optimizer steps between samples; 0 samples never), got " +
                                               std::to_string(t.sample_interval));
  if (t.sample_max_new_tokens < 1)
    diag.error("training.sample_max_new_tokens", "must be >= 1, got " + std::to_string(t.sample_max_new_tokens));
  if (t.sample_interval <= 0) return;
  if (t.sample_prompts.empty())
    diag.error("training.sample_prompts", "is empty but training.sample_interval is " +
                                              std::to_string(t.sample_interval) + ": list the prompts to continue");
  if (t.sample_tokenizer.empty()) {
    diag.error("training.sample_tokenizer", "is required with training.sample_interval: the tokenizer of the prompts "
                                            "(a tokenizer.json, a SentencePiece .model or a model folder)");
    return;
  }
  std::unique_ptr<data::Tokenizer> tokenizer;
  try {
    tokenizer = data::load_tokenizer(t.sample_tokenizer);
  } catch (const Error& e) {
    diag.error("training.sample_tokenizer", e.what());
    return;
  }
  if (model.vocab_size > 0 && tokenizer->vocab_size() > model.vocab_size)
    diag.error("training.sample_tokenizer", "has " + std::to_string(tokenizer->vocab_size()) +
                                                " tokens but model.vocab_size is " + std::to_string(model.vocab_size) +
                                                ": sample with the tokenizer the data was prepared with");
  for (size_t i = 0; i < t.sample_prompts.size(); ++i) {
    const size_t n = tokenizer->encode(t.sample_prompts[i]).size();
    if (model.max_position_embeddings > 0 && static_cast<int64_t>(n) >= model.max_position_embeddings)
      diag.error(index_path("training.sample_prompts", i), "is " + std::to_string(n) + " tokens, and the model has " +
                                                               std::to_string(model.max_position_embeddings) +
                                                               " positions: shorten it");
  }
}

}  // namespace loom::config::detail
