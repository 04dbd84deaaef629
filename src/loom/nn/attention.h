// Self-attention layers. Both take x [B, S, hidden] (compute dtype), optional position_ids
// ([B, S] or [S]) and optional doc_ends ([B, K] packed-document ends, ops::attention), and are
// causal. `SelfAttention` is MHA/GQA with optional biases and Qwen3's per-head qk-norm before
// RoPE; `MLASelfAttention` (mla.h) is DeepSeek's multi-latent attention. Both run the projections,
// then `core_attention` (core_attention.h), then linear_proj.
//
// Head counts come from the weights at forward time (a projection's output width over the
// per-head width), never from the config: a tensor-parallel strategy that replaces the column-
// parallel projections' weights by a shard of whole heads (and linear_proj's by the matching
// column shard) gets the rank's heads with no change here.
#pragma once

#include <memory>

#include "loom/nn/core_attention.h"
#include "loom/nn/kv_cache.h"
#include "loom/nn/linear.h"
#include "loom/nn/norm.h"
#include "loom/nn/rotary.h"

namespace loom::nn {

class AttentionLayer : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) = 0;
  // Between the projections and linear_proj: where context parallelism attaches and where the
  // QK-clip max logits are tracked.
  CoreAttention& core_attention() { return *core_attention_; }
  // Generation (kv_cache.h): while attached, a forward of S positions writes their keys (and
  // values) into `cache`'s slot `slot` at positions [length, length + S) and attends over
  // [0, length + S) of it, under the cache's padding mask. nullptr detaches.
  void attach_cache(KVCache* cache, size_t slot) {
    cache_ = cache;
    slot_ = slot;
  }

 protected:
  // The cache's slot with `keys` (and `values`, when defined) written at the forward's positions;
  // its tensors are allocated on first use with the new positions' trailing dims and dtype.
  KVCacheSlot& store(const Tensor& keys, const Tensor& values);
  // softmax(scale·q·kᵀ)·v of the new queries q [B, S, H, d] against the cache's first
  // length + S keys and values (views of the slot), causal from position `length`.
  Tensor cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values) const;

  std::shared_ptr<CoreAttention> core_attention_;
  KVCache* cache_ = nullptr;
  size_t slot_ = 0;
};

// projected [B, S, heads·head_width] → [B, S, heads, head_width]; `what` names the projection for
// the error when the width holds no whole number of heads.
Tensor split_heads(const Tensor& projected, int64_t head_width, const char* what);

// q = linear_q(x) [B,S,H,hd], k = linear_k(x), v = linear_v(x) [B,S,KV,hd]; with qk_layernorm
// q = q_layernorm(q), k = k_layernorm(k) over hd; RoPE on q and k; causal core attention with
// scale hd^-0.5; linear_proj of the concatenated heads.
class SelfAttention : public AttentionLayer {
 public:
  SelfAttention(const TransformerConfig& config, std::shared_ptr<RotaryEmbedding> rotary);
  Tensor forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) override;

 private:
  int64_t head_dim_;
  bool interleaved_;
  std::shared_ptr<RotaryEmbedding> rotary_;
  std::shared_ptr<Linear> linear_q_, linear_k_, linear_v_, linear_proj_;
  std::shared_ptr<Norm> q_layernorm_, k_layernorm_;
};

}  // namespace loom::nn
