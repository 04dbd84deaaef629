// Differentiable indexing ops: embedding, gather/scatter/index_add/index_select, top-k.
#pragma once

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::ops {

// weight [V, D], ids [...] (int32/int64) → [..., D]. The weight grad is a dense [V, D] tensor
// (fp32 for bf16/f16 weights).
// With `shard`, weight holds rows [begin, begin + rows) of a vocabulary-split table (tensor
// parallelism): other ids give zero rows; the caller sums the shards' outputs.
Tensor embedding(const Tensor& ids, const Tensor& weight, const kernels::VocabShard* shard = nullptr);
Tensor gather(const Tensor& x, int dim, const Tensor& index);
// Copy of x with src written (or added, accumulate=true) at index along dim.
Tensor scatter(const Tensor& x, int dim, const Tensor& index, const Tensor& src, bool accumulate = false);
Tensor index_select(const Tensor& x, int dim, const Tensor& index);
Tensor index_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src);
// Top-k along the last dim: values (differentiable) and int64 indices.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k);

}  // namespace loom::ops
