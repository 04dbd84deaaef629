// Multi-latent attention (DeepSeek-V2/V3; DeepSeek-V3's inference/model.py MLA), H heads, dn =
// qk_nope_head_dim, dr = qk_rope_head_dim, dv = v_head_dim:
//   q         = linear_qb(q_layernorm(linear_qa x))   (q_lora_rank > 0; else linear_q x)  [B,S,H,dn+dr]
//   c, k_pe   = split(linear_kva x, [kv_lora_rank, dr]);  k_pe: ONE rope key shared by all heads
//   k_nope, v = split(linear_kvb(kv_layernorm c) [B,S,H,dn+dv], [dn, dv])
//   q_pe, k_pe rotated (interleaved pairs when rope_interleave, as the reference code)
//   o         = linear_proj(core_attention([q_nope; q_pe], [k_nope; k_pe], v))
// softmax scale (dn+dr)^-0.5 · m², m = yarn_get_mscale(factor, mscale_all_dim) under YaRN.
// Generation caches [c; k_pe] per position (kv_cache.h) and attends to it in the latent space, the
// query absorbed through linear_kvb (DeepSeek-V3's inference/model.py "absorb" mode).
// H is read at forward time from linear_qb (linear_q) and linear_kvb, which must agree: a
// tensor-parallel shard keeps the same whole heads of both (and the matching linear_proj columns).
#pragma once

#include "loom/nn/attention.h"

namespace loom::nn {

class MLASelfAttention : public AttentionLayer {
 public:
  MLASelfAttention(const TransformerConfig& config, std::shared_ptr<RotaryEmbedding> rotary);
  Tensor forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) override;
  double softmax_scale() const { return core_attention_->options().softmax_scale; }

 private:
  // Attention with the per-head keys and values rebuilt from the latent (training, a prompt's
  // first forward), and with the query absorbed into the cached latents (generation's next tokens).
  Tensor attend(const Tensor& q_nope, const Tensor& q_pe, const Tensor& latent, const Tensor& k_pe, int64_t heads,
                const Tensor& doc_ends);
  Tensor attend_latent(const Tensor& q_nope, const Tensor& q_pe, const Tensor& cached);

  int64_t q_lora_rank_, kv_lora_rank_, nope_, rope_, v_dim_;
  bool interleaved_;
  std::shared_ptr<RotaryEmbedding> rotary_;
  std::shared_ptr<Linear> linear_q_, linear_qa_, linear_qb_, linear_kva_, linear_kvb_, linear_proj_;
  std::shared_ptr<Norm> q_layernorm_, kv_layernorm_;
};

}  // namespace loom::nn
