// Helpers for the config tests: complete a partial YAML with the sections every configuration
// needs, load it, and get its errors or warnings as one string.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/config/config.h"

namespace loom::config::testing {

inline const char* const kModel =
    "model:\n  model_type: llama\n  num_hidden_layers: 8\n  num_attention_heads: 8\n  seq_length: 4096\n";
inline const char* const kDataset = "train_dataset:\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n";
inline const char* const kScheduler = "lr_scheduler:\n  type: ConstantWarmUpLR\n  warmup_steps: 0\n";

inline bool defines_section(const std::string& yaml, const std::string& section) {
  return yaml.rfind(section + ":", 0) == 0 || yaml.find("\n" + section + ":") != std::string::npos;
}

// `sections` plus a minimal model, train_dataset and lr_scheduler where it has none.
inline std::string with_defaults(const std::string& sections) {
  std::string out = sections;
  if (!out.empty() && out.back() != '\n') out += "\n";
  if (!defines_section(sections, "model")) out += kModel;
  if (!defines_section(sections, "train_dataset")) out += kDataset;
  if (!defines_section(sections, "lr_scheduler")) out += kScheduler;
  return out;
}

inline LoadOptions options(std::optional<int> world = std::nullopt, std::vector<std::string> overrides = {}) {
  LoadOptions o;
  o.world_size = world;
  o.overrides = std::move(overrides);
  return o;
}

// Loads `sections` completed by with_defaults.
inline LoadedConfig load(const std::string& sections, std::optional<int> world = std::nullopt,
                         std::vector<std::string> overrides = {}) {
  return load_config_text(with_defaults(sections), "test.yaml", options(world, std::move(overrides)));
}

// The ConfigError message of loading `sections` (completed), or "" when it loads.
inline std::string errors(const std::string& sections, std::optional<int> world = std::nullopt,
                          std::vector<std::string> overrides = {}) {
  try {
    load(sections, world, std::move(overrides));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The same for text used as it is (no completion).
inline std::string raw_errors(const std::string& yaml, std::optional<int> world = std::nullopt) {
  try {
    load_config_text(yaml, "test.yaml", options(world));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

inline std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

inline std::string warnings(const std::string& sections, std::optional<int> world = std::nullopt) {
  return joined(load(sections, world).warnings);
}

inline int count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (auto pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

}  // namespace loom::config::testing
