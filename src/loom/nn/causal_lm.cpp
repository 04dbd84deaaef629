#include "loom/nn/causal_lm.h"

#include <limits>

#include "loom/nn/aux_loss.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/linear.h"
#include "loom/ops/loss.h"
#include "loom/ops/weight_cast.h"

namespace loom::nn {

namespace {

// MindFormers roll_tensor: shift left by one along the sequence, zero-filling the last position.
Tensor roll_left(const Tensor& t) {
  if (!t.defined()) return t;
  Tensor out = Tensor::zeros(t.shape(), t.dtype());
  const int64_t S = t.size(t.dim() - 1);
  if (S > 1) out.slice(t.dim() - 1, 0, S - 1).copy_(t.slice(t.dim() - 1, 1, S));
  return out;
}

std::shared_ptr<RotaryEmbedding> make_rotary(const TransformerConfig& c) {
  return std::make_shared<RotaryEmbedding>(c, c.multi_latent_attention ? c.qk_rope_head_dim : c.head_dim);
}

}  // namespace

TransformerBlock::TransformerBlock(const TransformerConfig& c, std::shared_ptr<RotaryEmbedding> rotary)
    : Module("TransformerBlock") {
  layers_ = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.num_layers; ++i) layers_->append(std::make_shared<TransformerLayer>(c, i, rotary));
  final_layernorm_ = register_module("final_layernorm", make_norm(c, c.hidden_size));
}

std::vector<TransformerLayer*> TransformerBlock::layers() {
  std::vector<TransformerLayer*> out;
  for (size_t i = 0; i < layers_->size(); ++i) out.push_back(static_cast<TransformerLayer*>(layers_->at(i).get()));
  return out;
}

void TransformerBlock::keep_parts(const std::function<bool(int64_t layer)>& keep_layer, bool final_norm) {
  layers_->retain([&keep_layer](size_t i) { return keep_layer(static_cast<int64_t>(i)); });
  if (!final_norm && final_layernorm_) {
    unregister_module("final_layernorm");
    final_layernorm_ = nullptr;
  }
}

Tensor TransformerBlock::forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) {
  return forward_layers(x, position_ids, doc_ends, 0, std::numeric_limits<int64_t>::max());
}

Tensor TransformerBlock::forward_layers(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends,
                                        int64_t first_layer, int64_t last_layer) {
  return invoke({x, position_ids, doc_ends}, [this, first_layer, last_layer](const std::vector<Tensor>& in) {
    Tensor h = in[0];
    for (TransformerLayer* layer : layers())
      if (layer->layer_number() >= first_layer && layer->layer_number() <= last_layer)
        h = layer->forward(h, in[1], in[2]);
    return std::vector<Tensor>{h};
  })[0];
}

LanguageModelEmbedding::LanguageModelEmbedding(const TransformerConfig& c)
    : Module("LanguageModelEmbedding"), compute_dtype_(c.compute_dtype) {
  word_embeddings_ = register_module(
      "word_embeddings",
      std::make_shared<Embedding>(c.vocab_size, c.hidden_size, c.params_dtype, Init::normal(c.init_std)));
}

Tensor LanguageModelEmbedding::forward(const Tensor& ids, const Tensor& doc_ends) {
  return invoke({ids, doc_ends}, [this](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::cast(word_embeddings_->forward(in[0]), compute_dtype_)};
  })[0];
}

CausalLM::CausalLM(const TransformerConfig& c) : Module("CausalLM"), config_(c) {
  head_loss_ = [](const Tensor& hidden, const Tensor& weight, const Tensor& labels, const Tensor& loss_mask,
                  const Tensor&, bool grads_in_forward) {
    return ops::linear_cross_entropy(hidden, weight, labels, loss_mask, -100, 0, grads_in_forward);
  };
  head_logits_ = [](const Tensor& hidden, const Tensor& weight, const Tensor&) { return ops::linear(hidden, weight); };
  rotary_ = make_rotary(c);
  embedding_ = register_module("embedding", std::make_shared<LanguageModelEmbedding>(c));
  decoder_ = register_module("decoder", std::make_shared<TransformerBlock>(c, rotary_));
  if (!c.tie_word_embeddings) {
    LinearOptions o;
    o.dtype = c.params_dtype;
    o.init = Init::normal(c.init_std);
    output_layer_ = register_module("output_layer", std::make_shared<Linear>(c.hidden_size, c.vocab_size, o));
  }
  if (c.mtp_num_layers > 0) {
    mtp_ = register_module("mtp", std::make_shared<MTPBlock>(c, rotary_));
  }
}

