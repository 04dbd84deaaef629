// Linear and Embedding layers.
#pragma once

#include "loom/nn/module.h"

namespace loom::nn {

struct LinearOptions {
  bool bias = false;
  DType dtype = DType::f32;   // params_dtype
  Init init = Init::normal(0.02);
  Device device = Device::meta();
};

// y = x · Wᵀ (+ b), W [out, in]. W and b are cast to x's dtype when they differ (params_dtype vs
// compute_dtype).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, const LinearOptions& options = {});
  Tensor forward(const Tensor& x);
  Parameter& weight() { return *weight_; }
  Parameter* bias() { return bias_; }
  // Read from the weight, so they are the local sizes once a strategy has sharded it.
  int64_t in_features() const { return weight_->tensor.size(1); }
  int64_t out_features() const { return weight_->tensor.size(0); }

 private:
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, DType dtype = DType::f32, Init init = Init::normal(0.02),
            Device device = Device::meta());
  // ids [...] int32/int64 → [..., dim]
  Tensor forward(const Tensor& ids);
  Parameter& weight() { return *weight_; }

 private:
  Parameter* weight_;
};

}  // namespace loom::nn
