#include "loom/config/model_section.h"

#include "loom/config/checks.h"

namespace loom::config {

Json model_section_json(const ModelConfig& model) {
  Json j = Json::object();
  if (model.model_type) j["model_type"] = *model.model_type;
  if (model.architectures) std::visit([&j](const auto& a) { j["architectures"] = a; }, *model.architectures);
  if (model.extras.is_object())
    for (auto it = model.extras.begin(); it != model.extras.end(); ++it)
      if (!j.contains(it.key())) j[it.key()] = it.value();
  return j;
}

namespace detail {

namespace {

// "rope_scaling.fator" (a nested key ModelArgs names with a dot) as a path Diagnostics can place.
std::string key_path(const Json& section, const std::string& key) {
  const auto dot = key.find('.');
  if (dot != std::string::npos) {
    const std::string outer = key.substr(0, dot);
    if (auto it = section.find(outer); it != section.end() && it->is_object())
      return child_path(child_path("model", outer), key.substr(dot + 1));
  }
  return child_path("model", key);
}

// Keys no field reads are ignored by the model; one a typo away from a key the architecture
// reads is most likely that key misspelt, so it is a warning, the others a note.
void report_unknown_keys(const models::ModelReading& reading, const Json& section, Diagnostics& diag) {
  for (const auto& key : reading.args.unknown_keys) {
    const std::string path = key_path(section, key);
    bool fixed_field = false;
    for (const char* fixed : {"model_type", "architectures"})
      if (closest_match(key, {fixed}) == fixed) {
        diag.warn(path, std::string("is passed to the model unchecked; did you mean '") + fixed + "'?");
        fixed_field = true;
      }
    // Without a known architecture nothing says which keys it would read.
    if (fixed_field || !reading.architecture_known) continue;
    const std::string hint = did_you_mean(key, reading.known_keys);
    if (!hint.empty())
      diag.key_warn(path, "is not a model field Loom knows and is passed to the model as is" + hint);
    else
      diag.key_note(path, "no field of the " + reading.args.model_type + " model reads this key; it is ignored");
  }
}

}  // namespace

models::ModelReading read_model_section(const TrainConfig& c, Diagnostics& diag) {
  const ModelConfig& m = c.model;
  // Loom decision: the reference effectively requires both (None fails its type check) while
  // the spec marks both optional; one of them is enough to pick the model.
  if (!m.model_type && !m.architectures) {
    if (m.extras.empty() && !c.is_explicit("model"))
      diag.error("model", "the model section is required: set model_type (e.g. deepseek_v3, qwen3, llama) or "
                          "architectures (e.g. Qwen3ForCausalLM) and the structure hyper-parameters");
    else
      diag.error("model", "set model.model_type (e.g. deepseek_v3, qwen3, llama) or model.architectures "
                          "(e.g. Qwen3ForCausalLM) so Loom knows which model to build");
  }
  const Json section = model_section_json(m);
  models::ModelReading reading = models::read_model_args(section, "model");
  for (const auto& e : reading.errors) diag.error_at(diag.mark_of(e.path), "", e.message);
  for (const auto& w : reading.warnings) diag.warn_at(diag.mark_of(w.path), "", w.message);
  report_unknown_keys(reading, section, diag);
  return reading;
}

}  // namespace detail

}  // namespace loom::config
