// Loading a Loom configuration: YAML file -> overrides -> typed sections -> every rule of the
// spec -> TrainConfig and, for a world size, the ResolvedConfig the run uses. All problems of a
// file are reported together in one ConfigError, one per line, each
// "<file>:<line>:<col>: <dotted.path>: <problem and fix>". An unreadable file (missing, binary,
// not YAML, too large or deep) throws ConfigReadError instead.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "loom/config/diagnostics.h"
#include "loom/config/resolved_config.h"
#include "loom/config/sections.h"
#include "loom/config/yaml_reader.h"

namespace loom::config {

struct LoadOptions {
  // "training.steps=20", "optimizer.betas=[0.9,0.99]": applied to the document before validation.
  std::vector<std::string> overrides;
  // Also resolve the configuration (parallel layout, model, memory and loader options) for this
  // many ranks.
  std::optional<int> world_size;
  ReadLimits limits;
};

struct LoadedConfig {
  TrainConfig config;
  std::optional<ResolvedConfig> resolved;  // when LoadOptions::world_size was given
  std::vector<std::string> warnings;       // formatted like errors
  std::vector<std::string> notes;          // checks that could not run (e.g. no model depth)
};

// Loads and validates; warnings are returned, not printed.
LoadedConfig load_config_checked(const std::string& path, const LoadOptions& options = {});
// The same for YAML text; `source` names it in messages.
LoadedConfig load_config_text(const std::string& yaml, const std::string& source = "<config>",
                              const LoadOptions& options = {});

// Loads and validates, logging warnings with log::warn and notes with log::info.
LoadedConfig load_config(const std::string& path, const LoadOptions& options = {});

// The configuration as YAML with every default filled in (what the run really uses), loadable
// again. Derived values are written as they take effect (sequence_parallel with TP, the pipeline
// schedule); pipeline_parallel_microbatch_size, which is computed, is left out.
std::string effective_config_yaml(const TrainConfig& config);
// Writes effective_config_yaml to `path` (via a temporary file and rename). Throws IOError.
void write_effective_config(const TrainConfig& config, const std::string& path);

}  // namespace loom::config
