#include "loom/nn/attention.h"

#include <algorithm>

#include "loom/autograd/checkpoint.h"
#include "loom/ops/attention.h"
#include "loom/ops/shape.h"

namespace loom::nn {

void AttentionLayer::fold_max_logits(const Tensor& step_max) {
  if (!step_max.defined() || autograd::is_recomputing()) return;
  if (!max_logits_.defined()) {
    max_logits_ = step_max.clone();
    return;
  }
  float* acc = max_logits_.data<float>();
  const float* s = step_max.data<float>();
  for (int64_t h = 0; h < max_logits_.numel(); ++h) acc[h] = std::max(acc[h], s[h]);
}

SelfAttention::SelfAttention(const TransformerConfig& c, std::shared_ptr<RotaryEmbedding> rotary)
    : AttentionLayer("SelfAttention"),
      heads_(c.num_attention_heads),
      kv_heads_(c.num_key_value_heads),
      head_dim_(c.head_dim),
      interleaved_(c.rope_interleave),
      rotary_(std::move(rotary)) {
  LinearOptions o;
  o.bias = c.attention_bias;
  o.dtype = c.params_dtype;
  o.init = Init::normal(c.init_std);
  linear_q_ = register_module("linear_q", std::make_shared<Linear>(c.hidden_size, heads_ * head_dim_, o));
  linear_k_ = register_module("linear_k", std::make_shared<Linear>(c.hidden_size, kv_heads_ * head_dim_, o));
  linear_v_ = register_module("linear_v", std::make_shared<Linear>(c.hidden_size, kv_heads_ * head_dim_, o));
  linear_proj_ = register_module("linear_proj", std::make_shared<Linear>(heads_ * head_dim_, c.hidden_size, o));
  if (c.qk_layernorm) {
    q_layernorm_ = register_module("q_layernorm", make_norm(c, head_dim_));
    k_layernorm_ = register_module("k_layernorm", make_norm(c, head_dim_));
  }
}

Tensor SelfAttention::forward(const Tensor& x, const Tensor& position_ids, const Tensor& doc_ends) {
  return invoke({x, position_ids, doc_ends}, [this](const std::vector<Tensor>& in) {
    const Tensor& h = in[0];
    const int64_t B = h.size(0), S = h.size(1);
    Tensor q = ops::reshape(linear_q_->forward(h), {B, S, heads_, head_dim_});
    Tensor k = ops::reshape(linear_k_->forward(h), {B, S, kv_heads_, head_dim_});
    Tensor v = ops::reshape(linear_v_->forward(h), {B, S, kv_heads_, head_dim_});
    if (q_layernorm_) {
      q = q_layernorm_->forward(q);
      k = k_layernorm_->forward(k);
    }
    q = rotary_->apply(q, in[1], interleaved_);
    k = rotary_->apply(k, in[1], interleaved_);
    ops::AttentionOptions opt;
    opt.causal = true;
    opt.doc_ends = in[2];
    opt.track_max_logits = track_max_logits_;
    Tensor step_max;
    Tensor o = ops::attention(q, k, v, opt, track_max_logits_ ? &step_max : nullptr);
    fold_max_logits(step_max);
    return std::vector<Tensor>{linear_proj_->forward(ops::reshape(o, {B, S, heads_ * head_dim_}))};
  })[0];
}

}  // namespace loom::nn
