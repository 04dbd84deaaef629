// RMSNorm and LayerNorm over the last dim, forward and backward. Inputs of any floating storage
// dtype are computed in `compute` (f32, or f64 — f64 inputs always compute in f64) and the output
// is rounded once to the input's dtype. Backward recomputes the normalised row from the saved
// input and per-row statistics, so forward keeps nothing of size [rows, D] besides x itself.
//
// The weight/bias grads are sums over rows. Rows are cut into fixed chunks (a function of the row
// count only), each chunk sums its rows in order, and the chunk partials are added in chunk order:
// the result is bitwise the same for any thread count.
#pragma once

#include "loom/core/tensor.h"

namespace loom::kernels::cpu {

// y = weight ⊙ x · rstd with rstd = 1/sqrt(mean(x²) + eps), for x [..., D], weight [D] (any
// floating dtype; undefined = no scale). Returns y (x's dtype and shape, contiguous) and fills
// rstd [rows] in the compute dtype.
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, DType compute, Tensor& rstd);
// Grads of rms_norm given the saved x and rstd. dx gets x's dtype; dweight is fp32 for bf16/f16
// weights (main-grad convention), else the weight's dtype. Null pointers skip that grad.
void rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                       const Tensor& rstd, Tensor* dx, Tensor* dweight);

// y = (x − mean) · rstd ⊙ weight + bias, rstd = 1/sqrt(var + eps) (biased variance). weight and
// bias are optional. Fills mean and rstd [rows] in the compute dtype.
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  DType compute, Tensor& mean, Tensor& rstd);
void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, Tensor* dx, Tensor* dweight,
                         Tensor* dbias);

// The fixed row chunk used by the deterministic weight-grad reduction (exposed for tests).
int64_t norm_grad_rows_per_chunk(int64_t rows);

}  // namespace loom::kernels::cpu
