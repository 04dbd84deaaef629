#include "loom/ops/loss.h"

#include <optional>

#include "loom/core/trace.h"
#include "loom/autograd/function.h"
#include "loom/autograd/node.h"
#include "loom/kernels/kernel_table.h"

namespace loom::ops {

using autograd::BackwardContext;
using kernels::KernelTable;
using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

constexpr double kMaskEpsilon = kLossMaskEpsilon;

DType loss_dtype(DType input) { return input == DType::f64 ? DType::f64 : DType::f32; }

// Σ mask over the rows (the float64 row weights, summed in order).
double mask_sum(const KernelTable& k, const Tensor& row_weights) {
  return k.sum(row_weights, {}, false).item();
}

// The loss as a 0-d tensor on the device the loss was computed from.
Tensor loss_scalar(double value, DType input, const Device& device) {
  return Tensor::full(Shape{}, value, loss_dtype(input), device);
}

void check_labels_shape(const char* op, const Tensor& input, const Tensor& labels, const char* what) {
  Shape rows = input.shape();
  rows.pop_back();
  LOOM_CHECK(labels.shape() == rows, ShapeError, op, ": labels have shape ", labels.shape().str(),
             " but ", what, " ", input.shape().str(), " needs one label per row, i.e. ", rows.str());
}

}  // namespace

double loss_token_count(const Tensor& labels, const Tensor& loss_mask, int64_t vocab, int64_t ignore_index) {
  const KernelTable& k = kernels::for_tensor(labels, "loss_token_count");
  return mask_sum(k, k.cross_entropy_row_weights(labels, loss_mask, ignore_index, vocab, "loss_token_count"));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_mask,
                     int64_t ignore_index) {
  LOOM_TRACE("op", "cross_entropy");
  check_floating(logits, "cross_entropy", "logits");
  const KernelTable& k = kernels::for_tensor(logits, "cross_entropy");
  LOOM_CHECK(logits.dim() >= 1, ShapeError, "cross_entropy: logits must be [..., vocab], got a scalar");
  check_labels_shape("cross_entropy", logits, labels, "logits");
  const int64_t V = logits.shape()[logits.dim() - 1];
  const int64_t N = labels.numel();
  Tensor weights = k.cross_entropy_row_weights(labels, loss_mask, ignore_index, V, "cross_entropy");
  Tensor logits2 = logits.dim() == 2 ? logits : logits.reshape({N, V});
  Tensor lse;
  const double total = k.cross_entropy_forward(logits2, labels, weights, lse);
  const double denom = mask_sum(k, weights) + kMaskEpsilon;
  Tensor loss = loss_scalar(total / denom, logits.dtype(), logits.device());
  record("cross_entropy", {&logits}, {&loss}, {logits2, labels, weights, lse},
         [denom, shape = logits.shape()](const Grads& g, const BackwardContext& ctx) -> Grads {
           const double scale = g[0].item() / denom;
           Tensor d = kernels::for_tensor(ctx.saved(0), "cross_entropy")
                          .cross_entropy_backward(ctx.saved(0), ctx.saved(1), ctx.saved(2), ctx.saved(3), scale);
           return {d.view(shape)};
         });
  return loss;
}

Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                            const Tensor& loss_mask, int64_t ignore_index, int64_t chunk_tokens,
                            bool grads_in_forward, const kernels::VocabShard* shard) {
  LOOM_TRACE("op", "linear_cross_entropy");
  const char* op = "linear_cross_entropy";
  check_floating(hidden, op, "hidden");
  const KernelTable& k = kernels::for_tensor(hidden, op);
  check_same_dtype(hidden, weight, op);
  LOOM_CHECK(weight.dim() == 2, ShapeError, op, ": weight must be [vocab, hidden], got ", weight.shape().str());
  LOOM_CHECK(hidden.dim() >= 1 && hidden.shape()[hidden.dim() - 1] == weight.shape()[1], ShapeError, op,
             ": hidden ", hidden.shape().str(), " has last dim ", hidden.dim() ? hidden.shape()[hidden.dim() - 1] : 0,
             " but weight ", weight.shape().str(), " expects ", weight.shape()[1], " (weight is [vocab, hidden])");
  check_labels_shape(op, hidden, labels, "hidden");
  const int64_t D = weight.shape()[1], N = labels.numel();
  if (shard)
    LOOM_CHECK(shard->begin >= 0 && shard->begin + weight.shape()[0] <= shard->size && shard->all_reduce, ValueError,
               op, ": vocabulary shard [", shard->begin, ", ", shard->begin + weight.shape()[0], ") must lie in [0, ",
               shard->size, ") and come with its all_reduce");
  const int64_t V = shard ? shard->size : weight.shape()[0];
  Tensor weights = k.cross_entropy_row_weights(labels, loss_mask, ignore_index, V, op);
  Tensor hidden2 = hidden.dim() == 2 ? hidden : hidden.reshape({N, D});
  const double denom = mask_sum(k, weights) + kMaskEpsilon;
  const Shape in_shape = hidden.shape();
  Tensor lse;
  if (grads_in_forward && autograd::needs_grad(hidden, weight)) {
    // The grads of the loss (for an upstream grad of 1) come out of the forward pass; backward
    // only scales them by the upstream grad.
    Tensor dh, dw;
    const double total = k.linear_cross_entropy_forward(
        hidden2, weight, labels, weights, chunk_tokens, lse, 1.0 / denom,
        hidden.requires_grad() ? &dh : nullptr, weight.requires_grad() ? &dw : nullptr, shard);
    Tensor loss = loss_scalar(total / denom, hidden.dtype(), hidden.device());
    record(op, {&hidden, &weight}, {&loss}, {dh, dw},
           [in_shape](const Grads& g, const BackwardContext& ctx) -> Grads {
             const double up = g[0].item();
             Grads r(2);
             for (size_t i = 0; i < 2; ++i) {
               if (!ctx.needs_input_grad(i)) continue;
               Tensor d = ctx.saved(i);
               r[i] = up == 1.0 ? d : kernels::for_tensor(d, "linear_cross_entropy").affine(d, up, 0.0);
             }
             if (r[0].defined()) r[0] = r[0].view(in_shape);
             return r;
           });
    return loss;
  }
  const double total = k.linear_cross_entropy_forward(hidden2, weight, labels, weights, chunk_tokens, lse,
                                                     0.0, nullptr, nullptr, shard);
  Tensor loss = loss_scalar(total / denom, hidden.dtype(), hidden.device());
  // Backward needs only the shard's row offset (the saved lse is already the global one).
  std::optional<kernels::VocabShard> rows;
  if (shard) rows = kernels::VocabShard{shard->begin, shard->size, {}};
  record(op, {&hidden, &weight}, {&loss}, {hidden2, weight, labels, weights, lse},
         [denom, chunk_tokens, in_shape, rows](const Grads& g, const BackwardContext& ctx) -> Grads {
           const double scale = g[0].item() / denom;
           Tensor dh, dw;
           kernels::for_tensor(ctx.saved(0), "linear_cross_entropy")
               .linear_cross_entropy_backward(ctx.saved(0), ctx.saved(1), ctx.saved(2), ctx.saved(3),
                                              ctx.saved(4), scale, chunk_tokens,
                                              ctx.needs_input_grad(0) ? &dh : nullptr,
                                              ctx.needs_input_grad(1) ? &dw : nullptr, rows ? &*rows : nullptr);
           return {dh.defined() ? dh.view(in_shape) : dh, dw};
         });
  return loss;
}

}  // namespace loom::ops
