// Elementwise CPU kernels. Binary ops broadcast numpy-style; bf16/f16 load into fp32, compute,
// round back. These do no autograd: the differentiable versions are in loom/ops.
#pragma once

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels::cpu {

using kernels::BinaryOp;
using kernels::UnaryOp;

// out = a (op) b with broadcasting; a and b must share a floating dtype.
Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b, const char* name);
// out = op(a)
Tensor unary(UnaryOp op, const Tensor& a, const char* name);
// out = a * scale + shift
Tensor affine(const Tensor& a, double scale, double shift);
// dst += alpha * src, src broadcast to dst's shape; any floating dtypes (accumulates in fp32, or
// fp64 for f64 tensors). Used for grad accumulation.
void add_(Tensor& dst, const Tensor& src, double alpha = 1.0);
// dst *= value
void scale_(Tensor& dst, double value);

// Activation forwards and backwards (fused, one pass).
Tensor gelu(const Tensor& x, bool tanh_approx);
Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approx);
Tensor silu_backward(const Tensor& grad, const Tensor& x);
Tensor sigmoid_backward(const Tensor& grad, const Tensor& y);  // y = sigmoid(x)
// (swiglu lives in swiglu.h)

}  // namespace loom::kernels::cpu
