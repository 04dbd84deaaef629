// Reductions. Each output element is accumulated in a fixed order (fp64 accumulators), so the
// result never depends on the thread count.
#pragma once

#include <vector>

#include "loom/core/tensor.h"

namespace loom::kernels::cpu {

// Sum over `dims` (empty = all dims). Result keeps x's dtype.
Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim);
// Reduces a broadcast result back to `shape` (sums the broadcast dimensions): the backward of
// broadcasting.
Tensor sum_to_shape(const Tensor& x, const Shape& shape);
// The largest element of x (int32/int64 or floating; NaN when any element is NaN).
double max_value(const Tensor& x);
// (The fixed-order sum of squares behind grad norms is sum_squares in optimizer.h.)

}  // namespace loom::kernels::cpu
