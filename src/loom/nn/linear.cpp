#include "loom/nn/linear.h"

#include "loom/ops/elementwise.h"
#include "loom/ops/index.h"
#include "loom/ops/linear.h"
#include "loom/ops/weight_cast.h"

namespace loom::nn {

Linear::Linear(int64_t in_features, int64_t out_features, const LinearOptions& o)
    : Module("Linear") {
  LOOM_CHECK(in_features > 0 && out_features > 0, ValueError, "Linear: sizes must be positive, got in=",
             in_features, " out=", out_features);
  weight_ = &register_parameter("weight", {out_features, in_features}, o.dtype, o.init, o.device);
  weight_->multiplied_in_compute_dtype = true;
  if (o.bias) {
    bias_ = &register_parameter("bias", {out_features}, o.dtype, Init::zeros(), o.device);
    bias_->multiplied_in_compute_dtype = true;
  }
}

Tensor Linear::forward(const Tensor& x) {
  return invoke1(x, [this](const Tensor& in) {
    // Mixed precision: parameters are stored in params_dtype and cast to the activations' dtype
    // (compute_dtype) for the product, once per optimizer step (ops/weight_cast.h); the cast's
    // backward returns the grad in params_dtype.
    Tensor w = ops::cast_weight(weight_->tensor, in.dtype());
    Tensor b = bias_ ? ops::cast_weight(bias_->tensor, in.dtype()) : Tensor();
    return ops::linear(in, w, b);
  });
}

Embedding::Embedding(int64_t num_embeddings, int64_t dim, DType dtype, Init init, Device device)
    : Module("Embedding") {
  LOOM_CHECK(num_embeddings > 0 && dim > 0, ValueError, "Embedding: sizes must be positive, got ",
             num_embeddings, " x ", dim);
  weight_ = &register_parameter("weight", {num_embeddings, dim}, dtype, init, device, false);
}

Tensor Embedding::forward(const Tensor& ids) {
  return invoke1(ids, [this](const Tensor& in) { return ops::embedding(in, weight_->tensor); });
}

}  // namespace loom::nn
