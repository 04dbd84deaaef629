// Self-attention layers. Both take x [B, S, hidden] (compute dtype), optional position_ids
// ([B, S] or [S]) and optional doc_ends ([B, K] packed-document ends, ops::attention), and are
// causal. `SelfAttention` is MHA/GQA with optional biases and Qwen3's per-head qk-norm before
// RoPE; `MLASelfAttention` (mla.h) is DeepSeek's multi-latent attention.
#pragma once

#include <memory>

#include "loom/nn/linear.h"
#include "loom/nn/norm.h"
#include "loom/nn/rotary.h"

namespace loom::nn {

class AttentionLayer : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) = 0;

  // Muon QK-clip input (semantics.md §2.2): when tracking, every forward folds the per-head max
  // of softmax_scale·q·k into a running fp32 [heads] maximum until reset. Recomputed forwards
  // (activation checkpointing) do not count again.
  void set_track_max_logits(bool on) { track_max_logits_ = on; }
  bool tracking_max_logits() const { return track_max_logits_; }
  const Tensor& max_logits() const { return max_logits_; }  // undefined before the first forward
  void reset_max_logits() { max_logits_ = Tensor(); }

 protected:
  void fold_max_logits(const Tensor& step_max);
  bool track_max_logits_ = false;
  Tensor max_logits_;
};

// q = linear_q(x) [B,S,H,hd], k = linear_k(x), v = linear_v(x) [B,S,KV,hd]; with qk_layernorm
// q = q_layernorm(q), k = k_layernorm(k) over hd; RoPE on q and k; causal flash attention with
// scale hd^-0.5; linear_proj of the concatenated heads.
class SelfAttention : public AttentionLayer {
 public:
  SelfAttention(const TransformerConfig& config, std::shared_ptr<RotaryEmbedding> rotary);
  Tensor forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) override;

 private:
  int64_t heads_, kv_heads_, head_dim_;
  bool interleaved_;
  std::shared_ptr<RotaryEmbedding> rotary_;
  std::shared_ptr<Linear> linear_q_, linear_k_, linear_v_, linear_proj_;
  std::shared_ptr<Norm> q_layernorm_, k_layernorm_;
};

}  // namespace loom::nn
