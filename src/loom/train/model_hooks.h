// What the trainer asks of the model beyond a forward (runtime/language_model.h), with the
// layout's part in it, so that the training step holds no layout knowledge:
//
//   backward scale   the factor of the injected losses (MoE balance, MTP): the main loss's s / A
//   max logits       the step's per-head max attention logits of every attention layer, gathered
//                    over tp (which splits the heads) and maxed over the ranks of this rank's
//                    stage that saw other tokens (dp_replicate × fsdp): the optimizer's QK-clip
//                    input (MLA layers) and the MaxLogitsMonitor's figures
//   after an update  the step's MoE routing counts summed over every rank that routed other
//                    tokens (batch, cp, tp), the aux-loss-free expert-bias update with them (the
//                    same bias everywhere), and the counts kept for the MoE monitor, gathered
//                    over the pipeline stages so rank 0 sees every layer's
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "loom/dist/device_mesh.h"
#include "loom/dist/parallelize.h"
#include "loom/models/model_args.h"
#include "loom/nn/causal_lm.h"
#include "loom/optim/muon.h"
#include "loom/optim/qk_clip.h"

namespace loom::train {

class ModelHooks {
 public:
  ModelHooks(const models::ModelArgs& args, nn::CausalLM& model, dist::ParallelModel& parallel);

  void set_backward_scale(double scale) { model_.set_auxiliary_loss_grad_scale(scale); }
  void set_track_max_logits(bool on) { model_.set_track_max_logits(on); }

  // Before every step: the step's max logits are read afresh (step_max_logits).
  void begin_step() { max_logits_read_ = false; }
  // The step's per-head maximum attention logit of every attention layer this rank holds, keyed by
  // the layer's index in the whole model (decoder, then MTP): read from nn::CoreAttention and
  // reset at the first call of a step, the heads gathered over tp, the maxima taken over the ranks
  // of this stage that saw other tokens. QK-clip and the MaxLogitsMonitor read the same values.
  const std::map<int64_t, std::vector<float>>& step_max_logits();
  // This step's QK-clip inputs in global head order, the same on every rank of a stage.
  std::vector<optim::QkClipLayer> qk_clip_inputs();
  // Every layer's maximum over its heads of step_max_logits, gathered over the pipeline stages:
  // the same on every rank.
  std::map<int64_t, float> max_attention_logits();
  // After every optimizer step, applied or skipped (see above).
  void after_optimizer_step();
  // Per-MoE-layer tokens-per-expert counts of the last step, keyed by the layer's ordinal over
  // the whole model (decoder, then MTP); every stage's on every rank. Empty for dense models.
  const std::map<int64_t, std::vector<int64_t>>& tokens_per_expert() const { return last_tokens_per_expert_; }

 private:
  models::ModelArgs args_;
  nn::CausalLM& model_;
  dist::ParallelModel& parallel_;
  std::map<int64_t, std::vector<int64_t>> last_tokens_per_expert_;
  std::map<int64_t, std::vector<float>> step_max_logits_;
  bool max_logits_read_ = false;
};

// Muon's facts of a model: its MLA dims and how its fused weights split (models/muon_info.h).
optim::MuonModelInfo muon_model_info(const models::ModelArgs& args);

// Per-MoE-layer routing counts of every pipeline stage (each holds its own layers' counts):
// the union over `pp`, the same on every rank.
std::map<int64_t, std::vector<int64_t>> gather_over_stages(dist::ProcessGroup& pp,
                                                           const std::map<int64_t, std::vector<int64_t>>& counts);

}  // namespace loom::train
