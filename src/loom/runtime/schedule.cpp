#include "loom/runtime/schedule.h"

#include "loom/autograd/engine.h"
#include "loom/autograd/checkpoint.h"
#include "loom/core/trace.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/loss.h"
#include "loom/ops/reduce.h"

namespace loom::runtime {

double micro_batch_backward_scale(const dist::ParallelModel& parallel, int64_t micro_batches) {
  return parallel.backward_scale() / static_cast<double>(micro_batches);
}

void average_over_ranks(dist::ProcessGroup& world, double replicas, StepResult& result) {
  result.loss = world.all_reduce_scalar(result.loss) / replicas;
  for (auto& [k, v] : result.extras) v = world.all_reduce_scalar(v) / replicas;
}

void sum_over_shards(dist::ProcessGroup& world, double copies, StepResult& result) {
  result.loss_sum = world.all_reduce_scalar(result.loss_sum) / copies;
  result.loss_count = world.all_reduce_scalar(result.loss_count) / copies;
}

void add_token_totals(const data::Batch& batch, double loss, int64_t vocab_size, StepResult& result) {
  // The loss is Σ ce·mask / (Σ mask + ε) (ops/loss.h): its numerator comes back exactly enough.
  const double count = ops::loss_token_count(batch.labels, batch.loss_mask, vocab_size);
  result.loss_sum += loss * (count + ops::kLossMaskEpsilon);
  result.loss_count += count;
}

PlainSchedule::PlainSchedule(LanguageModel& model, dist::ParallelModel& parallel, int64_t micro_batches)
    : model_(model), parallel_(parallel) {
  set_micro_batches(micro_batches);
}

void PlainSchedule::set_micro_batches(int64_t micro_batches) {
  LOOM_CHECK(micro_batches >= 1, ValueError, "PlainSchedule: a step needs at least one micro-batch, got ",
             micro_batches);
  micro_batches_ = micro_batches;
}

StepResult PlainSchedule::run(const BatchSource& next_batch, Mode mode) {
  StepResult result;
  if (mode == Mode::train) parallel_.zero_grad();
  for (int64_t micro = 0; micro < micro_batches_; ++micro) {
    data::Batch batch;
    {
      LOOM_TRACE("step", "next batch");
      batch = next_batch();
    }
    result.epoch = batch.epoch;
    result.tokens += batch.input_ids.numel();
    result.loss_tokens += batch.loss_mask.defined() ? static_cast<int64_t>(ops::sum(batch.loss_mask).item())
                                                    : batch.input_ids.numel();
    run_micro_batch(batch, mode, result);
    ++result.micro_batches;
  }
  if (mode == Mode::train) parallel_.finish_backward();
  dist::ProcessGroup& world = parallel_.mesh().world();
  result.local_loss = result.loss;
  average_over_ranks(world, static_cast<double>(world.size()), result);
  if (mode == Mode::eval) {
    sum_over_shards(world, static_cast<double>(world.size() / parallel_.mesh().dims().num_dataset_shards()), result);
    parallel_.release_gathered();
  }
  return result;
}

Tensor PlainSchedule::logits(const data::Batch& batch) {
  autograd::EvaluationGuard evaluating;
  return model_.logits(batch);
}

void PlainSchedule::run_micro_batch(const data::Batch& batch, Mode mode, StepResult& result) {
  const double A = static_cast<double>(micro_batches_);
  if (mode == Mode::eval) {
    autograd::EvaluationGuard evaluating;
    LOOM_TRACE("eval", "forward");
    const ForwardResult r = model_.forward(batch, {false});
    add_token_totals(batch, r.loss.item(), model_.vocab_size(), result);
    result.loss += r.loss.item() / A;
    for (const auto& [k, v] : r.extras) result.extras[k] += v / A;
    return;
  }
  ForwardResult r;
  {
    LOOM_TRACE("step", "forward");
    r = model_.forward(batch, {true});  // backward follows at once: the head forms its grads now
  }
  // backward(loss / A) with the seed `sense` (the reference's _forward_backward): the two
  // factors stay separate so the grads round exactly as one process summing A micro-batches.
  const double sense = parallel_.backward_scale();
  Tensor scaled = micro_batches_ > 1 ? ops::scale(r.loss, 1.0 / A) : r.loss;
  {
    LOOM_TRACE("step", "backward");
    if (sense == 1.0) autograd::backward(scaled);
    else autograd::backward(scaled, Tensor::full(scaled.shape(), sense, scaled.dtype()));
  }
  result.loss += r.loss.item() / A;
  for (const auto& [k, v] : r.extras) result.extras[k] += v / A;
}

}  // namespace loom::runtime
