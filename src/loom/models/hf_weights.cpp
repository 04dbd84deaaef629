#include "loom/models/hf_weights.h"

#include <regex>
#include <set>
#include <sstream>

#include "loom/core/error.h"
#include "loom/core/log.h"

namespace loom::models {

namespace {

using Kind = WeightRule::Kind;

class RuleBuilder {
 public:
  explicit RuleBuilder(const ModelArgs& a) : a_(a) {}

  void copy(const std::string& loom, const std::string& hf) { rules.push_back({Kind::copy, loom, {hf}}); }

  void linear(const std::string& loom, const std::string& hf, bool bias) {
    copy(loom + ".weight", hf + ".weight");
    if (bias) copy(loom + ".bias", hf + ".bias");
  }

  void gated_mlp(const std::string& lp, const std::string& hp, bool bias) {
    rules.push_back({Kind::concat_rows, lp + "linear_fc1.weight", {hp + "gate_proj.weight", hp + "up_proj.weight"}});
    if (bias) rules.push_back({Kind::concat_rows, lp + "linear_fc1.bias", {hp + "gate_proj.bias", hp + "up_proj.bias"}});
    linear(lp + "linear_fc2", hp + "down_proj", bias);
  }

  void layer(const std::string& lp, const std::string& hp, int64_t index) {
    copy(lp + "input_layernorm.weight", hp + "input_layernorm.weight");
    const std::string la = lp + "self_attention.", ha = hp + "self_attn.";
    const bool b = a_.attention_bias;
    if (a_.multi_latent_attention) {
      if (a_.q_lora_rank > 0) {
        linear(la + "linear_qa", ha + "q_a_proj", b);
        copy(la + "q_layernorm.weight", ha + "q_a_layernorm.weight");
        linear(la + "linear_qb", ha + "q_b_proj", false);
      } else {
        linear(la + "linear_q", ha + "q_proj", false);
      }
      linear(la + "linear_kva", ha + "kv_a_proj_with_mqa", b);
      copy(la + "kv_layernorm.weight", ha + "kv_a_layernorm.weight");
      linear(la + "linear_kvb", ha + "kv_b_proj", false);
      linear(la + "linear_proj", ha + "o_proj", b);
    } else {
      linear(la + "linear_q", ha + "q_proj", b);
      linear(la + "linear_k", ha + "k_proj", b);
      linear(la + "linear_v", ha + "v_proj", b);
      linear(la + "linear_proj", ha + "o_proj", b);
      if (a_.qk_layernorm) {
        copy(la + "q_layernorm.weight", ha + "q_norm.weight");
        copy(la + "k_layernorm.weight", ha + "k_norm.weight");
      }
    }
    copy(lp + "pre_mlp_layernorm.weight", hp + "post_attention_layernorm.weight");
    const std::string lm = lp + "mlp.", hm = hp + "mlp.";
    if (!a_.is_moe_layer(index)) {
      gated_mlp(lm, hm, a_.mlp_bias);
      return;
    }
    copy(lm + "router.weight", hm + "gate.weight");
    if (a_.moe_router_enable_expert_bias) copy(lm + "router.expert_bias", hm + "gate.e_score_correction_bias");
    WeightRule w1{Kind::experts_gate_up, lm + "experts.weight1", {}}, w2{Kind::experts_down, lm + "experts.weight2", {}};
    for (const char* part : {"gate_proj", "up_proj"})
      for (int64_t e = 0; e < a_.num_experts; ++e)
        w1.hf.push_back(hm + "experts." + std::to_string(e) + "." + part + ".weight");
    for (int64_t e = 0; e < a_.num_experts; ++e) w2.hf.push_back(hm + "experts." + std::to_string(e) + ".down_proj.weight");
    rules.push_back(w1);
    rules.push_back(w2);
    if (a_.shared_expert_intermediate_size > 0) gated_mlp(lm + "shared_experts.", hm + "shared_experts.", a_.mlp_bias);
  }

  std::vector<WeightRule> rules;

