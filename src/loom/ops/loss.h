// Token-mean cross-entropy as MindFormers' CrossEntropyLoss:
//   loss = Σ ce_t · mask_t / (Σ mask_t + 1e-8),  mask = loss_mask · (labels != ignore_index).
// The loss is a float32 scalar (float64 for f64 inputs) whatever the logits' dtype.
#pragma once

#include <cstdint>

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::ops {

// The denominator's epsilon (MindFormers' CrossEntropyLoss).
constexpr double kLossMaskEpsilon = 1e-8;

// Σ mask: the tokens the loss of (labels, loss_mask) averages over, as a double (the same row
// weights the losses below use). A strategy that splits a sequence over ranks sums it over them.
double loss_token_count(const Tensor& labels, const Tensor& loss_mask, int64_t vocab,
                        int64_t ignore_index = -100);

// logits [..., V] (f32/bf16/f16/f64), labels [...] int32/int64, loss_mask [...] (any dtype;
// undefined = all ones). Fused: per-row log-sum-exp over vocabulary chunks in fp32, no fp32 copy
// of bf16 logits; backward recomputes softmax from the saved lse in one pass. Labels outside
// [0, V) other than ignore_index throw ValueError naming the position.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, const Tensor& loss_mask = Tensor(),
                     int64_t ignore_index = -100);

// cross_entropy(linear(hidden, weight), labels, ...) without materialising the [N, V] logits:
// hidden [..., D], weight [V, D]. Tokens go through in chunks of `chunk_tokens` (<= 0: about 8M
// logits per chunk). By default backward recomputes each chunk's logits (forward keeps only the
// per-token lse): 4 GEMMs in all. grads_in_forward forms the grads during the forward pass and
// keeps them until backward (3 GEMMs, like linear + cross_entropy, but dh and dweight are held
// from forward to backward): the choice when the loss's backward follows right away.
// Grad of a bf16/f16 weight is fp32.
// With `shard` (tensor parallelism), weight is this rank's rows of a vocabulary-split head
// (kernels::VocabShard): labels range over the whole vocabulary, the loss is the whole loss on
// every rank, weight's grad is this rank's rows and hidden's grad this rank's partial sum, which
// the caller sums over the vocabulary ranks (the backward of the all-gather that formed hidden).
Tensor linear_cross_entropy(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                            const Tensor& loss_mask = Tensor(), int64_t ignore_index = -100,
                            int64_t chunk_tokens = 0, bool grads_in_forward = false,
                            const kernels::VocabShard* shard = nullptr);

}  // namespace loom::ops
