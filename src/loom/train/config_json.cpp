#include "loom/train/config_json.h"

namespace loom::train {

namespace {
void append_extras(nlohmann::ordered_json& out, const nlohmann::ordered_json& extras) {
  if (!extras.is_object()) return;
  for (auto& [k, v] : extras.items())
    if (!out.contains(k)) out[k] = v;
}
}  // namespace

nlohmann::ordered_json optimizer_json(const config::OptimizerConfig& c) {
  nlohmann::ordered_json j = {{"type", c.type}, {"betas", c.betas}, {"eps", c.eps}, {"weight_decay", c.weight_decay}};
  if (c.weight_decay_include) j["weight_decay_include"] = *c.weight_decay_include;
  if (c.weight_decay_exclude) j["weight_decay_exclude"] = *c.weight_decay_exclude;
  append_extras(j, c.extras);
  return j;
}

nlohmann::ordered_json lr_scheduler_json(const config::LrSchedulerConfig& c) {
  nlohmann::ordered_json j = {{"type", c.type}, {"learning_rate", c.learning_rate}};
  append_extras(j, c.extras);
  return j;
}

}  // namespace loom::train
