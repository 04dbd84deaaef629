// Differentiable RMSNorm and LayerNorm over the last dim (MindFormers FusedRMSNorm /
// FusedLayerNorm, spec other_training_features.md §3; Qwen3 RMSNorm in fp32, as HF's Qwen3RMSNorm).
// They work on any leading dims, so per-head qk-norm is rms_norm(q [B, S, H, hd], w [hd]).
#pragma once

#include "loom/core/tensor.h"

namespace loom::ops {

// weight ⊙ x · rsqrt(mean(x²) + eps). `compute_dtype` is the model section's
// layernorm_compute_dtype: float32 (default) or float64 compute inside the fused kernel (bf16/f16
// inputs are widened, the result rounded once to x's dtype); bfloat16/float16 cast x and weight
// to that dtype around the fp32 kernel and cast the result back, as MindFormers does. The output
// has x's dtype. Only x and the per-row rstd are kept for backward (plus the weight handle).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-5,
                DType compute_dtype = DType::f32);

// (x − mean) · rsqrt(var + eps) ⊙ weight + bias; weight and bias may be undefined.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
                  double eps = 1e-5, DType compute_dtype = DType::f32);

}  // namespace loom::ops
