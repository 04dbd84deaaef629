// Decoder-only causal language model (Llama, Qwen3, Qwen3-MoE, DeepSeek-V3 share this tree):
//   embedding.word_embeddings → decoder.layers.{i} → decoder.final_layernorm → output head
// (`output_layer`, or the embedding matrix when tie_word_embeddings; then `output_layer.weight`
// does not exist), plus DeepSeek-V3's multi-token prediction layers `mtp.layers.{k}`.
// Nothing here knows about meshes or recompute: strategies wrap these modules from outside.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "loom/nn/forward_options.h"
#include "loom/nn/mtp.h"

namespace loom::nn {

// One micro-batch as the data loader gives it (data::Batch field names).
struct LMBatch {
  Tensor input_ids;     // int32/int64 [B, S]
  Tensor labels;        // int32/int64 [B, S]: the next token of each position
  Tensor loss_mask;     // [B, S], 1 = counts (undefined: all ones)
  Tensor position_ids;  // optional [B, S]; default 0..S-1
  Tensor doc_ends;      // optional int [B, K]: packed-document ends (ops::attention doc mask)
};

struct LMOutput {
  // float32 scalar: token-mean cross-entropy of the main head, Σ ce·mask / (Σ mask + 1e-8). The
  // value to log and the root to call backward on: the MTP loss and the MoE balance losses are
  // injected into its backward (each with the model's auxiliary-loss grad scale), not added.
  Tensor loss;
  // Detached scalar (λ/D)·Σ_k CE_k, undefined without MTP; per-depth CE_k in mtp_losses.
  Tensor mtp_loss;
  std::vector<Tensor> mtp_losses;
  // Detached scalar: sum of the MoE balance losses of this forward (undefined when none).
  Tensor aux_loss;
};

class TransformerBlock : public Module {
 public:
  TransformerBlock(const TransformerConfig& config, std::shared_ptr<RotaryEmbedding> rotary);
  // Runs the layers; returns the hidden states before final_layernorm.
  Tensor forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends);
  // Runs the layers with global indices in [first_layer, last_layer] only: a pipeline chunk. It
  // goes through this module's wrappers as forward() does, so a strategy that wraps the block
  // (context parallelism's local positions) sees every chunk.
  Tensor forward_layers(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends, int64_t first_layer,
                        int64_t last_layer);
  std::vector<TransformerLayer*> layers();
  Norm& final_layernorm() { return *final_layernorm_; }
  bool has_final_layernorm() const { return final_layernorm_ != nullptr; }
  // Keeps the layers whose index `keep_layer` accepts (they keep their names and indices), and
  // the final norm when `final_norm`: what a pipeline stage holds (CausalLM::keep_parts).
  void keep_parts(const std::function<bool(int64_t layer)>& keep_layer, bool final_norm);

 private:
  std::shared_ptr<ModuleList> layers_;
  std::shared_ptr<Norm> final_layernorm_;
};

class LanguageModelEmbedding : public Module {
 public:
  explicit LanguageModelEmbedding(const TransformerConfig& config);
  // → [.., hidden] in compute_dtype. doc_ends (the batch's packed-document ends, unused here)
  // travels with the ids so that a strategy cutting the sequence over ranks cuts it where the
  // documents end (context parallelism's input split).
  Tensor forward(const Tensor& ids, const Tensor& doc_ends = Tensor());
  Embedding& word_embeddings() { return *word_embeddings_; }

 private:
  DType compute_dtype_;
  std::shared_ptr<Embedding> word_embeddings_;
};

// The loss of an output head (the main head and each MTP depth): hidden [B, S, D] after the
// final norm, the head weight [V, D] in hidden's dtype, labels and loss mask [B, S], the batch's
// doc_ends (LMBatch; the default loss ignores them, a sequence-splitting strategy needs them to
// find its labels); returns the token-mean cross-entropy (ops::linear_cross_entropy).
// grads_in_forward: ForwardOptions.
using HeadLoss = std::function<Tensor(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                                      const Tensor& loss_mask, const Tensor& doc_ends, bool grads_in_forward)>;
// The logits of the main head: hidden [B, S, D] after the final norm, the head weight [V, D] in
// hidden's dtype and the batch's doc_ends (as HeadLoss) → [B, S, V] in hidden's dtype, for every
// position of the batch and the whole vocabulary. A strategy that splits the sequence or the
// vocabulary over ranks installs one that gathers what the others hold.
using HeadLogits = std::function<Tensor(const Tensor& hidden, const Tensor& weight, const Tensor& doc_ends)>;

class CausalLM : public Module {
 public:
  explicit CausalLM(const TransformerConfig& config);
  const TransformerConfig& config() const { return config_; }

  LMOutput forward(const LMBatch& batch, const ForwardOptions& options = {});

