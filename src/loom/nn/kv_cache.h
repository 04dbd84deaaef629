// What generation keeps of each attention layer between decoding steps, so that a new token
// attends to the ones before it without recomputing them.
//
//   SelfAttention (MHA/GQA)  keys and values of the KV heads only, [B, capacity, G, head_dim],
//                            keys after qk-norm and RoPE
//   MLASelfAttention         the compressed latent and the rope key, [c; k_pe] per token
//                            (kv_lora_rank + qk_rope_head_dim values, one "head"): a new token's
//                            query is absorbed into the latent space (mla.h), so the per-head keys
//                            and values are never rebuilt
//
// Several prompts share one cache: they are left-padded to one length, so every row's next
// position is the same, and each row's keys before its first real token are masked off by the
// compressed document mask [pad_b, keys] (ops::attention's doc_ends: a query sees only keys of
// its own document). Positions given to RoPE are counted from each row's first real token.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/tensor.h"

namespace loom::nn {

struct KVCacheSlot {
  Tensor keys;    // [B, capacity, G, dk]
  Tensor values;  // [B, capacity, G, dv]; undefined for MLA (its values are the keys' latent part)
};

class KVCache {
 public:
  // `pad[b]` positions of row b are padding before its prompt; `capacity` positions in all.
  KVCache(int64_t capacity, std::vector<int64_t> pad);

  int64_t batch() const { return static_cast<int64_t>(pad_.size()); }
  int64_t capacity() const { return capacity_; }
  // Positions written so far (the same for every row); the next forward starts there.
  int64_t length() const { return length_; }
  // After a forward of `n` positions through every layer.
  void advance(int64_t n);
  // Back to `length` positions (a rejected speculative draft): later positions are overwritten.
  void truncate(int64_t length);

  // Layer `layer`'s slot (attention layers numbered as nn::CausalLM::attention_layers), its
  // tensors allocated by the layer on first use with `keys_like` / `values_like`'s last dims.
  KVCacheSlot& slot(size_t layer);
  // int64 [B, 2]: [pad_b, keys], the mask that keeps each row's queries off its padding when
  // they attend over the first `keys` positions.
  Tensor doc_ends(int64_t keys) const;
  // int32 [B, n]: the RoPE positions of the next n positions (0 at each row's first real token).
  Tensor positions(int64_t n) const;
  const std::vector<int64_t>& pad() const { return pad_; }

  // Bytes the slots hold.
  int64_t bytes() const;

 private:
  int64_t capacity_;
  int64_t length_ = 0;
  std::vector<int64_t> pad_;
  std::vector<KVCacheSlot> slots_;
};

}  // namespace loom::nn
