// Differentiable elementwise ops. Binary ops broadcast numpy-style (grads are summed back to each
// input's shape). All outputs are new tensors; nothing here works in place.
#pragma once

#include "loom/core/tensor.h"

namespace loom::ops {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// Elementwise max(a, b) (NaN wins), for running statistics such as the QK-clip max logits. It
// has no backward: inputs that would need a grad are rejected rather than silently cut off.
Tensor maximum(const Tensor& a, const Tensor& b);
// a * s
Tensor scale(const Tensor& a, double s);
// a + s
Tensor add_scalar(const Tensor& a, double s);
Tensor neg(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor square(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor silu(const Tensor& a);
Tensor tanh(const Tensor& a);
// approximate: "none" (erf) or "tanh"
Tensor gelu(const Tensor& a, bool tanh_approx = false);
// silu(gate) * up, fused (one pass forward, one pass backward)
Tensor swiglu(const Tensor& gate, const Tensor& up);
// The same on a fused [.., 2F] tensor holding the gate half then the up half (a gated MLP's
// fc1 output): no split, and the backward writes the fused grad directly.
Tensor swiglu_packed(const Tensor& h);
// Changes dtype; the grad is cast back to the input's dtype.
Tensor cast(const Tensor& a, DType dtype);
// cast's autograd node alone, for values converted earlier (ops/weight_cast.h reuses a weight's
// converted copy): `out` (a's values in another dtype, its own handle) becomes cast(a)'s result.
Tensor record_cast(const Tensor& a, Tensor out);

}  // namespace loom::ops
