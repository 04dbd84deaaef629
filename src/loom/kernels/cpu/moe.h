// MoE token dispatch kernels: grouping token copies by expert (permute), the weighted inverse
// (unpermute) and one GEMM per expert over its contiguous rows (grouped GEMM). Everything is
// deterministic: sums run in a fixed order and no two threads write the same row.
#pragma once

#include <vector>

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels::cpu {

using kernels::MoeRouting;

// Counting sort of the T·K (token, slot) pairs by expert: ascending expert id, and within an
// expert by token index then slot (stable). expert_ids int32/int64 [T, K] in [0, num_experts).
MoeRouting moe_routing(const Tensor& expert_ids, int64_t num_experts);

// permuted[row_map[t, k]] = x[t] for x [T, D] → [rows, D] with rows = row_map.numel().
Tensor moe_permute_rows(const Tensor& x, const Tensor& row_map);
// dx[t] = Σ_k grad[row_map[t, k]] (k in order) → [T, D].
Tensor moe_permute_backward(const Tensor& grad, const Tensor& row_map);

// out[t] = Σ_k weights[t, k] · y[row_map[t, k]] for y [rows, D]; weights [T, K] of any floating
// dtype (undefined = ones). Output has y's dtype; fp32 compute (fp64 for f64).
Tensor moe_unpermute(const Tensor& y, const Tensor& row_map, const Tensor& weights);
// dy[row_map[t, k]] = weights[t, k] · grad[t] (rows no pair maps to get 0) and
// dweights[t, k] = <grad[t], y[row_map[t, k]]> (weights' dtype). Null pointers skip a grad.
void moe_unpermute_backward(const Tensor& grad, const Tensor& y, const Tensor& row_map,
                            const Tensor& weights, Tensor* dy, Tensor* dweights);

// out[rows of expert e] = x[rows of e] · w[e] (w [E, D_in, D_out]) or · w[e]ᵀ with trans_w
// (w [E, D_out, D_in]); rows are grouped by expert in order, counts[e] of them each.
Tensor grouped_gemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& counts, bool trans_w);
// dx (x's dtype) and dw (fp32 for bf16/f16 weights, else w's dtype; zero for experts with no
// rows). Null pointers skip a grad.
void grouped_gemm_backward(const Tensor& grad, const Tensor& x, const Tensor& w,
                           const std::vector<int64_t>& counts, bool trans_w, Tensor* dx, Tensor* dw);

}  // namespace loom::kernels::cpu
