#include "loom/config/model_facts.h"

namespace loom::config {

namespace {

// The first of `keys` present in `obj` as a non-negative int; type problems are reported.
std::optional<std::int64_t> read_count(const Json& obj, std::initializer_list<const char*> keys,
                                       const std::string& prefix, Diagnostics& diag, std::string* which = nullptr) {
  std::optional<std::int64_t> found;
  for (const char* key : keys) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) continue;
    const std::string path = prefix + "." + key;
    if (!it->is_number_integer()) {
      diag.error(path, std::string("expected int, got ") + it->type_name() + " " + it->dump());
      continue;
    }
    const std::int64_t value = it->get<std::int64_t>();
    if (value < 0) {
      diag.error(path, "must be >= 0, got " + std::to_string(value));
      continue;
    }
    if (found && *found != value) {
      diag.error(path, "is " + std::to_string(value) + " but " + (which ? *which : std::string("another key")) +
                           " says " + std::to_string(*found) + "; set only one of them");
      continue;
    }
    if (!found) {
      found = value;
      if (which) *which = prefix + "." + key;
    }
  }
  return found;
}

std::optional<bool> read_bool(const Json& obj, const char* key, const std::string& prefix, Diagnostics& diag) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) {
    diag.error(prefix + "." + key, std::string("expected bool, got ") + it->type_name() + " " + it->dump());
    return std::nullopt;
  }
  return it->get<bool>();
}

}  // namespace

ModelFacts model_facts(const TrainConfig& config, Diagnostics& diag) {
  ModelFacts f;
  const Json& m = config.model.extras;
  f.num_layers = read_count(m, {"num_hidden_layers", "num_layers"}, "model", diag, &f.num_layers_key);
  std::string mtp_key;
  f.mtp_layers = read_count(m, {"num_nextn_predict_layers", "mtp_num_layers"}, "model", diag, &mtp_key).value_or(0);
  f.num_attention_heads = read_count(m, {"num_attention_heads"}, "model", diag);
  std::string experts_key;
  f.num_experts = read_count(m, {"n_routed_experts", "num_experts", "num_moe_experts"}, "model", diag, &experts_key);
  f.seq_length = read_count(m, {"seq_length"}, "model", diag);
  if (!f.seq_length) {
    const Json& dl = config.train_dataset.dataloader.extras;
    auto cfg = dl.find("config");
    if (cfg != dl.end() && cfg->is_object())
      f.seq_length = read_count(*cfg, {"seq_length"}, "train_dataset.dataloader.config", diag);
  }
  f.use_attn_mask_compression = read_bool(m, "use_attn_mask_compression", "model", diag).value_or(false);
  if (auto mla = read_bool(m, "multi_latent_attention", "model", diag)) {
    f.multi_latent_attention = *mla;
  } else {
    // A DeepSeek-V3 model is MLA by construction even when its (HF) config does not say so.
    const bool deepseek = config.model.model_type == "deepseek_v3" ||
                          config.model.architectures == "DeepseekV3ForCausalLM";
    f.multi_latent_attention = deepseek || m.contains("kv_lora_rank");
  }
  return f;
}

}  // namespace loom::config