Parameter& CausalLM::output_weight() {
  return output_layer_ ? output_layer_->weight() : embedding_->word_embeddings().weight();
}

Tensor CausalLM::head_weight(DType dtype) { return ops::cast_weight(output_weight().tensor, dtype); }

std::vector<MTPLayer*> CausalLM::mtp_layers() {
  return mtp_ ? mtp_->layers() : std::vector<MTPLayer*>{};
}

std::vector<MoELayer*> CausalLM::moe_layers() {
  std::vector<MoELayer*> out;
  for (TransformerLayer* l : decoder_->layers())
    if (l->moe()) out.push_back(l->moe());
  for (MTPLayer* m : mtp_layers())
    if (m->transformer_layer().moe()) out.push_back(m->transformer_layer().moe());
  return out;
}

std::vector<AttentionLayer*> CausalLM::attention_layers() {
  std::vector<AttentionLayer*> out;
  for (TransformerLayer* l : decoder_->layers()) out.push_back(&l->self_attention());
  for (MTPLayer* m : mtp_layers()) out.push_back(&m->transformer_layer().self_attention());
  return out;
}

void CausalLM::set_auxiliary_loss_grad_scale(double scale) {
  aux_grad_scale_ = scale;
  for (MoELayer* m : moe_layers()) m->router().set_aux_loss_grad_scale(scale);
}

void CausalLM::set_track_max_logits(bool on) {
  for (AttentionLayer* a : attention_layers()) a->core_attention().set_track_max_logits(on);
}

void CausalLM::attach_cache(KVCache* cache) {
  const std::vector<AttentionLayer*> layers = attention_layers();
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->attach_cache(cache, i);
}

void CausalLM::attach_cache(KVCache* cache, KVCache* mtp_cache) {
  const std::vector<TransformerLayer*> layers = decoder_->layers();
  for (size_t i = 0; i < layers.size(); ++i) layers[i]->self_attention().attach_cache(cache, i);
  const std::vector<MTPLayer*> mtp = mtp_layers();
  for (size_t k = 0; k < mtp.size(); ++k) mtp[k]->transformer_layer().self_attention().attach_cache(mtp_cache, k);
}

void CausalLM::update_expert_biases() {
  for (MoELayer* m : moe_layers()) {
    if (m->router().has_expert_bias()) m->router().update_expert_bias(m->router().tokens_per_expert());
    m->router().reset_tokens_per_expert();
  }
}

Tensor CausalLM::main_hidden(const Tensor& input_ids, const Tensor& position_ids, const Tensor& doc_ends) {
  return decoder_->forward(embed(input_ids, doc_ends), position_ids, doc_ends);
}

Tensor CausalLM::logits(const Tensor& input_ids, const Tensor& position_ids, const Tensor& doc_ends) {
  return head_logits(main_hidden(input_ids, position_ids, doc_ends), doc_ends);
}

Tensor CausalLM::head_logits(const Tensor& hidden, const Tensor& doc_ends) {
  Tensor h = decoder_->final_layernorm().forward(hidden);
  return head_logits_(h, head_weight(h.dtype()), doc_ends);
}

Tensor CausalLM::mtp_head_logits(size_t depth, const Tensor& hidden) {
  const std::vector<MTPLayer*> mtp = mtp_layers();
  LOOM_CHECK(depth < mtp.size(), ValueError, "CausalLM: MTP depth ", depth, " asked of a model with ", mtp.size(),
             " MTP layers (model.mtp_num_layers)");
  Tensor h = mtp[depth]->final_layernorm().forward(hidden);
  return head_logits_(h, head_weight(h.dtype()), Tensor());
}

