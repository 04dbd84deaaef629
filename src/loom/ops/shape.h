// Differentiable shape ops. Views share storage with their input (like the raw Tensor methods)
// but record how to route the grad back.
#pragma once

#include <vector>

#include "loom/core/tensor.h"

namespace loom::ops {

Tensor reshape(const Tensor& x, const Shape& shape);  // -1 infers one dim; copies if needed
Tensor transpose(const Tensor& x, int d0, int d1);
Tensor permute(const Tensor& x, const std::vector<int>& order);
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& shape);
Tensor unsqueeze(const Tensor& x, int dim);
Tensor squeeze(const Tensor& x, int dim);
Tensor contiguous(const Tensor& x);
Tensor flatten(const Tensor& x, int start_dim = 0, int end_dim = -1);

// Concatenate along dim (all other dims equal, same dtype).
Tensor cat(const std::vector<Tensor>& xs, int dim);
// Split into pieces of the given sizes along dim (sizes must sum to the dim).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim);
// Split into `chunks` equal pieces.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim);
// Stack along a new dim.
Tensor stack(const std::vector<Tensor>& xs, int dim);

}  // namespace loom::ops