  // The three parts forward() runs, for a caller that runs them apart (a pipeline stage runs
  // the part it holds on the hidden state another stage computed):
  //   forward(b) = head(decoder layers(embed(b.input_ids)), b), plus the balance losses
  Tensor embed(const Tensor& input_ids, const Tensor& doc_ends = Tensor());
  // Hidden [B, S, D] before final_layernorm → the MTP layers, the final norm and the heads'
  // losses (LMOutput without aux_loss, which the layers that ran form).
  LMOutput head(const Tensor& hidden, const LMBatch& batch, const ForwardOptions& options);
  // Keeps only the parts one pipeline stage holds, dropping the rest from every listing (names
  // stay global: "decoder.layers.5" is still that on the stage holding layer 5): the decoder
  // layers `keep_layer` accepts, the embedding when `embedding`, and with `head` the final norm,
  // output layer and MTP layers. head() needs the embedding when the output weight is tied to
  // it or MTP embeds its shifted inputs, so then the embedding stays with the head too.
  void keep_parts(const std::function<bool(int64_t layer)>& keep_layer, bool embedding, bool head);
  bool has_embedding() const { return embedding_ != nullptr; }
  bool has_head() const { return decoder_->has_final_layernorm(); }
  // Whether head() reads the embedding (tied output weight or MTP).
  bool head_uses_embedding() const { return config_.tie_word_embeddings || config_.mtp_num_layers > 0; }
  // Full logits [B, S, V] of the main head (evaluation, generation, tests; training uses
  // forward()), whole on every rank of a layout that split the model (HeadLogits).
  Tensor logits(const Tensor& input_ids, const Tensor& position_ids = Tensor(),
                const Tensor& doc_ends = Tensor());
  // The same from the hidden states before final_layernorm (a pipeline's last stage).
  Tensor head_logits(const Tensor& hidden, const Tensor& doc_ends = Tensor());
  // MTP depth `depth`'s logits [B, S, V] from its layer's output [B, S, D]: its own final norm,
  // then the shared output head (as head() forms its loss), through the installed HeadLogits.
  Tensor mtp_head_logits(size_t depth, const Tensor& hidden);

  LanguageModelEmbedding& embedding() { return *embedding_; }
  TransformerBlock& decoder() { return *decoder_; }
  Parameter& output_weight();  // output_layer.weight, or the word embeddings when tied
  std::vector<MTPLayer*> mtp_layers();
  std::vector<MoELayer*> moe_layers();            // decoder then MTP layers
  std::vector<AttentionLayer*> attention_layers();  // decoder then MTP layers

  // dL/d(aux) used for the injected MTP and balance losses (default 1). A trainer that calls
  // backward on loss·s sets s here so every term is scaled alike.
  void set_auxiliary_loss_grad_scale(double scale);
  double auxiliary_loss_grad_scale() const { return aux_grad_scale_; }
  // Every core attention tracks its per-head max logits (QK-clip) while on.
  void set_track_max_logits(bool on);
  // Generation: every attention layer (decoder, then MTP) reads and extends `cache`, slot i for
  // attention_layers()[i] (kv_cache.h); nullptr detaches.
  void attach_cache(KVCache* cache);
  // Speculative decoding: the decoder layers in `cache` (slot i for layer i), MTP depth k in
  // `mtp_cache`'s slot k. The MTP layers need a cache of their own: depth k's state at position i
  // reads token t_{i+k}, so their stream trails the decoder's and is cut back on its own
  // (runtime/mtp_drafter.h).
  void attach_cache(KVCache* cache, KVCache* mtp_cache);
  // Replaces the heads' loss (default: ops::linear_cross_entropy over the whole vocabulary). A
  // strategy that splits the head over ranks (tensor parallelism) installs its own from outside.
  void set_head_loss(HeadLoss loss) { head_loss_ = std::move(loss); }
  // The installed one, for a later strategy that wraps it (context parallelism over TP's).
  const HeadLoss& head_loss() const { return head_loss_; }
  // Replaces the main head's logits (default: hidden · weightᵀ), as set_head_loss the loss.
  void set_head_logits(HeadLogits logits) { head_logits_ = std::move(logits); }
  const HeadLogits& head_logits_fn() const { return head_logits_; }
  // Aux-loss-free balancing step with this process's counts: every router that has an expert
  // bias updates it from its tokens_per_expert, then all counters reset. (Multi-process trainers
  // sum the counts across ranks and call TopKRouter::update_expert_bias themselves.)
  void update_expert_biases();

 private:
  Tensor main_hidden(const Tensor& input_ids, const Tensor& position_ids, const Tensor& doc_ends);
  Tensor head_weight(DType dtype);

  TransformerConfig config_;
  double aux_grad_scale_ = 1.0;
  HeadLoss head_loss_;
  HeadLogits head_logits_;
  std::shared_ptr<RotaryEmbedding> rotary_;
  std::shared_ptr<LanguageModelEmbedding> embedding_;
  std::shared_ptr<TransformerBlock> decoder_;
  std::shared_ptr<Linear> output_layer_;
  std::shared_ptr<MTPBlock> mtp_;
};

}  // namespace loom::nn
