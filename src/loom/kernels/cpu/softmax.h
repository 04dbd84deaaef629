// Softmax and log-softmax over the last dim, computed in fp32 (fp64 for f64) whatever the storage
// dtype, with the max subtracted for stability.
#pragma once

#include "loom/core/tensor.h"

namespace loom::kernels::cpu {

Tensor softmax_last(const Tensor& x, bool log);
// grad wrt x given y = softmax(x) (or log_softmax when log) and grad wrt y.
Tensor softmax_last_backward(const Tensor& grad, const Tensor& y, bool log);

}  // namespace loom::kernels::cpu
