#include "loom/models/muon_info.h"

#include "loom/core/error.h"

namespace loom::models {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<MuonPiece> periodic_rows(const std::string& name, int64_t rows, int64_t cols,
                                     std::initializer_list<int64_t> parts, int64_t heads) {
  int64_t period = 0;
  for (int64_t p : parts) period += p;
  LOOM_CHECK(period * heads == rows, ShapeError, "Muon pieces of '", name, "': ", rows, " rows do not hold ",
             heads, " heads of ", period, " rows");
  std::vector<MuonPiece> out;
  int64_t row = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p : parts) {
      if (p > 0) out.push_back({row, p, 0, cols});
      row += p;
    }
  return out;
}

std::string attention_path(const ModelArgs& a, int64_t layer) {
  if (layer < a.num_layers) return "decoder.layers." + std::to_string(layer) + ".self_attention";
  return "mtp.layers." + std::to_string(layer - a.num_layers) + ".transformer_layer.self_attention";
}

}  // namespace

std::vector<MuonPiece> muon_pieces(const ModelArgs& a, const std::string& name, const Shape& shape) {
  LOOM_CHECK(shape.ndim() == 2 || shape.ndim() == 3, ShapeError, "Muon pieces of '", name, "': shape ",
             shape.str(), " is not a matrix or a batch of matrices");
  const int64_t rows = shape[shape.ndim() - 2], cols = shape[shape.ndim() - 1];
  if (ends_with(name, "mlp.experts.weight1"))  // [hidden, 2·ffn] per expert: gate | up columns
    return {{0, rows, 0, cols / 2}, {0, rows, cols / 2, cols / 2}};
  if (ends_with(name, "mlp.linear_fc1.weight") || ends_with(name, "mlp.shared_experts.linear_fc1.weight"))
    return {{0, rows / 2, 0, cols}, {rows / 2, rows / 2, 0, cols}};  // gate rows | up rows
  if (a.multi_latent_attention) {
    const int64_t H = a.num_attention_heads;
    if (ends_with(name, "self_attention.linear_qb.weight") || ends_with(name, "self_attention.linear_q.weight"))
      return periodic_rows(name, rows, cols, {a.qk_nope_head_dim, a.qk_rope_head_dim}, H);
    if (ends_with(name, "self_attention.linear_kvb.weight"))
      return periodic_rows(name, rows, cols, {a.qk_nope_head_dim, a.v_head_dim}, H);
  }
  return {{0, rows, 0, cols}};
}

MuonModelFacts muon_model_facts(const ModelArgs& a) {
  MuonModelFacts f;
  f.multi_latent_attention = a.multi_latent_attention;
  if (!a.multi_latent_attention) return f;
  f.num_heads = a.num_attention_heads;
  f.qk_nope_head_dim = a.qk_nope_head_dim;
  f.qk_rope_head_dim = a.qk_rope_head_dim;
  f.v_head_dim = a.v_head_dim;
  f.q_lora_rank = a.q_lora_rank;
  for (int64_t l = 0; l < a.num_layers + a.mtp_num_layers; ++l) {
    QkClipLayerNames n;
    n.layer = l;
    n.attention_path = attention_path(a, l);
    n.q_up_name = n.attention_path + (a.q_lora_rank > 0 ? ".linear_qb.weight" : ".linear_q.weight");
    n.kv_up_name = n.attention_path + ".linear_kvb.weight";
    f.qk_clip_layers.push_back(n);
  }
  return f;
}

std::vector<QkClipObservation> take_qk_clip_observations(nn::CausalLM& model, const ModelArgs& a) {
  std::vector<QkClipObservation> out;
  MuonModelFacts facts = muon_model_facts(a);
  for (const QkClipLayerNames& n : facts.qk_clip_layers) {
    // By global path: a pipeline stage holds only its own layers (dist/pipeline.h).
    auto* attention = dynamic_cast<nn::AttentionLayer*>(model.find_module(n.attention_path));
    if (attention == nullptr) continue;
    nn::CoreAttention& core = attention->core_attention();
    QkClipObservation o;
    o.names = n;
    if (core.max_logits().defined()) o.max_logits = core.max_logits().to_float_vector();
    core.reset_max_logits();
    out.push_back(std::move(o));
  }
  return out;
}

}  // namespace loom::models
