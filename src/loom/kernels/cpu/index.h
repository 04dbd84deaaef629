// Gather/scatter style kernels: embedding lookup and its grad, gather/scatter/index_add along a
// dim, and top-k. Index tensors are int32 or int64; out-of-range indices throw (never read out
// of bounds) naming the op, the index and the valid range.
#pragma once

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels::cpu {

// weight [V, D], ids [...] → [..., D]
// With `shard` (a vocabulary-split table, tensor parallelism) weight holds rows [begin, begin +
// rows) of a `size`-row table: ids range over the whole table and the others give zero rows (and
// no grad), so the sum over the shards' outputs is the whole lookup, exactly.
Tensor embedding(const Tensor& ids, const Tensor& weight, const VocabShard* shard = nullptr);
// grad [..., D] scattered into a zero [V, D] tensor of `grad_dtype` (deterministic: each thread
// owns a column range and walks the tokens in order).
Tensor embedding_backward(const Tensor& grad, const Tensor& ids, int64_t num_rows, DType grad_dtype,
                          const VocabShard* shard = nullptr);

// out[i][j] = x[i][index[i][j]] along `dim` (torch.gather semantics, index same ndim as x).
Tensor gather(const Tensor& x, int dim, const Tensor& index);
// out = copy of x with out[...index...] = src (torch.scatter) or += src (scatter_add).
Tensor scatter(const Tensor& x, int dim, const Tensor& index, const Tensor& src, bool accumulate);
// out = x; out.index_select(dim, index) += src (torch.index_add), rows added in index order.
Tensor index_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src);
// x.index_select(dim, index)
Tensor index_select(const Tensor& x, int dim, const Tensor& index);
// Largest k along the last dim, sorted descending (ties: lower index first).
void topk(const Tensor& x, int64_t k, Tensor& values, Tensor& indices);

// Reads index element i as int64 whatever the index dtype (i32/i64).
int64_t index_at(const Tensor& contiguous_index, int64_t i);

}  // namespace loom::kernels::cpu
