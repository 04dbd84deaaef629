// Rotary position embedding kernel. Pairs of dims are rotated by angle θ = position · inv_freq:
// rotate-half pairs (i, i + R/2) as Llama/Qwen, or interleaved pairs (2i, 2i+1) as DeepSeek's
// reference code (inference/model.py). Only the first R dims rotate; the rest pass through.
#pragma once

#include "loom/core/tensor.h"

namespace loom::kernels::cpu {

// x [B, S, H, D] (any strides), cos/sin [P, R/2] tables, positions int32/int64 [B, S] or [S]
// (shared by the batch) with values in [0, P). Returns the rotated tensor (x's dtype,
// contiguous). `inverse` rotates by −θ: the backward of the forward rotation. bf16/f16 compute in
// fp32 (f64 stays f64) and round once.
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, const Tensor& positions,
            bool interleaved, bool inverse);

}  // namespace loom::kernels::cpu
