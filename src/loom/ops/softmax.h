// Softmax and log-softmax along a dim (computed in fp32 or better).
#pragma once

#include "loom/core/tensor.h"

namespace loom::ops {

Tensor softmax(const Tensor& x, int dim = -1);
Tensor log_softmax(const Tensor& x, int dim = -1);

}  // namespace loom::ops
