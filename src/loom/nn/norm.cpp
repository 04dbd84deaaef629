#include "loom/nn/norm.h"

#include "loom/ops/norm.h"

namespace loom::nn {

RMSNorm::RMSNorm(int64_t dim, double eps, DType params_dtype, DType compute_dtype, Device device)
    : Norm("RMSNorm"), eps_(eps), compute_dtype_(compute_dtype) {
  LOOM_CHECK(dim > 0, ValueError, "RMSNorm: dim must be positive, got ", dim);
  weight_ = &register_parameter("weight", {dim}, params_dtype, Init::ones(), device);
}

Tensor RMSNorm::forward(const Tensor& x) {
  return invoke1(x, [this](const Tensor& in) {
    // f64 inputs (finite-difference tests) compute in f64 whatever the configured dtype.
    const DType compute = in.dtype() == DType::f64 ? DType::f64 : compute_dtype_;
    return ops::rms_norm(in, weight_->tensor, eps_, compute);
  });
}

LayerNorm::LayerNorm(int64_t dim, double eps, DType params_dtype, DType compute_dtype, Device device)
    : Norm("LayerNorm"), eps_(eps), compute_dtype_(compute_dtype) {
  LOOM_CHECK(dim > 0, ValueError, "LayerNorm: dim must be positive, got ", dim);
  weight_ = &register_parameter("weight", {dim}, params_dtype, Init::ones(), device);
  bias_ = &register_parameter("bias", {dim}, params_dtype, Init::zeros(), device);
}

Tensor LayerNorm::forward(const Tensor& x) {
  return invoke1(x, [this](const Tensor& in) {
    const DType compute = in.dtype() == DType::f64 ? DType::f64 : compute_dtype_;
    return ops::layer_norm(in, weight_->tensor, bias_->tensor, eps_, compute);
  });
}

std::shared_ptr<Norm> make_norm(const TransformerConfig& c, int64_t dim) { return make_norm(c, dim, c.norm_epsilon); }

std::shared_ptr<Norm> make_norm(const TransformerConfig& c, int64_t dim, double eps) {
  if (c.normalization == NormKind::layer_norm)
    return std::make_shared<LayerNorm>(dim, eps, c.params_dtype, c.layernorm_compute_dtype);
  return std::make_shared<RMSNorm>(dim, eps, c.params_dtype, c.layernorm_compute_dtype);
}

}  // namespace loom::nn
