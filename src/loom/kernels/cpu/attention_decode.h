// Attention for a few query rows over many keys: a decoding step (one new position per sequence,
// or a speculative check's few) against the KV cache.
//
// The flash kernel (attention.h) is built for blocks of queries: on the bf16 matrix units it packs
// K and V into pair-interleaved words once per call, which for one query row costs more than the
// attention itself (a Qwen3-0.6B decode step spent a third of its time packing and zeroing those
// buffers). Here each (sequence, KV head) reads its visible keys and values once — bf16 widened
// to fp32, f32 in place — and every query head of the group (GQA) and every query row share
// them in two small fp32 products: scores S = scale·Q·Kᵀ, the softmax over each row's interval,
// O = P·V. Same masks (one visible interval per row), same results as the flash kernel within
// fp32 rounding, lse included; no backward (generation runs without grads).
#pragma once

#include <cstdint>

#include "loom/core/tensor.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels::cpu {

// Query rows up to which this kernel runs; more, or f64 operands, go to the flash kernel.
inline constexpr int64_t kDecodeMaxQueryRows = 8;

// out [B, Sq, H, Dv] in q's dtype and lse [B, H, Sq] (-inf where a row sees no key; its output
// is zeros), as attention_forward gives them. Operands whose last dim is strided are copied.
AttentionForwardResult decode_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                                double scale, const AttentionMask& mask);
// The same on a given matrix path (tests compare them): bf16 operands on a bf16 path of a CPU with
// AVX512-BF16 take scores in vdpbf16ps and the weighted sum in registers, reading the cache as
// bf16; every other case widens blocks of it and multiplies in fp32.
AttentionForwardResult decode_attention_forward_on(MatrixPath path, const Tensor& q, const Tensor& k,
                                                   const Tensor& v, double scale, const AttentionMask& mask);

}  // namespace loom::kernels::cpu
