// What context_parallel.cpp (the split, the ring) and context_parallel_ulysses.cpp (Ulysses,
// hybrid) share; not an API.
#pragma once

#include <memory>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/context_parallel.h"
#include "loom/dist/process_group.h"

namespace loom::dist::detail {

// x [B, n, ...] → [B, m, ...]: the rows rows[b] (m of them) of each sample b. Differentiable in x.
Tensor gather_rows(const Tensor& x, const std::vector<std::vector<int64_t>>& rows, int64_t n);

// The ring over `cp`, whose rank j holds the tokens ring_indices[j][b] of sample b (ascending
// global indices): ring_attention's contract otherwise.
Tensor ring_over(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                 const SequenceSplit::Layout& ring_indices, const std::shared_ptr<ProcessGroup>& cp,
                 Tensor* max_logits);

// Adds to RingWork::all_to_all_bytes.
void count_all_to_all_bytes(int64_t bytes);

}  // namespace loom::dist::detail
