// The trainer's view of an nn::CausalLM built by the model registry (every supported
// architecture): forward on a data batch, MFU FLOPs, layers for memory policies, Muon facts,
// HF loading, MoE monitoring.
#pragma once

#include <memory>

#include "loom/models/model_args.h"
#include "loom/nn/causal_lm.h"
#include "loom/train/train_model.h"

namespace loom::train {

class CausalLMModel : public TrainModel {
 public:
  CausalLMModel(models::ModelArgs args, std::shared_ptr<nn::CausalLM> model);

  nn::Module& module() override { return *model_; }
  ForwardResult forward(const data::Batch& batch, const nn::ForwardOptions& options) override;
  ForwardResult forward_chunk(const data::Batch& batch, const dist::PipelineChunk& chunk, const Tensor& hidden,
                              const nn::ForwardOptions& options) override;
  void after_optimizer_step() override;
  std::vector<Tensor> data_parallel_sums() override;
  void set_backward_scale(double scale) override { model_->set_auxiliary_loss_grad_scale(scale); }
  void set_track_max_logits(bool on) override { model_->set_track_max_logits(on); }
  double flops_per_token(int64_t seq_length) const override;
  std::vector<memory::LayerRef> layers() override;
  int64_t num_layers() const override { return args_.num_layers; }
  int64_t num_mtp_layers() const override { return args_.mtp_num_layers; }
  optim::MuonModelInfo muon_info() const override;
  std::vector<optim::QkClipLayer> take_qk_clip_inputs() override;
  std::map<std::string, Tensor> load_hf(const std::string& dir) override;
  std::map<int64_t, std::vector<int64_t>> tokens_per_expert() const override;
  void add_tokens_per_expert(const std::map<int64_t, std::vector<int64_t>>& counts) override;

  nn::CausalLM& causal_lm() { return *model_; }
  const models::ModelArgs& args() const { return args_; }

 private:
  models::ModelArgs args_;
  std::shared_ptr<nn::CausalLM> model_;
  std::map<int64_t, std::vector<int64_t>> last_tokens_per_expert_;
};

// The ModelFactory the `loom train` command uses: the registry's model for the resolved arguments.
std::unique_ptr<TrainModel> build_causal_lm(const models::ModelArgs& args);

}  // namespace loom::train
