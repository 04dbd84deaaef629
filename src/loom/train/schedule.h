// Schedules own the micro-batch loop of one optimizer step (DESIGN.md "Schedules"): every
// forward, loss and backward of the step's A micro-batches, and the accumulation of their grads,
// so that the grads are final when the schedule returns. The trainer asks for one step and never
// assumes one forward per micro-batch: a pipeline schedule runs stage chunks of several
// micro-batches interleaved and exchanges activations and grads with the neighbouring stages.
//
// The plain schedule runs the micro-batches one after another on the whole model (the
// reference's _forward_backward, semantics.md §1.2):
//
//   for each of the A micro-batches:  loss = forward(batch);  backward(loss · s / A)
//
// where s = ParallelModel::backward_scale() (1/(world/(pp·tp)) while data-parallel grads are
// summed, 1 on one process); the injected losses (MoE balance, MTP) carry the same s / A through
// TrainModel::set_backward_scale. The logged loss is the mean of the micro-batch losses, averaged
// over every rank (the reference's all_reduce(SUM) / world).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "loom/data/batch.h"
#include "loom/dist/parallelize.h"
#include "loom/train/train_model.h"

namespace loom::train {

struct StepResult {
  double loss = 0;                       // token-mean loss of the step, averaged over the ranks
  std::map<std::string, double> extras;  // logged auxiliary losses, averaged likewise
  int64_t micro_batches = 0;
  int64_t tokens = 0;                    // input tokens this rank trained on
  int64_t loss_tokens = 0;               // of which count in the loss (loss mask)
  int64_t epoch = 0;                     // the data epoch of the step's last batch
};

// Where a schedule's micro-batches come from (the data loader).
using BatchSource = std::function<data::Batch()>;

class Schedule {
 public:
  virtual ~Schedule() = default;
  // Runs one optimizer step's micro-batches and leaves the final grads on the parameters.
  virtual StepResult run_step(const BatchSource& next_batch) = 0;
};

// The factor forward()'s loss gets before backward: s / A (see above). The model's injected
// losses must be scaled alike, so the trainer hands the same value to the model.
double micro_batch_backward_scale(const dist::ParallelModel& parallel, int64_t micro_batches);

class PlainSchedule final : public Schedule {
 public:
  PlainSchedule(TrainModel& model, dist::ParallelModel& parallel, int64_t micro_batches);
  StepResult run_step(const BatchSource& next_batch) override;

 private:
  TrainModel& model_;
  dist::ParallelModel& parallel_;
  int64_t micro_batches_;
};

}  // namespace loom::train
