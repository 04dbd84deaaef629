// Schedules own the micro-batch loop of one step. The trainer, the evaluator and the generator ask
// for a step and never assume one forward per micro-batch: a pipeline schedule runs stage chunks of
// several micro-batches interleaved and exchanges activations (and, training, their grads) with the
// neighbouring stages.
//
// Two modes, under every layout:
//   train  forward, loss and backward of the step's A micro-batches, and the accumulation of
//          their grads, so that the grads are final when the schedule returns;
//   eval   the same forwards under autograd::EvaluationGuard and nothing else: no history, no
//          backward, no grad sync, no head grads formed in forward, no training statistics (MoE
//          routing counts, QK-clip maxima), the loss averaged exactly as train averages it
//          (Megatron's forward_only).
//
// The plain schedule runs the micro-batches one after another on the whole model (the
// reference's training_step and _forward_backward in MindFormers' trainer.py):
//
//   for each of the A micro-batches:  loss = forward(batch);  backward(loss · s / A)   (train)
//
// where s = ParallelModel::backward_scale() (1/(world/(pp·tp·cp)) while data-parallel grads are
// summed, 1 on one process); the injected losses (MoE balance, MTP) carry the same s / A through
// the model's auxiliary-loss grad scale. The logged loss is the mean of the micro-batch losses,
// averaged over every rank (the reference's all_reduce(SUM) / world).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "loom/data/batch.h"
#include "loom/dist/parallelize.h"
#include "loom/runtime/language_model.h"

namespace loom::runtime {

enum class Mode { train, eval };

struct StepResult {
  double loss = 0;                       // token-mean loss of the step, averaged over the ranks
  double local_loss = 0;                 // this rank's own: the mean of its micro-batches' losses
  bool holds_loss = true;                // false on a pipeline stage that forms no loss
  std::map<std::string, double> extras;  // logged auxiliary losses, averaged likewise
  int64_t micro_batches = 0;
  int64_t tokens = 0;                    // input tokens this rank ran
  int64_t loss_tokens = 0;               // of which count in the loss (loss mask)
  int64_t epoch = 0;                     // the data epoch of the step's last batch
  // Eval mode: the token-weighted totals behind the micro-batches' losses, over every
  // data-parallel rank (the same on every rank): Σ ce·mask and Σ mask of the main head. Their
  // ratio is the step's token-weighted loss, where `loss` is a mean of micro-batch means.
  double loss_sum = 0;
  double loss_count = 0;
};

// Where a schedule's micro-batches come from (a data loader).
using BatchSource = std::function<data::Batch()>;

class Schedule {
 public:
  virtual ~Schedule() = default;
  // Runs one step's micro-batches in `mode` (see above); in train mode the final grads are on
  // the parameters when it returns.
  virtual StepResult run(const BatchSource& next_batch, Mode mode) = 0;
  // The micro-batches of the next run()s (A, at least 1). A step's count changes while
  // training.rampup_batch_size ramps, and an evaluation reads global batches of the full size.
  virtual void set_micro_batches(int64_t micro_batches) = 0;
  virtual int64_t micro_batches() const = 0;
  // The main head's logits [B, S, V] of one batch: its forward under an EvaluationGuard, whole on every
  // rank (every rank of a data shard passes the same batch; a pipeline's last stage shares them).
  virtual Tensor logits(const data::Batch& batch) = 0;
};

// The factor forward()'s loss gets before backward: s / A (see above). The model's injected
// losses must be scaled alike, so the trainer hands the same value to the model.
double micro_batch_backward_scale(const dist::ParallelModel& parallel, int64_t micro_batches);

class PlainSchedule final : public Schedule {
 public:
  PlainSchedule(LanguageModel& model, dist::ParallelModel& parallel, int64_t micro_batches);
  StepResult run(const BatchSource& next_batch, Mode mode) override;
  Tensor logits(const data::Batch& batch) override;
  void set_micro_batches(int64_t micro_batches) override;
  int64_t micro_batches() const override { return micro_batches_; }

 private:
  // One micro-batch: its forward, and in train mode its backward.
  void run_micro_batch(const data::Batch& batch, Mode mode, StepResult& result);

  LanguageModel& model_;
  dist::ParallelModel& parallel_;
  int64_t micro_batches_ = 1;
};

// Every rank logs the same numbers: the loss and extras of `result`, summed over the world and
// divided by `replicas` (the ranks that formed a loss).
void average_over_ranks(dist::ProcessGroup& world, double replicas, StepResult& result);
// Eval mode: loss_sum and loss_count summed over the world and divided by `copies`, the ranks
// holding each data shard's totals (its tensor- and context-parallel ranks, on the last
// pipeline stage).
void sum_over_shards(dist::ProcessGroup& world, double copies, StepResult& result);
// Adds one micro-batch's token-weighted totals (eval mode) from its token-mean `loss`.
void add_token_totals(const data::Batch& batch, double loss, int64_t vocab_size, StepResult& result);

}  // namespace loom::runtime
