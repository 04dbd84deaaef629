// Scaled dot-product attention, flash-style (FlashAttention, Dao et al.): never stores the
// Sq×Sk score matrix, keeps only the per-row log-sum-exp for backward.
#pragma once

#include <cstdint>

#include "loom/core/tensor.h"

namespace loom::ops {

struct AttentionOptions {
  // 0 ⇒ 1/sqrt(head dim of q). MLA passes its own (DeepSeek-V3 with YaRN: mscale² / sqrt(192)).
  double softmax_scale = 0;
  bool causal = true;
  // Position of q row 0 relative to k row 0 (context parallel): with causal, row i sees keys
  // j <= i + q_offset.
  int64_t q_offset = 0;
  // Optional int32/int64 [B, K]: per sample, ascending exclusive end positions of the packed
  // documents (MindFormers' compressed actual_seq_len, padded with the key sequence
  // length). A query sees only keys of its own document; positions at or past the last end belong
  // to no document and see nothing.
  Tensor doc_ends;
  // Also return the per-head max of the scaled logits over unmasked entries (Muon QK-clip).
  bool track_max_logits = false;
  // Generation against a KV cache: a few query rows over many keys, never differentiated. Runs
  // the device's decode kernel, which reads the cache in place instead of packing it for tiles.
  bool decoding = false;
};

// q [B, Sq, H, D], k [B, Sk, KV, D], v [B, Sk, KV, Dv] with H % KV == 0 (GQA: query head h uses
// kv head h / (H/KV), K/V never repeated) → out [B, Sq, H, Dv] in q's dtype. Any strides work
// (views of a fused projection are read in place when their last dim is dense). f32/bf16/f16
// compute in fp32; f64 computes in f64. Query rows that see no key give zeros.
// When opt.track_max_logits, *max_logits receives an fp32 [H] tensor: the max over batch, query
// rows and visible keys of softmax_scale·q·k (-inf for a head with no visible key); it is not
// differentiable.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v,
                 const AttentionOptions& opt = {}, Tensor* max_logits = nullptr);

}  // namespace loom::ops
