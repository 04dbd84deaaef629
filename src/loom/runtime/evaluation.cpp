#include "loom/runtime/evaluation.h"

#include <chrono>
#include <cmath>

#include "loom/core/error.h"
#include "loom/ops/weight_cast.h"

namespace loom::runtime {

LossEvaluation evaluate_loss(Schedule& schedule, const BatchSource& next_batch, int64_t global_batches,
                             int data_shards) {
  LOOM_CHECK(global_batches >= 1, ValueError, "an evaluation needs at least one global batch, got ", global_batches);
  const auto start = std::chrono::steady_clock::now();
  double loss_sum = 0, loss_count = 0;
  int64_t input_tokens = 0;
  for (int64_t k = 0; k < global_batches; ++k) {
    // One global batch multiplies by one set of bf16 weight copies, as a training step does.
    ops::WeightCastScope weight_casts;
    const StepResult r = schedule.run(next_batch, Mode::eval);
    loss_sum += r.loss_sum;
    loss_count += r.loss_count;
    input_tokens += r.tokens * data_shards;
  }
  LossEvaluation e;
  e.global_batches = global_batches;
  e.loss_tokens = static_cast<int64_t>(std::llround(loss_count));
  LOOM_CHECK(e.loss_tokens > 0, DataError, "the evaluated batches hold no loss token (every position is masked): "
             "evaluate more batches or data with unmasked tokens");
  e.loss = loss_sum / loss_count;
  e.perplexity = std::exp(e.loss);
  e.input_tokens = input_tokens;
  e.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  e.tokens_per_s = static_cast<double>(input_tokens) / e.seconds;
  return e;
}

}  // namespace loom::runtime
