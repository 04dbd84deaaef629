// `loom check-config FILE [--world-size N] [--set key=value ...] [--quiet]`: validates a
// configuration for N ranks (default 1) with the resolution `loom train` uses (load_config),
// prints the effective configuration and the parallel layout as YAML on stdout, warnings,
// errors and notes on stderr (among the notes, what would keep `loom train` from running a
// valid file: a model or dataset Loom cannot build).
// Exit codes: 0 valid, 1 invalid, 2 unreadable file or bad command line.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "loom/config/config.h"

namespace loom::config {

inline constexpr int kCheckConfigValid = 0;
inline constexpr int kCheckConfigInvalid = 1;
inline constexpr int kCheckConfigUnreadable = 2;

// What a run checks that the configuration layer cannot (the callback registry lives in train):
// throws ConfigError like load_config does. `loom check-config` passes the trainer's own check.
using RunChecks = std::function<void(const LoadedConfig& loaded)>;

int run_check_config(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                     const RunChecks& run_checks = {});

// The layout block printed by check-config (a YAML mapping under `parallel_layout:`).
std::string layout_yaml(const ParallelLayout& layout, const TrainConfig& config);

std::string check_config_usage();

}  // namespace loom::config