 private:
  const ModelArgs& a_;
};

Tensor concat_rows(const Tensor& a, const Tensor& b) {
  Shape s = a.shape();
  s[0] = a.size(0) + b.size(0);
  Tensor out = Tensor::empty(s, a.dtype());
  out.narrow(0, 0, a.size(0)).copy_(a);
  out.narrow(0, a.size(0), b.size(0)).copy_(b);
  return out;
}

std::string shape_list(const std::vector<Tensor>& ts) {
  std::ostringstream os;
  for (size_t i = 0; i < ts.size(); ++i) os << (i ? ", " : "") << ts[i].shape().str();
  return os.str();
}

[[noreturn]] void report(const std::vector<std::string>& problems, const std::string& source, const std::string& what) {
  std::ostringstream os;
  os << "cannot convert " << source << " " << what << " (" << problems.size() << " problem"
     << (problems.size() > 1 ? "s" : "") << "):";
  for (size_t i = 0; i < problems.size() && i < 40; ++i) os << "\n  " << problems[i];
  if (problems.size() > 40) os << "\n  ... and " << problems.size() - 40 << " more";
  os << "\nCheck that the weights belong to this model configuration (model_type, num_hidden_layers, "
        "n_routed_experts, q_lora_rank, tie_word_embeddings, num_nextn_predict_layers).";
  throw CheckpointError(os.str());
}

}  // namespace

std::vector<WeightRule> weight_rules(const ModelArgs& a) {
  RuleBuilder r(a);
  r.copy("embedding.word_embeddings.weight", "model.embed_tokens.weight");
  for (int64_t i = 0; i < a.num_layers; ++i)
    r.layer("decoder.layers." + std::to_string(i) + ".", "model.layers." + std::to_string(i) + ".", i);
  r.copy("decoder.final_layernorm.weight", "model.norm.weight");
  if (!a.tie_word_embeddings) r.copy("output_layer.weight", "lm_head.weight");
  for (int64_t k = 0; k < a.mtp_num_layers; ++k) {
    const std::string lp = "mtp.layers." + std::to_string(k) + ".";
    const std::string hp = "model.layers." + std::to_string(a.num_layers + k) + ".";
    r.copy(lp + "enorm.weight", hp + "enorm.weight");
    r.copy(lp + "hnorm.weight", hp + "hnorm.weight");
    r.copy(lp + "eh_proj.weight", hp + "eh_proj.weight");
    r.layer(lp + "transformer_layer.", hp, a.num_layers + k);
    r.copy(lp + "final_layernorm.weight", hp + "shared_head.norm.weight");
  }
  return r.rules;
}

std::vector<std::pair<std::string, Tensor>> to_hf_weights(const ModelArgs& a, const std::map<std::string, Tensor>& loom,
                                                          const std::string& source) {
  std::vector<std::pair<std::string, Tensor>> out;
  std::vector<std::string> problems;
  std::set<std::string> used;
  for (const WeightRule& rule : weight_rules(a)) {
    auto it = loom.find(rule.loom);
    if (it == loom.end()) {
      problems.push_back("missing: " + rule.loom);
      continue;
    }
    used.insert(rule.loom);
    const Tensor& t = it->second;
    switch (rule.kind) {
      case Kind::copy:
        out.emplace_back(rule.hf[0], t);
        break;
      case Kind::concat_rows: {
        const int64_t half = t.size(0) / 2;
        out.emplace_back(rule.hf[0], t.narrow(0, 0, half).contiguous());
        out.emplace_back(rule.hf[1], t.narrow(0, half, half).contiguous());
        break;
      }
      case Kind::experts_gate_up: {
        const int64_t E = t.size(0), F = t.size(2) / 2;
        for (int64_t e = 0; e < E; ++e) out.emplace_back(rule.hf[e], t.select(0, e).narrow(1, 0, F).transpose(0, 1).contiguous());
        for (int64_t e = 0; e < E; ++e)
          out.emplace_back(rule.hf[E + e], t.select(0, e).narrow(1, F, F).transpose(0, 1).contiguous());
        break;
      }
      case Kind::experts_down:
        for (int64_t e = 0; e < t.size(0); ++e) out.emplace_back(rule.hf[e], t.select(0, e).transpose(0, 1).contiguous());
        break;
    }
  }
  for (const auto& [name, t] : loom)
    if (!used.count(name)) problems.push_back("unexpected: " + name + " " + t.shape().str());
  if (!problems.empty()) report(problems, source, "to HF names");
  // HF DeepSeek-V3 always has the routing correction bias; a Loom model without one routes as
  // if it were zero.
  if (a.model_type == "deepseek_v3" && !a.moe_router_enable_expert_bias)
    for (int64_t i = 0; i < a.num_layers + a.mtp_num_layers; ++i)
      if (a.is_moe_layer(i))
        out.emplace_back("model.layers." + std::to_string(i) + ".mlp.gate.e_score_correction_bias",
                         Tensor::zeros({a.num_experts}));
  // The MTP layers of HF DeepSeek-V3 checkpoints carry their own copies of the shared matrices.
  for (int64_t k = 0; k < a.mtp_num_layers; ++k) {
    const std::string hp = "model.layers." + std::to_string(a.num_layers + k) + ".";
    out.emplace_back(hp + "embed_tokens.weight", loom.at("embedding.word_embeddings.weight"));
    out.emplace_back(hp + "shared_head.head.weight",
                     loom.at(a.tie_word_embeddings ? "embedding.word_embeddings.weight" : "output_layer.weight"));
  }
  return out;
}

std::map<std::string, Tensor> from_hf_weights(const ModelArgs& a, const std::map<std::string, Tensor>& hf,
                                              const std::string& source) {
  std::map<std::string, Tensor> out;
  std::vector<std::string> problems;
  std::set<std::string> used;
  auto get = [&](const std::string& name) -> const Tensor* {
    auto it = hf.find(name);
    if (it == hf.end()) {
      problems.push_back("missing: " + name);
      return nullptr;
    }
    used.insert(name);
    return &it->second;
  };
  for (const WeightRule& rule : weight_rules(a)) {
    std::vector<Tensor> parts;
    bool complete = true;
    for (const auto& n : rule.hf) {
      const Tensor* t = get(n);
      if (t) parts.push_back(*t);
      else complete = false;
    }
    if (!complete) continue;
    switch (rule.kind) {
      case Kind::copy:
        out[rule.loom] = parts[0];
        break;
      case Kind::concat_rows:
        if (parts[0].shape() != parts[1].shape()) {
          problems.push_back("shape mismatch: " + rule.hf[0] + " and " + rule.hf[1] + " are " + shape_list(parts));
          break;
        }
        out[rule.loom] = concat_rows(parts[0], parts[1]);
        break;
      case Kind::experts_gate_up: {
        const int64_t E = static_cast<int64_t>(parts.size() / 2), F = parts[0].size(0), D = parts[0].size(1);
        Tensor w = Tensor::empty({E, D, 2 * F}, parts[0].dtype());
        for (int64_t e = 0; e < E; ++e) {
          if (parts[e].shape() != Shape({F, D}) || parts[E + e].shape() != Shape({F, D})) {
            problems.push_back("shape mismatch: expert " + std::to_string(e) + " of " + rule.loom + ": " +
                               shape_list({parts[e], parts[E + e]}) + ", expected [" + std::to_string(F) + ", " +
                               std::to_string(D) + "]");
            continue;
          }
          w.select(0, e).narrow(1, 0, F).copy_(parts[e].transpose(0, 1));
          w.select(0, e).narrow(1, F, F).copy_(parts[E + e].transpose(0, 1));
        }
        out[rule.loom] = w;
        break;
      }
      case Kind::experts_down: {
        const int64_t E = static_cast<int64_t>(parts.size()), D = parts[0].size(0), F = parts[0].size(1);
        Tensor w = Tensor::empty({E, F, D}, parts[0].dtype());
        for (int64_t e = 0; e < E; ++e) {
          if (parts[e].shape() != Shape({D, F})) {
            problems.push_back("shape mismatch: " + rule.hf[e] + " is " + parts[e].shape().str());
            continue;
          }
          w.select(0, e).copy_(parts[e].transpose(0, 1));
        }
        out[rule.loom] = w;
        break;
      }
    }
  }
  // Redundant HF tensors that carry no information for Loom.
  const std::regex rotary(R"(.*rotary_emb\.inv_freq)");
  const std::regex layer_re(R"(model\.layers\.(\d+)\.(.*))");
  for (const auto& [name, t] : hf) {
    if (used.count(name)) continue;
    std::smatch m;
    if (std::regex_match(name, rotary)) continue;
    if (name == "lm_head.weight" && a.tie_word_embeddings) continue;
    if (std::regex_match(name, m, layer_re)) {
      const int64_t layer = std::stoll(m[1].str());
      const std::string rest = m[2].str();
      if (layer >= a.num_layers && layer < a.num_layers + a.mtp_num_layers &&
          (rest == "embed_tokens.weight" || rest == "shared_head.head.weight"))
        continue;
      // DeepSeek-V3 MTP weights when the config trains without MTP (HF itself ignores them).
      if (a.model_type == "deepseek_v3" && layer >= a.num_layers + a.mtp_num_layers) continue;
      if (rest == "mlp.gate.e_score_correction_bias" && !a.moe_router_enable_expert_bias) {
        bool zero = true;
        for (double v : t.to_double_vector()) zero = zero && v == 0.0;
        if (zero) continue;
        problems.push_back("unexpected: " + name + " is non-zero but model.moe_router_enable_expert_bias is False "
                           "(enable it so routing matches the checkpoint)");
        continue;
      }
    }
    problems.push_back("unexpected: " + name + " " + t.shape().str());
  }
  if (!problems.empty()) report(problems, source, "from HF names");
  return out;
}

}  // namespace loom::models
