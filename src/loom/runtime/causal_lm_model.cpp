#include "loom/runtime/causal_lm_model.h"

#include "loom/kernels/kernel_table.h"
#include "loom/models/accounting.h"
#include "loom/models/hf_checkpoint.h"
#include "loom/models/hf_weights.h"
#include "loom/models/registry.h"
#include "loom/nn/moe.h"
#include "loom/nn/router.h"
#include "loom/nn/transformer_layer.h"

namespace loom::runtime {

CausalLMModel::CausalLMModel(models::ModelArgs args, std::shared_ptr<nn::CausalLM> model)
    : args_(std::move(args)), model_(std::move(model)) {}

namespace {
// Token ids at or above vocab_size mean the data and the model disagree on the vocabulary: say
// so in those terms instead of as an embedding index error.
void check_token_ids(const Tensor& ids, int64_t vocab_size, const char* what) {
  if (!ids.defined() || ids.numel() == 0) return;
  const auto worst = static_cast<int64_t>(kernels::for_tensor(ids, "token id check").max_value(ids));
  LOOM_CHECK(worst < vocab_size, ConfigError, "the training data holds ", what, " ", worst,
             " but model.vocab_size is ", vocab_size, ": the data was tokenized with a larger "
             "vocabulary. Set model.vocab_size to at least the tokenizer's vocabulary size, or "
             "preprocess the data with the model's tokenizer");
}
}  // namespace

namespace {
nn::LMBatch lm_batch(const data::Batch& batch) {
  nn::LMBatch lm;
  lm.input_ids = batch.input_ids;
  lm.labels = batch.labels;
  lm.loss_mask = batch.loss_mask;
  lm.position_ids = batch.position_ids;
  lm.doc_ends = batch.document_ends;
  return lm;
}

void add_head_extras(const nn::LMOutput& out, ForwardResult& r) {
  if (out.mtp_loss.defined()) r.extras["mtp_loss"] = out.mtp_loss.item();
  for (size_t k = 0; k < out.mtp_losses.size(); ++k)
    r.extras["mtp_" + std::to_string(k + 1) + "_loss"] = out.mtp_losses[k].item();
}
}  // namespace

ForwardResult CausalLMModel::forward(const data::Batch& batch, const nn::ForwardOptions& options) {
  check_token_ids(batch.input_ids, args_.vocab_size, "token id");
  check_token_ids(batch.labels, args_.vocab_size, "label id");
  nn::LMOutput out = model_->forward(lm_batch(batch), options);
  ForwardResult r;
  r.loss = out.loss;
  if (out.aux_loss.defined()) r.extras["load_balancing_loss"] = out.aux_loss.item();
  add_head_extras(out, r);
  return r;
}

ForwardResult CausalLMModel::forward_chunk(const data::Batch& batch, const dist::PipelineChunk& chunk,
                                           const Tensor& hidden, const nn::ForwardOptions& options) {
  const nn::LMBatch lm = lm_batch(batch);
  if (chunk.first) check_token_ids(batch.input_ids, args_.vocab_size, "token id");
  if (chunk.last) check_token_ids(batch.labels, args_.vocab_size, "label id");
  Tensor h = chunk.first ? model_->embed(lm.input_ids, lm.doc_ends) : hidden;
  double aux = 0;
  bool has_aux = false;
  auto add_aux = [&](nn::MoELayer* m) {
    if (!m || !m->last_aux_loss().defined()) return;
    aux += m->last_aux_loss().item();
    has_aux = true;
  };
  h = model_->decoder().forward_layers(h, lm.position_ids, lm.doc_ends, chunk.first_layer, chunk.last_layer);
  std::vector<nn::MoELayer*> ran;
  for (nn::TransformerLayer* layer : model_->decoder().layers())
    if (layer->layer_number() >= chunk.first_layer && layer->layer_number() <= chunk.last_layer)
      ran.push_back(layer->moe());
  ForwardResult r;
  if (chunk.last && options.logits) {
    r.logits = model_->head_logits(h, lm.doc_ends);
  } else if (chunk.last) {
    const nn::LMOutput out = model_->head(h, lm, options);
    r.loss = out.loss;
    add_head_extras(out, r);
    for (nn::MTPLayer* m : model_->mtp_layers()) ran.push_back(m->transformer_layer().moe());
  } else {
    r.hidden = h;
  }
  for (nn::MoELayer* m : ran) add_aux(m);
  if (has_aux) r.extras["load_balancing_loss"] = aux;
  return r;
}

double CausalLMModel::flops_per_token(int64_t seq_length) const {
  return models::training_flops_per_token(args_, seq_length);
}

std::vector<memory::LayerRef> CausalLMModel::layers() {
  std::vector<memory::LayerRef> out;
  // By global index: a pipeline stage holds some of the layers, under their one-process names.
  for (nn::TransformerLayer* layer : model_->decoder().layers())
    out.push_back({layer->layer_number(), "decoder.layers." + std::to_string(layer->layer_number()), layer});
  auto mtp = model_->mtp_layers();
  for (size_t k = 0; k < mtp.size(); ++k)
    out.push_back({args_.num_layers + static_cast<int64_t>(k), "mtp.layers." + std::to_string(k), mtp[k]});
  return out;
}

std::map<std::string, Tensor> CausalLMModel::load_hf(const std::string& dir) {
  // The folder's weights for the model this run built (from the configuration's model section);
  // a folder of another shape fails the conversion, which names the tensors that differ.
  return models::from_hf_weights(args_, models::read_hf_tensors(dir), dir);
}

Tensor CausalLMModel::logits(const data::Batch& batch) {
  check_token_ids(batch.input_ids, args_.vocab_size, "token id");
  return model_->logits(batch.input_ids, batch.position_ids, batch.document_ends);
}

std::unique_ptr<CausalLMModel> build_causal_lm(const models::ModelArgs& args) {
  return std::make_unique<CausalLMModel>(args, models::build_model(args));
}

}  // namespace loom::runtime
