// The config sections the optimizer layer consumes as JSON (it never sees yaml-cpp): the fixed
// fields plus the section's extra keys, in file order. (The model and the data loader take typed
// values the configuration resolved: config::ResolvedConfig.)
#pragma once

#include <nlohmann/json.hpp>

#include "loom/config/sections.h"

namespace loom::train {

nlohmann::ordered_json optimizer_json(const config::OptimizerConfig& c);
nlohmann::ordered_json lr_scheduler_json(const config::LrSchedulerConfig& c);

}  // namespace loom::train
