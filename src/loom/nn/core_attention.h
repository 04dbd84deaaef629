// Core attention (`self_attention.core_attention`, the MindFormers / Megatron name): the part of
// self-attention between the projections (and RoPE) and the output projection,
//   o = softmax(scale·q·kᵀ + causal/document mask)·v,
// over whatever heads q, k and v bring: all of them on one process, a rank's H/t under tensor
// parallelism. It owns no parameters. Context parallelism attaches here from outside: it wraps
// or replaces this module's forward with a variant (ring, all-gather-KV, Ulysses) that takes the
// same q, k, v and doc_ends, reading the scale and mask kind from options().
//
// It also keeps the Muon QK-clip statistic (MindFormers' `max_logits_val`):
// while tracking, every forward folds the per-head max of scale·q·k into a running fp32 [heads]
// maximum until reset. Recomputed forwards (activation checkpointing) do not count again.
#pragma once

#include "loom/nn/module.h"

namespace loom::nn {

struct CoreAttentionOptions {
  double softmax_scale = 0;  // 0: 1/sqrt(head dim of q) (ops::attention)
  bool causal = true;
};

class CoreAttention : public Module {
 public:
  explicit CoreAttention(CoreAttentionOptions options);
  // q [B, S, H, d], k [B, S, G, d], v [B, S, G, dv] (H a multiple of G), doc_ends optional int
  // [B, K] packed-document ends → o [B, S, H, dv].
  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends);
  const CoreAttentionOptions& options() const { return options_; }

  void set_track_max_logits(bool on) { track_max_logits_ = on; }
  bool tracking_max_logits() const { return track_max_logits_; }
  const Tensor& max_logits() const { return max_logits_; }  // undefined before the first forward
  void reset_max_logits() { max_logits_ = Tensor(); }
  // Folds one attention call's fp32 [heads] maxima into the running maximum (skipped while
  // recomputing). forward() does this itself; a strategy that replaces forward reports its own
  // attention calls' maxima here.
  void fold_max_logits(const Tensor& step_max);

 private:
  CoreAttentionOptions options_;
  bool track_max_logits_ = false;
  Tensor max_logits_;
};

}  // namespace loom::nn
