// Fused cross-entropy kernels (MindFormers' CrossEntropyLoss: loss = Σ ce·mask / (Σ mask + 1e-8)
// with mask = loss_mask · (label != ignore_index)).
//
// cross_entropy_*: per-row max and log-sum-exp in fp32 over vocabulary chunks (an online
// softmax: one read of the row, no [N, V] fp32 buffer for bf16 logits); backward writes
// dlogits = (softmax − onehot) · mask · scale in one pass, recomputing softmax from the saved lse.
//
// linear_cross_entropy_*: the output projection fused in, never holding the full [N, V] logits:
// tokens are processed in chunks (logits chunk by GEMM, lse; backward recomputes the chunk
// logits, turns them into dlogits in place and accumulates dhidden and dweight by GEMM).
// With a VocabShard (tensor parallelism) the weight holds this rank's vocabulary rows: each
// chunk's row max and then its Σ exp and target logits are reduced over the vocabulary ranks (two
// reductions per chunk), so every rank gets the full lse and loss; dweight is this rank's rows and
// dhidden its partial sum (the sum over the vocabulary ranks is the caller's).
#pragma once

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels::cpu {

// Per-row loss weights mask_n = loss_mask[n] · (labels[n] != ignore_index) as float64 [N], after
// checking every label other than ignore_index lies in [0, vocab) (ValueError naming its
// position). labels: int32/int64 of any shape with N elements; loss_mask: undefined (ones) or any
// dtype with the labels' shape. `op` prefixes messages.
Tensor cross_entropy_row_weights(const Tensor& labels, const Tensor& loss_mask, int64_t ignore_index,
                                 int64_t vocab, const char* op);

// logits [N, V] (last-dim stride 1); returns Σ_n ce_n · w_n (float64) and fills lse [N] (fp32, or
// fp64 for f64 logits). Rows with weight 0 are skipped (their lse is 0).
double cross_entropy_forward(const Tensor& logits, const Tensor& labels, const Tensor& row_weights,
                             Tensor& lse);
// dlogits [N, V] in logits' dtype = (softmax − onehot(label)) · w_n · scale.
Tensor cross_entropy_backward(const Tensor& logits, const Tensor& labels, const Tensor& row_weights,
                              const Tensor& lse, double scale);

// hidden [N, D], weight [V, D] (logits = hidden · weightᵀ). chunk_tokens <= 0 picks a chunk of
// about 8M logits. Returns Σ_n ce_n · w_n and fills lse [N]. When dhidden/dweight are given, the
// grads of (Σ ce·w) · grad_scale are formed in the same pass (3 GEMMs in all instead of 4 with a
// recomputing backward) — for a loss whose backward follows right away.
double linear_cross_entropy_forward(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                                    const Tensor& row_weights, int64_t chunk_tokens, Tensor& lse,
                                    double grad_scale = 0.0, Tensor* dhidden = nullptr,
                                    Tensor* dweight = nullptr, const VocabShard* shard = nullptr);
// dhidden (hidden's dtype) and dweight (fp32 for bf16/f16 weights, else weight's dtype) of
// (Σ ce·w) · scale, recomputing each chunk's logits; null pointers skip that grad.
void linear_cross_entropy_backward(const Tensor& hidden, const Tensor& weight, const Tensor& labels,
                                   const Tensor& row_weights, const Tensor& lse, double scale,
                                   int64_t chunk_tokens, Tensor* dhidden, Tensor* dweight,
                                   const VocabShard* shard = nullptr);

}  // namespace loom::kernels::cpu
