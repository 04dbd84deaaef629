#include "loom/nn/attention.h"

#include "loom/autograd/grad_mode.h"
#include "loom/ops/attention.h"
#include "loom/ops/shape.h"

namespace loom::nn {

KVCacheSlot& AttentionLayer::store(const Tensor& keys, const Tensor& values) {
  KVCacheSlot& s = cache_->slot(slot_);
  const int64_t B = keys.size(0), S = keys.size(1), start = cache_->length();
  LOOM_CHECK(B == cache_->batch() && start + S <= cache_->capacity(), ShapeError, "KV cache: ", B, " rows of ", S,
             " positions from ", start, " do not fit a cache of ", cache_->batch(), " rows and ", cache_->capacity(),
             " positions");
  auto put = [&](Tensor& slot, const Tensor& x) {
    if (!slot.defined()) slot = Tensor::empty({B, cache_->capacity(), x.size(2), x.size(3)}, x.dtype());
    slot.narrow(1, start, S).copy_(x);
  };
  put(s.keys, keys);
  if (values.defined()) put(s.values, values);
  return s;
}

Tensor AttentionLayer::cached_attention(const Tensor& q, const Tensor& keys, const Tensor& values) const {
  ops::AttentionOptions opt;
  opt.softmax_scale = core_attention_->options().softmax_scale;
  opt.q_offset = cache_->length();
  opt.doc_ends = cache_->doc_ends(keys.size(1));
  opt.decoding = !autograd::grad_enabled();  // a cache attached under grad (tests) takes the flash path
  return ops::attention(q, keys, values, opt);
}

Tensor split_heads(const Tensor& projected, int64_t head_width, const char* what) {
  LOOM_CHECK(projected.dim() == 3, ShapeError, "attention: ", what, " output ", projected.shape().str(),
             " must be [batch, seq, heads·", head_width, "]");
  const int64_t width = projected.size(2);
  LOOM_CHECK(width % head_width == 0, ShapeError, "attention: ", what, " output ", projected.shape().str(),
             " does not hold whole heads of ", head_width,
             " (a sharded projection must keep whole heads: shard its weight rows in multiples of ",
             head_width, ")");
  return ops::reshape(projected, {projected.size(0), projected.size(1), width / head_width, head_width});
}

SelfAttention::SelfAttention(const TransformerConfig& c, std::shared_ptr<RotaryEmbedding> rotary)
    : AttentionLayer("SelfAttention"), head_dim_(c.head_dim), interleaved_(c.rope_interleave), rotary_(std::move(rotary)) {
  LinearOptions o;
  o.bias = c.attention_bias;
  o.dtype = c.params_dtype;
  o.init = Init::normal(c.init_std);
  const int64_t q_width = c.num_attention_heads * head_dim_, kv_width = c.num_key_value_heads * head_dim_;
  linear_q_ = register_module("linear_q", std::make_shared<Linear>(c.hidden_size, q_width, o));
  linear_k_ = register_module("linear_k", std::make_shared<Linear>(c.hidden_size, kv_width, o));
  linear_v_ = register_module("linear_v", std::make_shared<Linear>(c.hidden_size, kv_width, o));
  core_attention_ = register_module("core_attention", std::make_shared<CoreAttention>(CoreAttentionOptions{}));
  linear_proj_ = register_module("linear_proj", std::make_shared<Linear>(q_width, c.hidden_size, o));
  if (c.qk_layernorm) {
    q_layernorm_ = register_module("q_layernorm", make_norm(c, head_dim_));
    k_layernorm_ = register_module("k_layernorm", make_norm(c, head_dim_));
  }
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) {
  return invoke({x, position_ids, doc_ends}, [this](const std::vector<Tensor>& in) {
    const Tensor& h = in[0];
    Tensor q = split_heads(linear_q_->forward(h), head_dim_, "linear_q");
    Tensor k = split_heads(linear_k_->forward(h), head_dim_, "linear_k");
    Tensor v = split_heads(linear_v_->forward(h), head_dim_, "linear_v");
    if (q_layernorm_) {
      q = q_layernorm_->forward(q);
      k = k_layernorm_->forward(k);
    }
    q = rotary_->apply(q, in[1], interleaved_);
    k = rotary_->apply(k, in[1], interleaved_);
    Tensor o;
    if (cache_) {
      KVCacheSlot& s = store(k, v);
      const int64_t seen = cache_->length() + q.size(1);
      o = cached_attention(q, s.keys.narrow(1, 0, seen), s.values.narrow(1, 0, seen));
    } else {
      o = core_attention_->forward(q, k, v, in[2]);
    }
    return std::vector<Tensor>{linear_proj_->forward(ops::flatten(o, 2))};
  })[0];
}

}  // namespace loom::nn
