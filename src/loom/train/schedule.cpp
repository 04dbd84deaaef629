#include "loom/train/schedule.h"

#include "loom/autograd/engine.h"
#include "loom/core/trace.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/reduce.h"

namespace loom::train {

double micro_batch_backward_scale(const dist::ParallelModel& parallel, int64_t micro_batches) {
  return parallel.backward_scale() / static_cast<double>(micro_batches);
}

PlainSchedule::PlainSchedule(TrainModel& model, dist::ParallelModel& parallel, int64_t micro_batches)
    : model_(model), parallel_(parallel), micro_batches_(micro_batches) {
  LOOM_CHECK(micro_batches >= 1, ValueError, "PlainSchedule: a step needs at least one micro-batch, got ",
             micro_batches);
}

StepResult PlainSchedule::run_step(const BatchSource& next_batch) {
  const int64_t A = micro_batches_;
  const double sense = parallel_.backward_scale();
  StepResult result;
  parallel_.zero_grad();
  for (int64_t micro = 0; micro < A; ++micro) {
    data::Batch batch;
    {
      LOOM_TRACE("step", "next batch");
      batch = next_batch();
    }
    result.epoch = batch.epoch;
    result.tokens += batch.input_ids.numel();
    result.loss_tokens += batch.loss_mask.defined() ? static_cast<int64_t>(ops::sum(batch.loss_mask).item())
                                                    : batch.input_ids.numel();
    ForwardResult r;
    {
      LOOM_TRACE("step", "forward");
      r = model_.forward(batch, {true});  // backward follows at once: the head forms its grads now
    }
    // backward(loss / A) with the seed `sense` (the reference's _forward_backward): the two
    // factors stay separate so the grads round exactly as one process summing A micro-batches.
    Tensor scaled = A > 1 ? ops::scale(r.loss, 1.0 / static_cast<double>(A)) : r.loss;
    {
      LOOM_TRACE("step", "backward");
      if (sense == 1.0) autograd::backward(scaled);
      else autograd::backward(scaled, Tensor::full(scaled.shape(), sense, scaled.dtype()));
    }
    result.loss += r.loss.item() / static_cast<double>(A);
    for (const auto& [k, v] : r.extras) result.extras[k] += v / static_cast<double>(A);
    ++result.micro_batches;
  }
  parallel_.finish_backward();
  // Every rank logs the same numbers: the mean over the world.
  dist::ProcessGroup& world = parallel_.mesh().world();
  const double ranks = static_cast<double>(world.size());
  result.loss = world.all_reduce_scalar(result.loss) / ranks;
  for (auto& [k, v] : result.extras) v = world.all_reduce_scalar(v) / ranks;
  return result;
}

}  // namespace loom::train
