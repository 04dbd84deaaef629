#include "loom/train/model_hooks.h"

#include <algorithm>
#include <span>

#include "loom/core/error.h"
#include "loom/models/muon_info.h"
#include "loom/nn/attention.h"
#include "loom/nn/core_attention.h"
#include "loom/nn/moe.h"
#include "loom/nn/router.h"
#include "loom/nn/transformer_layer.h"

namespace loom::train {

namespace {

// QK-clip inputs of this rank's heads (tensor parallelism splits them in contiguous blocks by
// rank): gathering in rank order restores the global head order.
void gather_heads(dist::ProcessGroup& tp, std::vector<optim::QkClipLayer>& layers) {
  if (tp.size() == 1) return;
  for (auto& l : layers) {
    std::vector<float> all(l.max_logits.size() * static_cast<size_t>(tp.size()));
    tp.all_gather(std::span<const float>(l.max_logits), std::span<float>(all));
    l.max_logits = std::move(all);
  }
}

// Per-head maxima over every rank that holds the same layers: the data-parallel and
// context-parallel ranks of this rank's pipeline stage (dp_replicate × fsdp; its tp ranks hold
// the same gathered heads). Other stages hold other layers.
void max_over_stage_replicas(dist::DeviceMesh& mesh, std::vector<optim::QkClipLayer>& layers) {
  // The ranks of one stage tracked the same layers in the same order (same model, same code path).
  std::vector<float> flat;
  for (const auto& l : layers) flat.insert(flat.end(), l.max_logits.begin(), l.max_logits.end());
  const int64_t n = static_cast<int64_t>(flat.size());
  for (const char* axis : {"dp_replicate", "fsdp"}) {
    dist::ProcessGroup& group = mesh.group(axis);
    if (group.size() == 1) continue;
    LOOM_CHECK(group.all_reduce_scalar(n, dist::ReduceOp::max) == n &&
                   group.all_reduce_scalar(n, dist::ReduceOp::min) == n,
               DistError, "QK-clip: ranks of one pipeline stage tracked different numbers of attention heads");
    group.all_reduce(std::span<float>(flat), dist::ReduceOp::max);
  }
  size_t k = 0;
  for (auto& l : layers)
    for (float& v : l.max_logits) v = flat[k++];
}

}  // namespace

ModelHooks::ModelHooks(const models::ModelArgs& args, nn::CausalLM& model, dist::ParallelModel& parallel)
    : args_(args), model_(model), parallel_(parallel) {}

optim::MuonModelInfo muon_model_info(const models::ModelArgs& args) {
  optim::MuonModelInfo info;
  info.multi_latent_attention = args.multi_latent_attention;
  info.mla.num_heads = args.num_attention_heads;
  info.mla.qk_nope_head_dim = args.qk_nope_head_dim;
  info.mla.qk_rope_head_dim = args.qk_rope_head_dim;
  info.mla.v_head_dim = args.v_head_dim;
  info.mla.q_lora_rank = args.q_lora_rank;
  // The model says how its fused weights split (models/muon_info), so the optimizer never
  // guesses from names: one rule covering every parameter.
  optim::MuonSplitSchema schema;
  schema.append({"*"}, [args](const std::string& name, int64_t rows, int64_t cols) {
    std::vector<optim::MuonBlock> blocks;
    for (const models::MuonPiece& p : models::muon_pieces(args, name, Shape{rows, cols}))
      blocks.push_back({p.row0, p.rows, p.col0, p.cols});
    return blocks;
  });
  info.schema = std::move(schema);
  return info;
}

const std::map<int64_t, std::vector<float>>& ModelHooks::step_max_logits() {
  if (max_logits_read_) return step_max_logits_;
  max_logits_read_ = true;
  // This rank's attention layers by their index in the whole model (a stage holds some).
  std::map<int64_t, nn::CoreAttention*> cores;
  for (nn::TransformerLayer* layer : model_.decoder().layers())
    cores[layer->layer_number()] = &layer->self_attention().core_attention();
  const std::vector<nn::MTPLayer*> mtp = model_.mtp_layers();
  for (size_t k = 0; k < mtp.size(); ++k)
    cores[args_.num_layers + static_cast<int64_t>(k)] = &mtp[k]->transformer_layer().self_attention().core_attention();
  std::vector<optim::QkClipLayer> layers;
  std::vector<int64_t> index;
  for (auto& [l, core] : cores) {
    if (!core->max_logits().defined()) continue;  // not tracked, or no forward since the last read
    layers.push_back({"", "", core->max_logits().to_float_vector()});
    index.push_back(l);
    core->reset_max_logits();
  }
  dist::DeviceMesh& mesh = parallel_.mesh();
  gather_heads(mesh.group("tp"), layers);
  max_over_stage_replicas(mesh, layers);
  step_max_logits_.clear();
  for (size_t i = 0; i < layers.size(); ++i) step_max_logits_[index[i]] = std::move(layers[i].max_logits);
  return step_max_logits_;
}

std::vector<optim::QkClipLayer> ModelHooks::qk_clip_inputs() {
  const std::map<int64_t, std::vector<float>>& maxima = step_max_logits();
  std::vector<optim::QkClipLayer> out;
  if (args_.multi_latent_attention)
    for (const models::QkClipLayerNames& n : models::muon_model_facts(args_).qk_clip_layers)
      if (auto it = maxima.find(n.layer); it != maxima.end()) out.push_back({n.q_up_name, n.kv_up_name, it->second});
  return out;
}

std::map<int64_t, float> ModelHooks::max_attention_logits() {
  std::map<int64_t, float> out;
  for (const auto& [layer, heads] : step_max_logits())
    if (!heads.empty()) out[layer] = *std::max_element(heads.begin(), heads.end());
  dist::PipelineStage* stage = parallel_.pipeline();
  if (!stage || stage->pp_group().size() == 1) return out;
  // (layer, value) pairs of every stage, padded to the longest rank's count.
  dist::ProcessGroup& pp = stage->pp_group();
  const int64_t longest = pp.all_reduce_scalar(static_cast<int64_t>(out.size()), dist::ReduceOp::max);
  std::vector<double> mine(static_cast<size_t>(2 * longest), -1.0);
  size_t k = 0;
  for (const auto& [layer, value] : out) {
    mine[k++] = static_cast<double>(layer);
    mine[k++] = value;
  }
  std::vector<double> all(mine.size() * static_cast<size_t>(pp.size()));
  pp.all_gather(std::span<const double>(mine), std::span<double>(all));
  for (size_t i = 0; i + 1 < all.size(); i += 2)
    if (all[i] >= 0) out[static_cast<int64_t>(all[i])] = static_cast<float>(all[i + 1]);
  return out;
}

void ModelHooks::after_optimizer_step() {
  // Routing counts of every rank that routed other tokens (other data, other sequence pieces):
  // the same expert-bias update everywhere.
  dist::DeviceMesh& mesh = parallel_.mesh();
  for (nn::MoELayer* m : model_.moe_layers()) {
    Tensor counts = m->router().tokens_per_expert();
    if (!counts.defined()) continue;
    mesh.group("batch").all_reduce(counts);
    mesh.group("cp").all_reduce(counts);
    mesh.group("tp").all_reduce(counts);
  }
  // Keep the step's counts for the MoE monitor before the bias update resets them, keyed by the
  // MoE layer's ordinal in the whole model (decoder, then MTP), which a pipeline stage holding
  // some of the layers knows from their global indices.
  last_tokens_per_expert_.clear();
  const nn::TransformerConfig& c = model_.config();
  auto record = [&](nn::TransformerLayer& layer) {
    if (!layer.moe() || !layer.moe()->router().tokens_per_expert().defined()) return;
    int64_t ordinal = 0;
    for (int64_t l = 0; l < layer.layer_number(); ++l) ordinal += c.is_moe_layer(l) ? 1 : 0;
    last_tokens_per_expert_[ordinal] = layer.moe()->router().tokens_per_expert().to_int_vector();
  };
  for (nn::TransformerLayer* layer : model_.decoder().layers()) record(*layer);
  for (nn::MTPLayer* m : model_.mtp_layers()) record(m->transformer_layer());
  model_.update_expert_biases();
  // The MoE monitor on rank 0 sees every stage's layers.
  if (dist::PipelineStage* stage = parallel_.pipeline())
    for (const auto& [layer, counts] : gather_over_stages(stage->pp_group(), last_tokens_per_expert_))
      last_tokens_per_expert_.emplace(layer, counts);
}

std::map<int64_t, std::vector<int64_t>> gather_over_stages(dist::ProcessGroup& pp,
                                                           const std::map<int64_t, std::vector<int64_t>>& counts) {
  if (pp.size() == 1) return counts;
  // Flattened as (layer, n, n counts)..., padded to the longest rank's length.
  std::vector<int64_t> mine;
  for (const auto& [layer, c] : counts) {
    mine.push_back(layer);
    mine.push_back(static_cast<int64_t>(c.size()));
    mine.insert(mine.end(), c.begin(), c.end());
  }
  const int64_t longest = pp.all_reduce_scalar(static_cast<int64_t>(mine.size()), dist::ReduceOp::max);
  mine.resize(static_cast<size_t>(longest + 1), -1);  // -1 ends a rank's list
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(pp.size()));
  pp.all_gather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  std::map<int64_t, std::vector<int64_t>> out;
  for (int r = 0; r < pp.size(); ++r) {
    const int64_t* p = all.data() + static_cast<size_t>(r) * mine.size();
    while (*p >= 0) {
      const int64_t layer = p[0], n = p[1];
      out[layer].assign(p + 2, p + 2 + n);
      p += 2 + n;
    }
  }
  return out;
}

}  // namespace loom::train
