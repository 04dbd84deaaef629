#include "loom/nn/mla.h"

#include <cmath>

#include "loom/ops/linear.h"
#include "loom/ops/rope.h"
#include "loom/ops/weight_cast.h"
#include "loom/ops/shape.h"

namespace loom::nn {

namespace {
// The latent norms (HF q_a_layernorm, kv_a_layernorm) use a fixed epsilon in transformers'
// DeepseekV3Attention and in DeepSeek's reference MLA (RMSNorm(q_lora_rank) / RMSNorm(kv_lora_rank)
// with the default 1e-6), not rms_norm_eps, which only the decoder's norms read.
constexpr double kLatentNormEps = 1e-6;
}  // namespace

MLASelfAttention::MLASelfAttention(const TransformerConfig& c, std::shared_ptr<RotaryEmbedding> rotary)
    : AttentionLayer("MLASelfAttention"),
      q_lora_rank_(c.q_lora_rank),
      kv_lora_rank_(c.kv_lora_rank),
      nope_(c.qk_nope_head_dim),
      rope_(c.qk_rope_head_dim),
      v_dim_(c.v_head_dim),
      interleaved_(c.rope_interleave),
      rotary_(std::move(rotary)) {
  LinearOptions o;
  o.bias = false;
  o.dtype = c.params_dtype;
  o.init = Init::normal(c.init_std);
  const int64_t D = c.hidden_size, H = c.num_attention_heads, qk = nope_ + rope_;
  if (q_lora_rank_ > 0) {
    LinearOptions qa = o;
    qa.bias = c.attention_bias;  // HF q_a_proj carries attention_bias
    linear_qa_ = register_module("linear_qa", std::make_shared<Linear>(D, q_lora_rank_, qa));
    q_layernorm_ = register_module("q_layernorm", make_norm(c, q_lora_rank_, kLatentNormEps));
    linear_qb_ = register_module("linear_qb", std::make_shared<Linear>(q_lora_rank_, H * qk, o));
  } else {
    linear_q_ = register_module("linear_q", std::make_shared<Linear>(D, H * qk, o));
  }
  LinearOptions kva = o;
  kva.bias = c.attention_bias;  // HF kv_a_proj_with_mqa carries attention_bias
  linear_kva_ = register_module("linear_kva", std::make_shared<Linear>(D, kv_lora_rank_ + rope_, kva));
  kv_layernorm_ = register_module("kv_layernorm", make_norm(c, kv_lora_rank_, kLatentNormEps));
  linear_kvb_ = register_module("linear_kvb", std::make_shared<Linear>(kv_lora_rank_, H * (nope_ + v_dim_), o));
  CoreAttentionOptions core;
  core.softmax_scale = 1.0 / std::sqrt(static_cast<double>(qk)) * ops::yarn_softmax_scale_factor(c.rope_scaling);
  core_attention_ = register_module("core_attention", std::make_shared<CoreAttention>(core));
  LinearOptions proj = o;
  proj.bias = c.attention_bias;  // HF o_proj carries attention_bias
  linear_proj_ = register_module("linear_proj", std::make_shared<Linear>(H * v_dim_, D, proj));
}

Tensor MLASelfAttention::forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) {
  return invoke({x, position_ids, doc_ends}, [this](const std::vector<Tensor>& in) {
    const Tensor& h = in[0];
    Tensor q = q_lora_rank_ > 0 ? linear_qb_->forward(q_layernorm_->forward(linear_qa_->forward(h)))
                                : linear_q_->forward(h);
    q = split_heads(q, nope_ + rope_, q_lora_rank_ > 0 ? "linear_qb" : "linear_q");
    const int64_t heads = q.size(2);
    auto q_parts = ops::split(q, {nope_, rope_}, 3);
    Tensor q_pe = rotary_->apply(q_parts[1], in[1], interleaved_);

    auto kv_parts = ops::split(linear_kva_->forward(h), {kv_lora_rank_, rope_}, 2);
    // The latent's batch and sequence, which need not be h's: under sequence parallelism h is this
    // rank's piece of the sequence and the latents come back whole.
    const int64_t B = kv_parts[1].size(0), S = kv_parts[1].size(1);
    Tensor k_pe = rotary_->apply(ops::reshape(kv_parts[1], {B, S, 1, rope_}), in[1], interleaved_);
    Tensor latent = kv_layernorm_->forward(kv_parts[0]);
    Tensor o;
    if (cache_) {
      // Generation caches [c; k_pe] only; a prompt's first forward attends as training does, later
      // positions in the latent space.
      KVCacheSlot& s = store(ops::cat({ops::reshape(latent, {B, S, 1, kv_lora_rank_}), k_pe}, 3), Tensor());
      o = cache_->length() == 0 ? attend(q_parts[0], q_pe, latent, k_pe, heads, in[2])
                                : attend_latent(q_parts[0], q_pe, s.keys.narrow(1, 0, cache_->length() + S));
    } else {
      o = attend(q_parts[0], q_pe, latent, k_pe, heads, in[2]);
    }
    return std::vector<Tensor>{linear_proj_->forward(ops::flatten(o, 2))};
  })[0];
}

