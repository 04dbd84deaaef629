// The LanguageModel of the registry's nn::CausalLM (every supported architecture): a data batch
// in, the loss, a pipeline chunk's output or the logits out.
#pragma once

#include <memory>

#include "loom/models/model_args.h"
#include "loom/nn/causal_lm.h"
#include "loom/runtime/language_model.h"

namespace loom::runtime {

class CausalLMModel final : public LanguageModel {
 public:
  CausalLMModel(models::ModelArgs args, std::shared_ptr<nn::CausalLM> model);

  nn::Module& module() override { return *model_; }
  ForwardResult forward(const data::Batch& batch, const nn::ForwardOptions& options) override;
  ForwardResult forward_chunk(const data::Batch& batch, const dist::PipelineChunk& chunk, const Tensor& hidden,
                              const nn::ForwardOptions& options) override;
  Tensor logits(const data::Batch& batch) override;
  int64_t vocab_size() const override { return args_.vocab_size; }
  double flops_per_token(int64_t seq_length) const override;
  std::vector<memory::LayerRef> layers() override;
  int64_t num_layers() const override { return args_.num_layers; }
  int64_t num_mtp_layers() const override { return args_.mtp_num_layers; }
  std::map<std::string, Tensor> load_hf(const std::string& dir) override;

  nn::CausalLM& causal_lm() { return *model_; }
  const models::ModelArgs& args() const { return args_; }

 private:
  models::ModelArgs args_;
  std::shared_ptr<nn::CausalLM> model_;
};

// The registry's model for `args`, on the meta device.
std::unique_ptr<CausalLMModel> build_causal_lm(const models::ModelArgs& args);

}  // namespace loom::runtime
