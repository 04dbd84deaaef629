// RMSNorm and LayerNorm modules (MindFormers FusedRMSNorm / FusedLayerNorm,
// other_training_features.md §3): the norm computes in layernorm_compute_dtype and returns the
// input's dtype. `normalization` picks the class; fused_norm=False is rejected by the config.
#pragma once

#include <memory>

#include "loom/nn/module.h"
#include "loom/nn/transformer_config.h"

namespace loom::nn {

class Norm : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& x) = 0;
  Parameter& weight() { return *weight_; }

 protected:
  Parameter* weight_ = nullptr;
};

// weight ⊙ x · rsqrt(mean(x²) + eps); weight [dim] starts at ones.
class RMSNorm : public Norm {
 public:
  RMSNorm(int64_t dim, double eps, DType params_dtype = DType::f32,
          DType compute_dtype = DType::f32, Device device = Device::meta());
  Tensor forward(const Tensor& x) override;

 private:
  double eps_;
  DType compute_dtype_;
};

// (x − mean) · rsqrt(var + eps) ⊙ weight + bias; weight ones, bias zeros.
class LayerNorm : public Norm {
 public:
  LayerNorm(int64_t dim, double eps, DType params_dtype = DType::f32,
            DType compute_dtype = DType::f32, Device device = Device::meta());
  Tensor forward(const Tensor& x) override;

 private:
  double eps_;
  DType compute_dtype_;
  Parameter* bias_;
};

// The norm `config.normalization` names, over the last dim of size `dim`, with epsilon
// config.norm_epsilon (or `eps`).
std::shared_ptr<Norm> make_norm(const TransformerConfig& config, int64_t dim);
std::shared_ptr<Norm> make_norm(const TransformerConfig& config, int64_t dim, double eps);

}  // namespace loom::nn
