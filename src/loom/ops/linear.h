// Linear layers and matrix products, on OpenBLAS GEMM.
#pragma once

#include "loom/core/tensor.h"

namespace loom::ops {

// y = x · wᵀ + b for x [..., K], w [N, K], optional b [N] → y [..., N].
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());
// a [..., M, K] · b [K, N] (b shared by every leading index) or b [..., K, N] (same leading dims).
Tensor matmul(const Tensor& a, const Tensor& b);
// a [B, M, K] · b [B, K, N] (trans flags transpose the last two dims of a or b).
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

}  // namespace loom::ops