Tensor MLASelfAttention::attend(const Tensor& q_nope, const Tensor& q_pe, const Tensor& latent, const Tensor& k_pe,
                                int64_t heads, const Tensor& doc_ends) {
  Tensor kv = split_heads(linear_kvb_->forward(latent), nope_ + v_dim_, "linear_kvb");
  LOOM_CHECK(kv.size(2) == heads, ShapeError, "MLA: linear_kvb gives ", kv.size(2), " heads but ",
             q_lora_rank_ > 0 ? "linear_qb" : "linear_q", " gives ", heads,
             "; a sharded attention must keep the same heads of both up-projections");
  auto k_parts = ops::split(kv, {nope_, v_dim_}, 3);
  const int64_t B = k_pe.size(0), S = k_pe.size(1);
  Tensor q_full = ops::cat({q_nope, q_pe}, 3);
  Tensor k_full = ops::cat({k_parts[0], ops::expand(k_pe, {B, S, heads, rope_})}, 3);
  if (cache_) return cached_attention(q_full, k_full, k_parts[1]);
  return core_attention_->forward(q_full, k_full, k_parts[1], doc_ends);
}

Tensor MLASelfAttention::attend_latent(const Tensor& q_nope, const Tensor& q_pe, const Tensor& cached) {
  // linear_kvb's rows are, per head, dn rows of k_nope then dv rows of v: W_uk [H, dn, c] and
  // W_uv [H, dv, c]. q_nope·k_nope = (W_ukᵀ q_nope)·c, and o = W_uv (softmax · c): attention over
  // the cached latents with one shared key [c; k_pe] per position, MQA with head dim c + dr.
  const int64_t B = q_nope.size(0), S = q_nope.size(1), H = q_nope.size(2), c = kv_lora_rank_;
  const Tensor w = ops::reshape(ops::cast_weight(linear_kvb_->weight().tensor, q_nope.dtype()), {H, nope_ + v_dim_, c});
  const auto w_split = ops::split(w, {nope_, v_dim_}, 1);
  const Tensor w_parts[2] = {w_split[0].contiguous(), w_split[1].contiguous()};
  // [B, S, H, dn] -> [H, B·S, dn] · [H, dn, c] -> [B, S, H, c]
  const Tensor q_heads = ops::reshape(ops::permute(q_nope, {2, 0, 1, 3}), {H, B * S, nope_});
  const Tensor q_latent = ops::permute(ops::reshape(ops::bmm(q_heads, w_parts[0]), {H, B, S, c}), {1, 2, 0, 3});
  const Tensor query = ops::cat({q_latent, q_pe}, 3);
  const Tensor o_latent = cached_attention(query, cached, cached.narrow(3, 0, c));  // [B, S, H, c]
  // [B, S, H, c] -> [H, B·S, c] · [H, c, dv] -> [B, S, H, dv]
  const Tensor o_heads = ops::reshape(ops::permute(o_latent, {2, 0, 1, 3}), {H, B * S, c});
  return ops::permute(ops::reshape(ops::bmm(o_heads, w_parts[1], false, true), {H, B, S, v_dim_}), {1, 2, 0, 3});
}

}  // namespace loom::nn