void CausalLM::keep_parts(const std::function<bool(int64_t layer)>& keep_layer, bool embedding, bool head) {
  decoder_->keep_parts(keep_layer, head);
  if (!head) {
    if (output_layer_) unregister_module("output_layer");
    if (mtp_) unregister_module("mtp");
    output_layer_ = nullptr;
    mtp_ = nullptr;
  }
  if (!embedding && !(head && head_uses_embedding())) {
    unregister_module("embedding");
    embedding_ = nullptr;
  }
}

Tensor CausalLM::embed(const Tensor& input_ids, const Tensor& doc_ends) {
  LOOM_CHECK(input_ids.defined() && input_ids.dim() == 2, ShapeError, "CausalLM: input_ids must be [batch, seq], got ",
             input_ids.defined() ? input_ids.shape().str() : std::string("an undefined tensor"));
  return embedding_->forward(input_ids, doc_ends);
}

LMOutput CausalLM::forward(const LMBatch& b, const ForwardOptions& options) {
  LMOutput out = head(main_hidden(b.input_ids, b.position_ids, b.doc_ends), b, options);
  for (MoELayer* m : moe_layers()) {
    const Tensor& a = m->last_aux_loss();
    if (!a.defined()) continue;
    out.aux_loss = out.aux_loss.defined() ? ops::add(out.aux_loss, a) : a.clone();
  }
  return out;
}

LMOutput CausalLM::head(const Tensor& hidden, const LMBatch& b, const ForwardOptions& options) {
  LOOM_CHECK(b.labels.defined() && b.labels.shape() == b.input_ids.shape(), ShapeError,
             "CausalLM: labels ", b.labels.defined() ? b.labels.shape().str() : std::string("(undefined)"),
             " must have the shape of input_ids ", b.input_ids.shape().str());
  LOOM_CHECK(!b.loss_mask.defined() || b.loss_mask.shape() == b.input_ids.shape(), ShapeError,
             "CausalLM: loss_mask ", b.loss_mask.shape().str(), " must have the shape of input_ids ",
             b.input_ids.shape().str());
  LMOutput out;
  Tensor h = hidden;
  auto mtp = mtp_layers();
  if (!mtp.empty()) {
    // Depth k predicts t_{i+k+1}: ids, labels, mask (and explicit positions) shift left k times.
    Tensor ids = b.input_ids, labels = b.labels, mask = b.loss_mask, pos = b.position_ids;
    if (!mask.defined()) mask = Tensor::ones(b.input_ids.shape());
    Tensor prev = h, total;
    for (MTPLayer* layer : mtp) {
      ids = roll_left(ids);
      labels = roll_left(labels);
      mask = roll_left(mask);
      pos = roll_left(pos);
      Tensor hk = layer->forward(prev, embedding_->forward(ids, b.doc_ends), pos, b.doc_ends);
      Tensor nk = layer->final_layernorm().forward(hk);
      Tensor ce = head_loss_(nk, head_weight(nk.dtype()), labels, mask, b.doc_ends, options.head_grads_in_forward);
      out.mtp_losses.push_back(ce.detach());
      total = total.defined() ? ops::add(total, ce) : ce;
      prev = hk;
    }
    Tensor mtp_loss = ops::scale(total, config_.mtp_loss_scaling_factor / static_cast<double>(mtp.size()));
    out.mtp_loss = mtp_loss.detach();
    h = attach_auxiliary_loss(h, mtp_loss, aux_grad_scale_);
  }

  Tensor hn = decoder_->final_layernorm().forward(h);
  out.loss = head_loss_(hn, head_weight(hn.dtype()), b.labels, b.loss_mask, b.doc_ends, options.head_grads_in_forward);
  return out;
}

}  // namespace loom::nn
