// Differentiable MoE dispatch (DeepSeek-V3's y = Σ_k w_k · Expert_k(x); MindFormers experts
// weight1/weight2 as [E, hidden, 2·ffn] / [E, ffn, hidden]): group token copies by expert, run one
// GEMM per expert over its contiguous rows, and combine the results back with the routing weights.
#pragma once

#include <cstdint>

#include "loom/core/tensor.h"

namespace loom::ops {

struct MoePermutation {
  Tensor permuted;           // [T·K, D]: copies of x rows grouped by expert (differentiable)
  Tensor tokens_per_expert;  // int64 [E]
  Tensor row_map;            // int64 [T, K]: permuted row of copy k of token t
};

// x [T, D], expert_ids int32/int64 [T, K] in [0, num_experts). Rows of `permuted` are in
// ascending expert order, stable by token index (then slot) within an expert.
MoePermutation moe_permute(const Tensor& x, const Tensor& expert_ids, int64_t num_experts);

// out [T, D] = Σ_k weights[t, k] · y[row_map[t, k]] for y [T·K, D]. Grads for y and the routing
// weights (weights may be fp32 while y is bf16; undefined weights mean 1).
Tensor moe_unpermute(const Tensor& y, const Tensor& row_map, const Tensor& weights = Tensor());

// x [M, D_in] grouped by expert (tokens_per_expert int [E], summing to M), w [E, D_in, D_out]
// (or [E, D_out, D_in] with trans_w) → [M, D_out], one GEMM per expert. Grads for x and w (fp32
// for bf16/f16 weights).
Tensor grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& tokens_per_expert,
                    bool trans_w = false);

}  // namespace loom::ops
