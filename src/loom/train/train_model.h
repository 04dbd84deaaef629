// What the trainer needs from a model, independent of architecture. models::CausalLM provides
// it (models/train_adapter.*); tests can provide tiny ones.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/data/batch.h"
#include "loom/dist/pipeline.h"
#include "loom/memory/layer_paths.h"
#include "loom/nn/forward_options.h"
#include "loom/nn/module.h"
#include "loom/optim/muon.h"

namespace loom::train {

struct ForwardResult {
  Tensor loss;                           // scalar: the training loss of this micro-batch (token mean)
  std::map<std::string, double> extras;  // e.g. load_balancing_loss, mtp_1_loss (logged, already in the graph)
  Tensor hidden;                         // forward_chunk before the last virtual stage: its output
};

class TrainModel {
 public:
  virtual ~TrainModel() = default;
  virtual nn::Module& module() = 0;
  // One micro-batch forward; backward is run by the trainer on result.loss (scaled). The caller
  // says how (nn::ForwardOptions): it alone knows whether backward follows at once.
  virtual ForwardResult forward(const data::Batch& batch, const nn::ForwardOptions& options) = 0;
  // One pipeline chunk of a micro-batch (dist/pipeline.h): the chunk's decoder layers on
  // `hidden`, the previous virtual stage's output, or on the batch's embedding in the first
  // chunk. The last chunk runs the heads and returns the loss; every other returns its output in
  // ForwardResult::hidden. extras hold what the chunk's own layers add (balance losses; MTP's in
  // the last chunk), summed over the chunks by the schedule.
  virtual ForwardResult forward_chunk(const data::Batch& batch, const dist::PipelineChunk& chunk, const Tensor& hidden,
                                      const nn::ForwardOptions& options);
  // Called once per optimizer update, after it (aux-loss-free expert-bias update, counter resets).
  virtual void after_optimizer_step() {}
  // Per-step counters that every data-parallel rank must see summed over all ranks before
  // after_optimizer_step() (MoE tokens_per_expert): live tensors, summed in place by the trainer.
  virtual std::vector<Tensor> data_parallel_sums() { return {}; }
  // The factor the trainer applies to forward()'s loss before backward (1/A with A micro-batches):
  // losses the model injects into backward itself (MoE balance, MTP) must be scaled alike.
  virtual void set_backward_scale(double scale) {}
  // Per-head max attention logits are tracked for QK-clip (Muon) when on.
  virtual void set_track_max_logits(bool on) {}
  // Training FLOPs per token (forward + backward), for MFU.
  virtual double flops_per_token(int64_t seq_length) const = 0;
  // The transformer layers, for recompute/swap (MTP layer k has index num_layers + k).
  virtual std::vector<memory::LayerRef> layers() = 0;
  virtual int64_t num_layers() const = 0;
  virtual int64_t num_mtp_layers() const { return 0; }
  // Muon's model facts (MLA dims, split schema).
  virtual optim::MuonModelInfo muon_info() const = 0;
  // Per-head max attention logits of each MLA layer since the last call (QK-clip); empty if untracked.
  virtual std::vector<optim::QkClipLayer> take_qk_clip_inputs() { return {}; }
  // Names the model keeps out of weight decay beyond the 1-D/bias default.
  virtual optim::WeightDecayRules no_weight_decay() const { return {}; }
  // Reads an HF folder into a state dict with this model's (Loom) names.
  virtual std::map<std::string, Tensor> load_hf(const std::string& dir) = 0;
  // Per-layer tokens-per-expert counts of the last step (MoE monitor); empty for dense models.
  // Keyed by the MoE layer's ordinal over the whole model, also on a pipeline stage.
  virtual std::map<int64_t, std::vector<int64_t>> tokens_per_expert() const { return {}; }
  // The last step's counts of MoE layers other pipeline stages hold (the trainer gathers them).
  virtual void add_tokens_per_expert(const std::map<int64_t, std::vector<int64_t>>& counts) {}
};

inline ForwardResult TrainModel::forward_chunk(const data::Batch&, const dist::PipelineChunk&, const Tensor&,
                                               const nn::ForwardOptions&) {
  LOOM_CHECK(false, ConfigError, "parallelism.pipeline_parallel: this model cannot be split into pipeline stages; "
             "set pipeline_parallel: 1");
  return {};
}

}  // namespace loom::train
