#include "loom/nn/core_attention.h"

#include "loom/autograd/checkpoint.h"
#include "loom/ops/attention.h"
#include "loom/ops/elementwise.h"

namespace loom::nn {

CoreAttention::CoreAttention(CoreAttentionOptions options) : Module("CoreAttention"), options_(options) {}

void CoreAttention::fold_max_logits(const Tensor& step_max) {
  if (!step_max.defined() || !autograd::records_training_statistics()) return;
  if (!max_logits_.defined()) {
    max_logits_ = step_max.clone();
    return;
  }
  LOOM_CHECK(step_max.shape() == max_logits_.shape(), ShapeError, "CoreAttention: max logits ",
             step_max.shape().str(), " of this forward do not match the running ", max_logits_.shape().str(),
             "; the number of heads changed between forwards without reset_max_logits()");
  max_logits_ = ops::maximum(max_logits_, step_max);
}

Tensor CoreAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends) {
  return invoke({q, k, v, doc_ends}, [this](const std::vector<Tensor>& in) {
    ops::AttentionOptions opt;
    opt.softmax_scale = options_.softmax_scale;
    opt.causal = options_.causal;
    opt.doc_ends = in[3];
    opt.track_max_logits = track_max_logits_;
    Tensor step_max;
    Tensor o = ops::attention(in[0], in[1], in[2], opt, track_max_logits_ ? &step_max : nullptr);
    fold_max_logits(step_max);
    return std::vector<Tensor>{o};
  })[0];
}

}  // namespace loom::nn
