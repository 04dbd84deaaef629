// Differentiable reductions.
#pragma once

#include <vector>

#include "loom/core/tensor.h"

namespace loom::ops {

// Sum over dims (empty = all).
Tensor sum(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int>& dims = {}, bool keepdim = false);

}  // namespace loom::ops
