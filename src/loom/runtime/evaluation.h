// The loss of a held-out split, for the validation during training and for `loom eval`: K global
// batches through the schedule's eval mode (schedule.h, any layout), and
//
//   loss = Σ ce·mask / Σ mask   over every loss token of all K batches (token-weighted, not a
//                               mean of the batches' means), perplexity = exp(loss)
//
// The caller hands the same first K global batches to every evaluation, so the values are
// comparable from one evaluation to the next.
#pragma once

#include <cstdint>

#include "loom/runtime/schedule.h"

namespace loom::runtime {

struct LossEvaluation {
  double loss = 0;
  double perplexity = 0;
  int64_t loss_tokens = 0;   // Σ mask over every data-parallel rank
  int64_t input_tokens = 0;  // tokens run through the model, every data-parallel rank's
  int64_t global_batches = 0;
  double seconds = 0;
  double tokens_per_s = 0;   // input tokens per second
};

// `data_shards`: the data-parallel ranks reading other batches (ParallelDims::num_dataset_shards).
LossEvaluation evaluate_loss(Schedule& schedule, const BatchSource& next_batch, int64_t global_batches,
                             int data_shards);

}  // namespace loom::runtime
