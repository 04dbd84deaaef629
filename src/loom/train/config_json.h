// The config sections that lower layers consume as JSON (they never see yaml-cpp): the fixed
// fields plus the section's extra keys, in file order.
#pragma once

#include <nlohmann/json.hpp>

#include "loom/config/sections.h"

namespace loom::train {

nlohmann::ordered_json optimizer_json(const config::OptimizerConfig& c);
nlohmann::ordered_json lr_scheduler_json(const config::LrSchedulerConfig& c);
nlohmann::ordered_json train_dataset_json(const config::TrainDatasetConfig& c);
nlohmann::ordered_json model_json(const config::ModelConfig& c);

}  // namespace loom::train
