// Command-line overrides: `--set training.steps=20 --set optimizer.betas=[0.9,0.99]`.
// An override edits the YAML document before validation, so it obeys the same typing rules and
// its mistakes are reported like the file's, marked "--set <text>" instead of a line number.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "loom/config/config_node.h"

namespace loom::config {

struct OverrideStep {
  bool is_index = false;
  std::string key;        // map key
  std::size_t index = 0;  // list index
};

struct Override {
  std::string text;  // as given: "training.steps=20"
  std::vector<OverrideStep> path;
  std::string value_text;
};

// Splits "a.b[0].c=VALUE" (keys may be quoted: recompute.select_module['.*mlp']=[0-3]).
// Throws ConfigError naming the override when it has no '=' or an empty key.
Override parse_override(const std::string& text);

// Sets the value, creating missing maps along the path (a list index may append one item).
// Throws ConfigError when the path walks through a scalar or past the end of a list.
void apply_override(ConfigNode& root, const Override& override_spec);

}  // namespace loom::config
