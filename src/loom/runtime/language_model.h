// What every driver (train, eval, generate) needs from a language model, whatever its
// architecture: the loss of a micro-batch, the same for one pipeline chunk of it, the full logits,
// its transformer layers (for memory policies), its FLOPs and its Hugging Face weights. The
// registry's nn::CausalLM provides it for the four architectures (causal_lm_model.h).
// Training-only hooks (backward scale, MoE bias update, QK-clip, Muon facts) are train/'s
// (train/training_hooks.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/tensor.h"
#include "loom/data/batch.h"
#include "loom/dist/pipeline.h"
#include "loom/memory/layer_paths.h"
#include "loom/nn/forward_options.h"
#include "loom/nn/module.h"

namespace loom::runtime {

struct ForwardResult {
  Tensor loss;                           // scalar: the token-mean loss of this micro-batch
  std::map<std::string, double> extras;  // e.g. load_balancing_loss, mtp_1_loss (logged, already in the graph)
  Tensor hidden;                         // forward_chunk before the last virtual stage: its output
  Tensor logits;                         // the last chunk with ForwardOptions::logits: [B, S, V]
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  virtual nn::Module& module() = 0;
  // One micro-batch forward. The caller says how (nn::ForwardOptions): it alone knows whether
  // backward follows at once.
  virtual ForwardResult forward(const data::Batch& batch, const nn::ForwardOptions& options) = 0;
  // One pipeline chunk of a micro-batch (dist/pipeline.h): the chunk's decoder layers on
  // `hidden`, the previous virtual stage's output, or on the batch's embedding in the first
  // chunk. The last chunk runs the heads and returns the loss; every other returns its output in
  // ForwardResult::hidden (with ForwardOptions::logits the last returns the logits instead of
  // the losses). extras hold what the chunk's own layers add (balance losses; MTP's in the last
  // chunk), summed over the chunks by the schedule.
  virtual ForwardResult forward_chunk(const data::Batch& batch, const dist::PipelineChunk& chunk,
                                      const Tensor& hidden, const nn::ForwardOptions& options);
  // The main head's logits [B, S, V] (compute dtype) for the batch's input_ids (and positions and
  // documents), whole on every rank of a layout that does not split the layers
  // (nn::CausalLM::logits); under pipeline parallelism Schedule::logits runs the stages.
  virtual Tensor logits(const data::Batch& batch) = 0;
  virtual int64_t vocab_size() const = 0;
  // Training FLOPs per token (forward + backward), for MFU.
  virtual double flops_per_token(int64_t seq_length) const = 0;
  // The transformer layers, for recompute/swap (MTP layer k has index num_layers + k).
  virtual std::vector<memory::LayerRef> layers() = 0;
  virtual int64_t num_layers() const = 0;
  virtual int64_t num_mtp_layers() const { return 0; }
  // Reads a Hugging Face folder into a state dict with this model's (Loom) names.
  virtual std::map<std::string, Tensor> load_hf(const std::string& dir) = 0;
};

inline ForwardResult LanguageModel::forward_chunk(const data::Batch&, const dist::PipelineChunk&, const Tensor&,
                                                  const nn::ForwardOptions&) {
  LOOM_CHECK(false, ConfigError, "parallelism.pipeline_parallel: this model cannot be split into pipeline stages; "
             "set pipeline_parallel: 1");
  return {};
}

}  // namespace loom::runtime
