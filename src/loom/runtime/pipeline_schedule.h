// The pipeline executor: runs one rank's actions of pipeline_order (train) or
// forward_only_order (eval) on its model chunks (dist/pipeline.h), exchanging activations and
// grads with the neighbouring stages through PipelineChannels.
//
// Receives. Without pipeline_parallel_overlap_p2p a receive is posted when its action starts and
// waited on at once; with it, the next action's receive is also posted before this action's
// compute, so its transfer can complete while this rank computes (its buffer, one activation, is
// held one action longer). What overlap can hide on CPU is the receive's copy and its matching
// latency, not a neighbour's late compute. bench/bench_pipeline measures both.
//
// Backward/forward overlap (pipeline_parallel_overlap_b_f; MoE models only: the configuration
// turns it off for dense ones, as the reference does). Each backward that the order follows with
// a forward runs with it as one step (pipeline_steps: the steady state's pairs, micro-batch k's
// backward with a later micro-batch's forward), layer by layer in alternation: the backward's
// last layer, the forward's first layer, the backward's next-to-last, and so on, so that where
// the expert all-to-alls run asynchronously, one micro-batch's dispatch or combine travels while
// the other's layer computes. To run a chunk's backward one layer at a time, its forward cuts the
// graph at every layer boundary (a detached input collects the grad, as between stages); the
// grads are the same sums. A step waits for both actions' receives before its first layer. On
// CPU the expert all-to-alls are blocking collectives and one thread computes, so the layers
// alternate but nothing overlaps: the step takes the two actions' time plus the cuts'
// bookkeeping (bench/pipeline_throughput.sh measures it).
//
// Scaling and logging as the plain schedule: the last stage backs each loss · s / m with
// s = ParallelModel::backward_scale(); the logged loss is the last stage's mean, averaged over
// the data-parallel ranks and given to every rank (world all-reduce, the other stages adding 0);
// the balance losses are summed over the stages. Eval mode runs the same forwards in
// forward_only_order under an EvaluationGuard and averages the same way.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "loom/runtime/pipeline_channels.h"
#include "loom/runtime/pipeline_order.h"
#include "loom/runtime/schedule.h"

namespace loom::runtime {

// Where one rank's step time went, per action of the order (bench/bench_pipeline).
struct PipelineStepTimes {
  std::vector<double> compute_s;  // per action: the forward or backward compute
  std::vector<double> wait_s;     // per action: blocked on communication before it
  std::vector<int64_t> live_bytes;  // per action: allocator bytes in use after it
  int64_t start_bytes = 0;        // allocator bytes in use when the step's first action starts
  double tail_s = 0;              // after the last action: the sends' completion, finish_backward
  double step_s = 0;              // the whole step, loss averaging excluded
};

class PipelineSchedule final : public Schedule {
 public:
  PipelineSchedule(LanguageModel& model, dist::ParallelModel& parallel, int64_t micro_batches,
                   PipelineScheduleOptions options = {});
  ~PipelineSchedule() override;
  StepResult run(const BatchSource& next_batch, Mode mode) override;
  // The batch through every virtual stage in turn, blocking transfers of its own shape (it need
  // not have the steps' shape), the last stage's logits broadcast over pp.
  Tensor logits(const data::Batch& batch) override;
  // A new count takes the orders (pipeline_order, forward_only_order) of that many micro-batches.
  void set_micro_batches(int64_t micro_batches) override;
  int64_t micro_batches() const override { return micro_batches_; }
  // The train mode's actions, in order.
  const std::vector<PipelineAction>& order() const { return order_; }
  const PipelineStepTimes& last_times() const { return times_; }

 private:
  struct Step;    // one run's state: its batches, the micro-batches in flight, posted receives
  struct Action;  // an action in progress, piece by piece

  // Runs the steps of `steps` over `order`, then waits for the sends.
  void run_actions(Step& step, const std::vector<PipelineAction>& order,
                   const std::vector<std::vector<size_t>>& steps);
  // Posts the receive action i needs, if any (may_block: see PipelineChannels).
  void post_receive(Step& step, size_t i, bool may_block);
  // Runs the next piece of the action; returns whether pieces are left.
  bool forward_piece(Step& step, Action& action);
  bool backward_piece(Step& step, Action& action);
  // The last stage's loss and every stage's extras, averaged over the data-parallel ranks.
  void average_over_replicas(StepResult& result);

  LanguageModel& model_;
  dist::ParallelModel& parallel_;
  dist::PipelineStage& stage_;
  int64_t micro_batches_ = 0;  // of order_ and eval_order_
  PipelineScheduleOptions options_;
  std::vector<PipelineAction> order_, eval_order_;
  std::vector<std::vector<size_t>> steps_, eval_steps_;   // pipeline_steps of each order
  std::vector<std::vector<dist::PipelineChunk>> pieces_;  // per chunk: its layers one by one with overlap_b_f
  std::unique_ptr<PipelineChannels> channels_;
  PipelineStepTimes times_;
};

}  // namespace loom::runtime
