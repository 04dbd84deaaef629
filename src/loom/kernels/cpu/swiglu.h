// SwiGLU, silu(gate) · up, fused and vectorised (AVX2 exp). Works on row-strided views, so the
// gate and up halves of a fused fc1 output [.., 2F] are read in place; swiglu_packed takes that
// fused tensor directly and its backward writes the fused grad without a concatenation.
#pragma once

#include "loom/core/tensor.h"

namespace loom::kernels::cpu {

// gate, up: same shape, unit stride in the last dim (any row stride). → contiguous result.
Tensor swiglu(const Tensor& gate, const Tensor& up);
void swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up, Tensor& d_gate, Tensor& d_up);

// h [.., 2F] = [gate | up] → [.., F]; backward gives d_h [.., 2F].
Tensor swiglu_packed(const Tensor& h);
Tensor swiglu_packed_backward(const Tensor& grad, const Tensor& h);

}  // namespace loom::kernels::cpu
