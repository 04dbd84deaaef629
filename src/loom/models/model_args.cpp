#include "loom/models/model_args.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/models/accounting.h"

namespace loom::models {

using Json = nlohmann::ordered_json;
using nn::ScoreFunction;
using ::loom::detail::concat;

namespace {

const std::vector<ArchitectureInfo> kArchitectures = {
    {"llama", "LlamaForCausalLM"},
    {"qwen3", "Qwen3ForCausalLM"},
    {"qwen3_moe", "Qwen3MoeForCausalLM"},
    {"deepseek_v3", "DeepseekV3ForCausalLM"},
};

std::string supported_list() {
  std::string s;
  for (const auto& a : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(a.model_type) + " (" + a.architecture + ")";
  return s;
}

// HF keys that do not change training; kept and written back to config.json.
constexpr const char* kHfExtras[] = {"bos_token_id", "eos_token_id", "pad_token_id", "torch_dtype",
                                     "transformers_version", "use_cache", "pretraining_tp", "ep_size",
                                     "max_window_layers", "output_router_logits", "auto_map"};

// Keys of the nested rope_scaling mapping (HF names).
constexpr const char* kRopeScalingKeys[] = {"type", "rope_type", "factor", "original_max_position_embeddings",
                                            "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                                            "attention_factor", "truncate", "low_freq_factor", "high_freq_factor"};

const Json& empty_section() {
  static const Json empty = Json::object();
  return empty;
}

bool present(const Json& section, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (section.contains(n) && !section[n].is_null()) return true;
  return false;
}

// Fills model_type/architecture; true when they name a supported architecture. An unsupported or
// missing one is a gap (nothing written is wrong, but Loom cannot build it); two that disagree are
// an error.
bool resolve_architecture(KeyReader& r, ModelArgs& a, const std::string& prefix, std::vector<ModelIssue>& gaps) {
  std::optional<std::string> type = r.get_string({"model_type"});
  std::string arch;
  if (const Json* v = r.find({"architectures"})) {
    if (v->is_string())
      arch = v->get<std::string>();
    else if (r.check(v->is_array() && v->size() == 1 && (*v)[0].is_string(), "architectures", prefix,
                     ".architectures must be one architecture name (or a one-element list), got ", v->dump()))
      arch = (*v)[0].get<std::string>();
  }
  a.model_type = type.value_or("");
  a.architecture = arch;
  if (!type && arch.empty()) {
    gaps.push_back({r.path("model_type"), concat(prefix, ".model_type is required (or ", prefix,
                                                 ".architectures); supported: ", supported_list())});
    return false;
  }
  const ArchitectureInfo* by_type = nullptr;
  const ArchitectureInfo* by_arch = nullptr;
  for (const auto& info : kArchitectures) {
    if (type && *type == info.model_type) by_type = &info;
    if (arch == info.architecture) by_arch = &info;
  }
  const bool type_ok = !type || by_type, arch_ok = arch.empty() || by_arch;
  if (!type_ok)
    gaps.push_back({r.path("model_type"), concat(prefix, ".model_type = \"", *type,
                                                 "\" is not supported; use one of: ", supported_list())});
  if (!arch_ok)
    gaps.push_back({r.path("architectures"), concat(prefix, ".architectures = \"", arch,
                                                    "\" is not supported; use one of: ", supported_list())});
  if (!type_ok || !arch_ok) return false;
  if (by_type && by_arch)
    r.check(by_type == by_arch, "architectures", prefix, ".model_type = \"", *type, "\" and ", prefix,
            ".architectures = \"", arch, "\" disagree: ", by_type->model_type, " is ", by_type->architecture,
            "; fix one of them");
  const ArchitectureInfo* info = by_type ? by_type : by_arch;
  a.model_type = info->model_type;
  a.architecture = info->architecture;
  return true;
}

// HF config-class defaults of each architecture (transformers Llama/Qwen3/Qwen3Moe/DeepseekV3Config).
void apply_architecture_defaults(ModelArgs& a) {
  const std::string& t = a.model_type;
  a.qk_layernorm = t == "qwen3" || t == "qwen3_moe";
  a.max_position_embeddings = t == "llama" ? 2048 : t == "deepseek_v3" ? 4096 : 32768;
  if (t == "qwen3_moe") {
    a.num_experts = 128;
    a.moe_topk = 8;
    a.moe_intermediate_size = 768;
    a.norm_topk_prob = false;
    a.score_function = ScoreFunction::softmax;
    a.moe_load_balancing_types = {"aux_loss"};
    a.moe_aux_loss_coeffs = {0.001};
  }
  if (t == "deepseek_v3") {
    a.multi_latent_attention = true;
    a.rope_interleave = true;
    a.q_lora_rank = 1536;
    a.kv_lora_rank = 512;
    a.qk_nope_head_dim = 128;
    a.qk_rope_head_dim = 64;
    a.v_head_dim = 128;
    a.num_experts = 256;
    a.moe_topk = 8;
    a.moe_intermediate_size = 2048;
    a.first_k_dense_replace = 3;
    a.moe_router_num_groups = 8;
    a.moe_router_group_topk = 4;
    a.routed_scaling_factor = 2.5;
    a.score_function = ScoreFunction::sigmoid;
    a.norm_topk_prob = true;
    a.topk_method = "noaux_tc";
    a.moe_load_balancing_types = {"seq_aux_loss"};
    a.moe_aux_loss_coeffs = {0.0};
  }
}

void read_rope(KeyReader& r, ModelArgs& a, const std::string& prefix, std::vector<std::string>& unknown) {
  a.rope_theta = r.get_double({"rope_theta", "rotary_base"}).value_or(a.rope_theta);
  a.rope_interleave = r.get_bool({"rope_interleave"}).value_or(a.rope_interleave);
  if (auto f = r.get_double({"partial_rotary_factor"}))
    r.check(*f == 1.0, "partial_rotary_factor", prefix, ".partial_rotary_factor = ", *f,
            " is not supported; Loom rotates the whole head (use 1.0)");

  const Json* nested = r.find({"rope_scaling"});
  if (nested && !r.check(nested->is_object(), "rope_scaling", prefix,
                         ".rope_scaling must be a mapping such as {type: yarn, factor: 40, ...} or null, got ",
                         nested->dump()))
    nested = nullptr;
  std::string kind = "none", kind_key;
  if (nested) {
    const std::set<std::string> known(std::begin(kRopeScalingKeys), std::end(kRopeScalingKeys));
    for (auto it = nested->begin(); it != nested->end(); ++it)
      if (!known.count(it.key())) unknown.push_back("rope_scaling." + it.key());
    for (const char* k : {"rope_type", "type"}) {
      if (!nested->contains(k)) continue;
      const std::string key = std::string("rope_scaling.") + k;
      if (!r.check((*nested)[k].is_string(), key, prefix, ".rope_scaling.", k, " must be a string")) continue;
      const std::string v = (*nested)[k].get<std::string>();
      if (!r.check(kind_key.empty() || v == kind, key, prefix, ".rope_scaling.type and rope_type disagree (\"", kind,
                   "\" vs \"", v, "\"); keep one"))
        continue;
      kind = v;
      kind_key = key;
    }
  }
  if (auto pe = r.get_string({"position_embedding_type"})) {
    if (r.check(*pe == "rope" || *pe == "yarn" || *pe == "llama3", "position_embedding_type", prefix,
                ".position_embedding_type = \"", *pe, "\" is not supported; use rope, yarn or llama3") &&
        *pe != "rope" &&
        r.check(kind_key.empty() || kind == *pe, "position_embedding_type", prefix, ".position_embedding_type = \"",
                *pe, "\" and ", prefix, ".", kind_key, " = \"", kind, "\" disagree; keep one"))
      kind = *pe;
  }
  if (kind == "default") kind = "none";
  if (!r.check(kind == "none" || kind == "linear" || kind == "yarn" || kind == "llama3",
               kind_key.empty() ? "position_embedding_type" : kind_key, prefix, ".rope_scaling type \"", kind,
               "\" is not supported; use linear, yarn or llama3 (or null)"))
    return;

  // A value from rope_scaling.<nested> or the flat MindFormers key, which must agree.
  auto value = [&](const char* nested_key, std::initializer_list<const char*> flat) -> std::optional<double> {
    std::optional<double> from_nested;
    const std::string nested_path = std::string("rope_scaling.") + nested_key;
    if (nested && nested->contains(nested_key) && !(*nested)[nested_key].is_null() &&
        r.check((*nested)[nested_key].is_number(), nested_path, prefix, ".rope_scaling.", nested_key,
                " must be a number, got ", (*nested)[nested_key].dump()))
      from_nested = (*nested)[nested_key].get<double>();
    std::string flat_key;
    const Json* f = r.find(flat, &flat_key);
    std::optional<double> from_flat;
    if (f && r.check(f->is_number(), flat_key, r.path(flat_key), " must be a number, got ", f->dump()))
      from_flat = f->get<double>();
    if (from_nested && from_flat)
      r.check(*from_nested == *from_flat, flat_key, prefix, ".rope_scaling.", nested_key, " = ", *from_nested, " and ",
              r.path(flat_key), " = ", *from_flat, " disagree; keep one");
    return from_nested ? from_nested : from_flat;
  };
  auto factor = value("factor", {"rotary_scaling_factor"});
  auto original = value("original_max_position_embeddings", {"original_max_position_embeddings"});
  auto beta_fast = value("beta_fast", {"beta_fast"});
  auto beta_slow = value("beta_slow", {"beta_slow"});
  auto mscale = value("mscale", {"mscale"});
  auto mscale_all_dim = value("mscale_all_dim", {"mscale_all_dim"});
  auto low = value("low_freq_factor", {});
  auto high = value("high_freq_factor", {});
  if (kind == "none") return;
  if (!r.check(factor && *factor > 0, "rope_scaling.factor", prefix, ".rope_scaling.factor (or ", prefix,
               ".rotary_scaling_factor) must be given and positive for ", kind, " rope scaling"))
    return;
  if (kind == "llama3") {
    a.llama3_rope.enabled = true;
    a.llama3_rope.factor = *factor;
    a.llama3_rope.low_freq_factor = low.value_or(1.0);
    a.llama3_rope.high_freq_factor = high.value_or(4.0);
    a.llama3_rope.original_max_position_embeddings = static_cast<int64_t>(original.value_or(8192));
    r.check(a.llama3_rope.high_freq_factor > a.llama3_rope.low_freq_factor, "rope_scaling.high_freq_factor", prefix,
            ".rope_scaling.high_freq_factor must exceed low_freq_factor");
    return;
  }
  a.rope_scaling.kind = kind == "linear" ? ops::RopeScaling::Kind::linear : ops::RopeScaling::Kind::yarn;
  a.rope_scaling.factor = *factor;
  if (kind == "yarn") {
    // DeepSeek-V3's pre-training context when the config does not say (its HF config does).
    a.rope_scaling.original_max_position_embeddings = static_cast<int64_t>(original.value_or(4096));
    a.rope_scaling.beta_fast = beta_fast.value_or(32.0);
    a.rope_scaling.beta_slow = beta_slow.value_or(1.0);
    a.rope_scaling.mscale = mscale.value_or(0.0);
    a.rope_scaling.mscale_all_dim = mscale_all_dim.value_or(0.0);
    if (nested && nested->contains("attention_factor") && (*nested)["attention_factor"].is_number())
      a.rope_scaling.attention_factor = (*nested)["attention_factor"].get<double>();
    if (nested && nested->contains("truncate") && (*nested)["truncate"].is_boolean())
      a.rope_scaling.truncate = (*nested)["truncate"].get<bool>();
  }
}

void read_moe(KeyReader& r, ModelArgs& a, const std::string& prefix, bool architecture_known) {
  std::string experts_key;
  if (auto e = r.get_int({"n_routed_experts", "num_experts", "num_moe_experts"}, &experts_key)) {
    if (architecture_known)
      r.check(a.model_type == "qwen3_moe" || a.model_type == "deepseek_v3" || *e == 0, experts_key,
              r.path(experts_key), " = ", *e, ": model_type ", a.model_type,
              " is dense; use model_type qwen3_moe or deepseek_v3 for a mixture of experts");
    a.num_experts = *e;
  }
  a.moe_topk = r.get_int({"num_experts_per_tok", "moe_router_topk"}).value_or(a.moe_topk);
  a.moe_intermediate_size = r.get_int({"moe_intermediate_size", "moe_ffn_hidden_size"}).value_or(a.moe_intermediate_size);
  const int64_t shared = r.get_int({"n_shared_experts", "shared_expert_num"}).value_or(a.model_type == "deepseek_v3" ? 1 : 0);
  a.shared_expert_intermediate_size =
      r.get_int({"moe_shared_expert_intermediate_size"}).value_or(shared * a.moe_intermediate_size);
  a.first_k_dense_replace = r.get_int({"first_k_dense_replace"}).value_or(a.first_k_dense_replace);
  a.moe_layer_freq = r.get_int({"moe_layer_freq"}).value_or(1);
  a.decoder_sparse_step = r.get_int({"decoder_sparse_step"}).value_or(1);
  a.mlp_only_layers = r.get_ints({"mlp_only_layers"}).value_or(std::vector<int64_t>{});
  a.moe_router_num_groups = r.get_int({"n_group", "moe_router_num_groups"}).value_or(a.moe_router_num_groups);
  a.moe_router_group_topk = r.get_int({"topk_group", "moe_router_group_topk"}).value_or(a.moe_router_group_topk);
  a.routed_scaling_factor =
      r.get_double({"routed_scaling_factor", "moe_router_topk_scaling_factor"}).value_or(a.routed_scaling_factor);
  std::string score_key;
  if (auto s = r.get_string({"scoring_func", "moe_router_score_function"}, &score_key))
    if (r.check(*s == "softmax" || *s == "sigmoid", score_key, r.path(score_key), " = \"", *s,
                "\" is not supported; use softmax or sigmoid"))
      a.score_function = *s == "sigmoid" ? ScoreFunction::sigmoid : ScoreFunction::softmax;
  if (auto m = r.get_string({"topk_method"}))
    if (r.check(*m == "noaux_tc" || *m == "greedy" || *m == "group_limited_greedy", "topk_method", prefix,
                ".topk_method = \"", *m, "\" is not supported; use noaux_tc, greedy or group_limited_greedy"))
      a.topk_method = *m;
  if (a.topk_method == "greedy") a.moe_router_num_groups = 0;
  a.norm_topk_prob = r.get_bool({"norm_topk_prob"}).value_or(a.norm_topk_prob);
  a.moe_router_enable_expert_bias = r.get_bool({"balance_via_topk_bias", "moe_router_enable_expert_bias"})
                                        .value_or(a.topk_method == "noaux_tc");
  a.moe_router_bias_update_rate =
      r.get_double({"topk_bias_update_rate", "moe_router_bias_update_rate"}).value_or(1e-3);
  if (auto types = r.get_strings({"moe_router_load_balancing_type"})) {
    bool ok = true;
    for (const auto& t : *types)
      ok &= r.check(t == "aux_loss" || t == "seq_aux_loss" || t == "gbs_aux_loss" || t == "none",
                    "moe_router_load_balancing_type", prefix, ".moe_router_load_balancing_type \"", t,
                    "\" is not supported; use aux_loss, seq_aux_loss, gbs_aux_loss or none");
    if (ok) a.moe_load_balancing_types = *types;
  } else if (auto seq = r.get_bool({"seq_aux"})) {
    a.moe_load_balancing_types = {*seq ? "seq_aux_loss" : "aux_loss"};
  }
  std::string coeff_key;
  if (auto coeffs = r.get_doubles({"moe_aux_loss_coeff", "router_aux_loss_coef", "aux_loss_alpha"}, &coeff_key)) {
    bool ok = r.check(coeffs->size() == 1 || coeffs->size() == a.moe_load_balancing_types.size(), coeff_key,
                      r.path(coeff_key), " has ", coeffs->size(), " values but ", prefix,
                      ".moe_router_load_balancing_type names ", a.moe_load_balancing_types.size(),
                      " losses; give one coefficient per loss (or one for all)");
    for (double c : *coeffs) ok &= r.check(c >= 0, coeff_key, r.path(coeff_key), " = ", c, " must not be negative");
    if (ok) a.moe_aux_loss_coeffs = *coeffs;
  }
  if (!a.moe_load_balancing_types.empty() && a.moe_aux_loss_coeffs.empty()) a.moe_aux_loss_coeffs = {0.0};
}

// Dense MLP layers need their width; a size not given rather than a value written wrong.
void require_dense_width(const ModelArgs& a, const std::string& p, std::vector<ModelIssue>& gaps) {
  if (a.has_dense_layers() && a.intermediate_size <= 0)
    gaps.push_back({p + ".intermediate_size",
                    concat(p, ".intermediate_size (or ", p, ".ffn_hidden_size) is required: the model has dense MLP layers",
                           a.num_experts > 0 ? " (layers below first_k_dense_replace)" : "")});
}

}  // namespace

const std::vector<ArchitectureInfo>& supported_architectures() { return kArchitectures; }

bool ModelArgs::has_dense_layers() const {
  for (int64_t i = 0; i < num_layers; ++i)
    if (!is_moe_layer(i)) return true;
  return false;
}

namespace {

// .inf and .nan are never hyper-parameters (a non-finite rope_theta or init std trains to NaN):
// one rule for every number of the section, nested ones included.
void reject_non_finite(const Json& v, const std::string& path, std::vector<ModelIssue>& errors) {
  if (v.is_number_float() && !std::isfinite(v.get<double>()))
    errors.push_back({path, concat(path, " = ", v.get<double>(), " is not a finite number; write a finite value")});
  else if (v.is_object())
    for (auto it = v.begin(); it != v.end(); ++it) reject_non_finite(it.value(), path + "." + it.key(), errors);
  else if (v.is_array())
    for (std::size_t i = 0; i < v.size(); ++i) reject_non_finite(v[i], concat(path, "[", i, "]"), errors);
}

}  // namespace

ModelReading read_model_args(const Json& section, const std::string& prefix) {
  ModelReading out;
  ModelArgs& a = out.args;
  reject_non_finite(section, prefix, out.errors);
  KeyReader r(section, prefix, out.errors);
  const Json& s = section.is_object() ? section : empty_section();
  const bool known = resolve_architecture(r, a, prefix, out.gaps);
  out.architecture_known = known;
  if (known) apply_architecture_defaults(a);
  std::vector<std::string> nested_unknown;

  // The sizes that define the model. Without a known architecture they are facts, not requirements.
  bool sizes_given = true;
  auto required = [&](std::initializer_list<const char*> names) -> int64_t {
    if (std::optional<int64_t> v = r.get_int(names)) return *v;
    sizes_given = false;
    std::string all;
    for (const char* n : names) all += (all.empty() ? "" : " or ") + r.path(n);
    if (known && !present(s, names))
      out.gaps.push_back({r.path(*names.begin()), concat(all, " is required for model_type ", a.model_type,
                                                         "; add it to the model section (the HF config.json value)")});
    return 0;
  };
  a.vocab_size = required({"vocab_size"});
  a.hidden_size = required({"hidden_size"});
  a.num_layers = required({"num_hidden_layers", "num_layers"});
  a.num_attention_heads = required({"num_attention_heads"});
  a.num_key_value_heads = r.get_int({"num_key_value_heads", "num_query_groups"}).value_or(a.num_attention_heads);
  r.accept({"group_query_attention"});
  std::optional<int64_t> head_dim = r.get_int({"head_dim", "kv_channels"});
  a.head_dim = head_dim.value_or(a.num_attention_heads > 0 ? a.hidden_size / a.num_attention_heads : 0);
  if (!head_dim && known && a.model_type != "deepseek_v3" && a.hidden_size > 0 && a.num_attention_heads > 0)
    r.check(a.hidden_size % a.num_attention_heads == 0, "hidden_size", prefix, ".hidden_size = ", a.hidden_size,
            " is not a multiple of ", prefix, ".num_attention_heads = ", a.num_attention_heads, "; set ", prefix,
            ".head_dim explicitly");
  std::optional<int64_t> ffn = r.get_int({"intermediate_size", "ffn_hidden_size"});
  a.intermediate_size = ffn.value_or(0);
  a.max_position_embeddings = r.get_int({"max_position_embeddings"}).value_or(a.max_position_embeddings);
  a.seq_length = r.get_int({"seq_length"}).value_or(0);

  // ---- norms, activation, biases (other_training_features.md §3) ----
  if (auto n = r.get_string({"normalization"}))
    if (r.check(*n == "RMSNorm" || *n == "LayerNorm", "normalization", prefix, ".normalization = \"", *n,
                "\" is not supported; only \"RMSNorm\" or \"LayerNorm\" can be set"))
      a.normalization = *n == "LayerNorm" ? nn::NormKind::layer_norm : nn::NormKind::rms_norm;
  if (auto fused = r.get_bool({"fused_norm"}))
    r.check(*fused, "fused_norm", prefix,
            ".fused_norm = False is not supported: get_norm_cls supports only the fused "
            "implementation; remove the key or set it to True");
  a.norm_epsilon = r.get_double({"rms_norm_eps", "layernorm_epsilon", "layer_norm_eps"}).value_or(1e-6);
  if (auto act = r.get_string({"hidden_act"})) {
    if (r.check(*act == "silu" || *act == "gelu" || *act == "fusedswiglu", "hidden_act", prefix, ".hidden_act = \"",
                *act, "\" is not supported; only gelu, silu and fusedswiglu are registered")) {
      a.hidden_act = *act;
      a.activation = *act == "gelu" ? nn::Activation::gelu
                     : *act == "fusedswiglu" ? nn::Activation::fusedswiglu : nn::Activation::silu;
    }
  }
  a.gated_linear_unit = r.get_bool({"gated_linear_unit"}).value_or(true);
  a.attention_bias = r.get_bool({"attention_bias", "add_qkv_bias"}).value_or(false);
  a.mlp_bias = r.get_bool({"mlp_bias"}).value_or(false);
  std::string qk_key;
  if (auto qk = r.get_bool({"use_qk_norm", "qk_layernorm"}, &qk_key)) {
    // MLA always normalises its latents (q_layernorm / kv_layernorm); MindFormers DeepSeek
    // configs say so with qk_layernorm: True.
    if (a.model_type == "deepseek_v3")
      r.check(*qk, qk_key, r.path(qk_key), " = False: DeepSeek-V3 attention always normalises "
              "its q and kv latents; remove the key or set it to True");
    else
      a.qk_layernorm = *qk;
  }
  a.tie_word_embeddings = r.get_bool({"tie_word_embeddings"}).value_or(false);
  a.init_std = r.get_double({"initializer_range", "init_method_std"}).value_or(0.02);
  if (auto d = r.get_double({"attention_dropout"}))
    r.check(*d == 0.0, "attention_dropout", prefix, ".attention_dropout = ", *d, " is not supported; set it to 0.0");
  if (auto d = r.get_double({"hidden_dropout"}))
    r.check(*d == 0.0, "hidden_dropout", prefix, ".hidden_dropout = ", *d, " is not supported; set it to 0.0");
  if (auto sw = r.get_bool({"use_sliding_window"}))
    r.check(!*sw, "use_sliding_window", prefix, ".use_sliding_window = True is not supported; set it to False");
  r.accept({"sliding_window"});

  read_rope(r, a, prefix, nested_unknown);

  // ---- MLA ----
  if (auto mla = r.get_bool({"multi_latent_attention"})) {
    if (known)
      r.check(*mla == (a.model_type == "deepseek_v3"), "multi_latent_attention", prefix,
              ".multi_latent_attention = ", *mla ? "True" : "False", " contradicts model_type ", a.model_type,
              *mla ? " (only deepseek_v3 uses MLA)" : " (DeepSeek-V3 attention is MLA)");
    // As written even when it contradicts the architecture: what depends on MLA (Muon) then
    // judges the file as the user wrote it.
    a.multi_latent_attention = *mla;
  } else if (!known) {
    // Without an architecture to say so, an MLA model shows by its latent rank.
    a.multi_latent_attention = present(s, {"kv_lora_rank"});
  }
  r.accept({"mla_qkv_concat"});
  if (a.multi_latent_attention) {
    // "q_lora_rank": null (HF) or 0 means no q compression.
    if (s.contains("q_lora_rank") && s["q_lora_rank"].is_null()) a.q_lora_rank = 0;
    a.q_lora_rank = r.get_int({"q_lora_rank"}).value_or(a.q_lora_rank);
    a.kv_lora_rank = r.get_int({"kv_lora_rank"}).value_or(a.kv_lora_rank);
    a.qk_nope_head_dim = r.get_int({"qk_nope_head_dim", "qk_head_dim"}).value_or(a.qk_nope_head_dim);
    a.qk_rope_head_dim = r.get_int({"qk_rope_head_dim", "qk_pos_emb_head_dim"}).value_or(a.qk_rope_head_dim);
    a.v_head_dim = r.get_int({"v_head_dim"}).value_or(a.v_head_dim);
  }

  // ---- MoE ----
  read_moe(r, a, prefix, known);
  a.mtp_num_layers = r.get_int({"num_nextn_predict_layers", "mtp_num_layers"}).value_or(0);
  a.mtp_loss_scaling_factor = r.get_double({"mtp_loss_scaling_factor"}).value_or(0.1);

  // ---- precision (other_training_features.md §4) ----
  a.params_dtype = r.get_dtype({"params_dtype"}).value_or(DType::f32);
  a.compute_dtype = r.get_dtype({"compute_dtype"}).value_or(DType::bf16);
  a.layernorm_compute_dtype = r.get_dtype({"layernorm_compute_dtype"}).value_or(DType::f32);
  a.softmax_compute_dtype = r.get_dtype({"softmax_compute_dtype"}).value_or(DType::f32);
  a.rotary_dtype = r.get_dtype({"rotary_dtype"}).value_or(DType::f32);
  a.router_dense_type = r.get_dtype({"router_dense_type", "moe_router_dtype"}).value_or(DType::f32);
  a.use_flash_attention = r.get_bool({"use_flash_attention"}).value_or(true);
  a.use_attn_mask_compression = r.get_bool({"use_attn_mask_compression"}).value_or(false);
  r.accept({"use_eod_attn_mask_compression"});

  for (const char* key : kHfExtras)
    if (s.contains(key)) a.hf_extras[key] = s[key];
  r.accept({"quantization_config"});
  if (s.contains("quantization_config") && !s["quantization_config"].is_null())
    out.warnings.push_back({r.path("quantization_config"),
                            concat(prefix, ".quantization_config is ignored: Loom trains unquantised weights (FP8 "
                                           "checkpoints must be dequantised to BF16 first)")});
  for (const char* key : kHfExtras) r.accept({key});
  if (a.softmax_compute_dtype != DType::f32 && a.softmax_compute_dtype != DType::f64)
    out.warnings.push_back({r.path("softmax_compute_dtype"),
                            concat(prefix, ".softmax_compute_dtype = ", dtype_name(a.softmax_compute_dtype),
                                   ": the CPU attention kernel always computes its softmax in float32")});

  a.unknown_keys = r.unknown_keys();
  a.unknown_keys.insert(a.unknown_keys.end(), nested_unknown.begin(), nested_unknown.end());
  out.known_keys.assign(r.known_keys().begin(), r.known_keys().end());
  for (const char* k : kRopeScalingKeys) out.known_keys.push_back(std::string("rope_scaling.") + k);
  // Cross-field rules need the sizes; a section without them has its gaps reported instead.
  if (known && sizes_given) a.validate(prefix, out.errors, out.gaps);
  else if (known) require_dense_width(a, prefix, out.gaps);
  return out;
}

ModelArgs ModelArgs::from_json(const Json& section, const std::string& prefix, bool warn_unknown) {
  ModelReading reading = read_model_args(section, prefix);
  std::string all;
  for (const auto* list : {&reading.errors, &reading.gaps})
    for (const auto& issue : *list) all += (all.empty() ? "" : "\n") + issue.message;
  if (!all.empty()) throw ConfigError(all);
  for (const auto& w : reading.warnings) log::warn(w.message);
  const ModelArgs& a = reading.args;
  if (warn_unknown && !a.unknown_keys.empty()) {
    std::string list;
    for (const auto& k : a.unknown_keys) list += (list.empty() ? "" : ", ") + k;
    log::warn(prefix, ": ", a.unknown_keys.size(), " unknown key", a.unknown_keys.size() > 1 ? "s" : "",
              " ignored by the ", a.model_type, " model: ", list, " (check the spelling against docs/models.md)");
  }
  return std::move(reading.args);
}

void ModelArgs::validate(const std::string& p) const {
  std::vector<ModelIssue> errors, gaps;
  validate(p, errors, gaps);
  std::string all;
  for (const auto* list : {&errors, &gaps})
    for (const auto& issue : *list) all += (all.empty() ? "" : "\n") + issue.message;
  if (!all.empty()) throw ConfigError(all);
}

void ModelArgs::validate(const std::string& p, std::vector<ModelIssue>& errors, std::vector<ModelIssue>& gaps) const {
  auto check = [&](bool ok, const char* key, const auto&... parts) {
    if (!ok) errors.push_back({p + "." + key, concat(parts...)});
    return ok;
  };
  auto positive = [&](int64_t v, const char* key) { check(v > 0, key, p, ".", key, " = ", v, " must be positive"); };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(max_position_embeddings, "max_position_embeddings");
  if (num_key_value_heads > 0)
    check(num_attention_heads % num_key_value_heads == 0, "num_key_value_heads", p, ".num_attention_heads = ",
          num_attention_heads, " is not a multiple of ", p, ".num_key_value_heads = ", num_key_value_heads,
          "; grouped-query attention needs whole groups");
  check(norm_epsilon > 0, "rms_norm_eps", p, ".rms_norm_eps = ", norm_epsilon, " must be positive");
  check(rope_theta > 1, "rope_theta", p, ".rope_theta = ", rope_theta,
        " must be greater than 1 (the rotary base; HF models use 10000 to 1000000)");
  check(init_std >= 0 && std::isfinite(init_std), "initializer_range", p, ".initializer_range = ", init_std,
        " must be a finite number >= 0");
  check(num_layers <= kMaxLayers, "num_hidden_layers", p, ".num_hidden_layers = ", num_layers,
        " is more layers than Loom builds (at most ", kMaxLayers, ")");
  if (multi_latent_attention) {
    positive(kv_lora_rank, "kv_lora_rank");
    positive(qk_nope_head_dim, "qk_nope_head_dim");
    positive(qk_rope_head_dim, "qk_rope_head_dim");
    positive(v_head_dim, "v_head_dim");
    check(q_lora_rank >= 0, "q_lora_rank", p, ".q_lora_rank = ", q_lora_rank, " must be null, 0 or positive");
    check(qk_rope_head_dim % 2 == 0, "qk_rope_head_dim", p, ".qk_rope_head_dim = ", qk_rope_head_dim, " must be even");
  } else {
    positive(head_dim, "head_dim");
    check(head_dim % 2 == 0, "head_dim", p, ".head_dim = ", head_dim, " must be even for rotary embeddings");
  }
  if (num_experts > 0) {
    check(moe_topk >= 1 && moe_topk <= num_experts, "num_experts_per_tok", p, ".num_experts_per_tok = ", moe_topk,
          " must be between 1 and ", p, ".n_routed_experts = ", num_experts);
    positive(moe_intermediate_size, "moe_intermediate_size");
    check(gated_linear_unit, "gated_linear_unit", p,
          ".gated_linear_unit = False: routed experts are always gated (weight1 holds gate and up); remove the key");
    check(first_k_dense_replace >= 0 && first_k_dense_replace <= num_layers, "first_k_dense_replace", p,
          ".first_k_dense_replace = ", first_k_dense_replace, " must be between 0 and ", p, ".num_hidden_layers = ",
          num_layers);
    positive(moe_layer_freq, "moe_layer_freq");
    positive(decoder_sparse_step, "decoder_sparse_step");
    if (moe_router_num_groups > 1 &&
        check(num_experts % moe_router_num_groups == 0, "n_group", p, ".n_group = ", moe_router_num_groups,
              " does not divide ", p, ".n_routed_experts = ", num_experts) &&
        check(moe_router_group_topk >= 1 && moe_router_group_topk <= moe_router_num_groups, "topk_group", p,
              ".topk_group = ", moe_router_group_topk, " must be between 1 and ", p, ".n_group = ",
              moe_router_num_groups))
      check(moe_topk <= moe_router_group_topk * (num_experts / moe_router_num_groups), "num_experts_per_tok", p,
            ".num_experts_per_tok = ", moe_topk, " exceeds the ",
            moe_router_group_topk * (num_experts / moe_router_num_groups), " experts of the ", moe_router_group_topk,
            " groups kept (topk_group × n_routed_experts / n_group)");
    check(shared_expert_intermediate_size >= 0, "moe_shared_expert_intermediate_size", p,
          ".moe_shared_expert_intermediate_size = ", shared_expert_intermediate_size, " must not be negative");
  }
  require_dense_width(*this, p, gaps);
  check(mtp_num_layers >= 0, "num_nextn_predict_layers", p, ".num_nextn_predict_layers = ", mtp_num_layers,
        " must not be negative");
  for (auto [d, key] : {std::pair{params_dtype, "params_dtype"}, std::pair{compute_dtype, "compute_dtype"}})
    check(is_floating(d), key, p, ".", key, " must be a floating dtype");
  // Products of sizes (parameter counts) must fit 64 bits, or every later size computed from them
  // wraps around; the accounting multiplies them with checks and names the fields.
  if (errors.empty() && gaps.empty()) {
    try {
      (void)count_parameters(*this);
    } catch (const SizeOverflow& e) {
      errors.push_back({p + "." + e.field, concat(p, ": ", e.what())});
    }
  }
}

}  // namespace loom::models
