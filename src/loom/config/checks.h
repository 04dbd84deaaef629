// Internal to the config layer: the rules that run after typing, per area. Each adds every
// problem it finds to Diagnostics (errors stop the run, warnings are printed, notes say what
// could not be checked).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/config/diagnostics.h"
#include "loom/config/model_facts.h"
#include "loom/config/sections.h"

namespace loom::config::detail {

// training, checkpoint, train_dataset, model, monitor, profiler, callbacks, lora_config and the
// top-level keys (section_checks.cpp).
void check_sections(const TrainConfig& config, const ModelFacts& facts, Diagnostics& diag);
// parallelism rules that do not depend on the world size (parallel_checks.cpp).
void check_parallelism(const TrainConfig& config, const ModelFacts& facts, Diagnostics& diag);
// optimizer and lr_scheduler; resolves scheduler aliases to class names (optimizer_checks.cpp).
void check_optimizer(const TrainConfig& config, const ModelFacts& facts, Diagnostics& diag);
void check_lr_scheduler(TrainConfig& config, Diagnostics& diag);
// recompute, recompute_comm, swap and their combinations (memory_checks.cpp).
void check_memory(const TrainConfig& config, const ModelFacts& facts, Diagnostics& diag);

// ---- typed access to pass-through (JSON) keys; a wrong type is reported, then nullopt ------
std::optional<double> extra_float(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag);
std::optional<std::int64_t> extra_int(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag);
std::optional<bool> extra_bool(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag);
std::optional<std::string> extra_string(const Json& obj, const char* key, const std::string& prefix,
                                        Diagnostics& diag);
// A JSON value in messages: 'abc', 3, 0.5, true, [..].
std::string describe_json(const Json& value);

// Warns about pass-through keys that look like misspellings of `known` names.
void warn_unknown_extras(const Json& extras, const std::vector<std::string>& known, const std::string& prefix,
                         const std::string& consumer, Diagnostics& diag);

inline constexpr std::size_t kMaxRegexLength = 1000;
inline constexpr int kMaxRegexGroupDepth = 32;
// Compiles `pattern` as a std::regex (ECMAScript); reports a clear error if it is invalid, too
// long or too deeply nested for std::regex's recursive engine.
bool check_regex(const std::string& pattern, const std::string& path, Diagnostics& diag);

}  // namespace loom::config::detail
