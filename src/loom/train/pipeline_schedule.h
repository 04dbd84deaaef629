// The pipeline schedules (spec parallel_training.md §4.2; reference/parallel.md §3): the order in
// which one pp rank runs the forwards and backwards of its model chunks (dist/pipeline.h) over
// the step's m micro-batches, m = the accumulation steps (global_batch_size / (data_parallel ·
// local_batch_size); pipeline_parallel_microbatch_size is overwritten by it, as the spec says).
//
// 1F1B (v = 1; Megatron's forward_backward_pipelining_without_interleaving). Rank i of p:
//   warm-up    w = min(p - 1 - i, m) forwards
//   steady     m - w times: one forward, then the backward of the oldest micro-batch in flight
//   cool-down  the w remaining backwards
// so rank i holds at most p - i micro-batches' activations (rank 0: p), never m.
//
// Interleaved 1F1B (v > 1; the reference's ScheduleInterleaved1F1B, Megatron's interleaved
// schedule). Micro-batches go in rounds of r = m / max(1, m / p) micro-batches; forward step k
// runs chunk (k / r) % v, backward step k chunk v - 1 - ((k - w) / r) % v, with the warm-up
// w = min((v - 1)·r + 2·(p - 1 - i), m·v) forwards, then 1F1B pairs, then the cool-down
// backwards. m must be a multiple of the number of rounds m / p (the reference's rule; the
// configuration rejects other counts at start-up, naming the batch sizes to change). Fewer
// micro-batches than stages run, with a warning about the bubble.
//
// Every rank of a pipeline reads the same m micro-batches (the data shard ignores pp): the first
// stage embeds their ids, the last uses their labels and mask, every stage their positions.
//
// Point to point. Activations go from virtual stage s to s + 1 and their grads back, over the
// "pp" group, tagged by the receiving stage and direction, so the messages of one channel match
// in micro-batch order. The first message of each activation channel carries the shape and
// dtype (agreed once, kept for the run); grads have the shape of the output they belong to.
// Sends are non-blocking (isend) and never waited on before the step ends: a rank that blocked
// on its send until the peer reached the matching receive could wait for a peer that waits for
// it (tests/train/test_pipeline_schedule.cpp replays that rule and finds the cycle under
// interleaving), while a send in flight only needs the peer to get there eventually, which the
// data dependencies guarantee. Without pipeline_parallel_overlap_p2p a receive is posted when its
// action starts and waited on at once; with it, the next action's receive is also posted before
// this action's compute, so its transfer can complete while this rank computes (its buffer,
// one activation, is held one action longer). On CPU the
// transfers are memcpys through shared memory (or loopback TCP) driven by MPI's progress engine
// in the comm thread; what overlap can hide is the receive's copy and its matching latency,
// not a neighbour's late compute. bench/bench_pipeline measures both.
//
// Scaling and logging as the plain schedule: the last stage backs each loss · s / m with
// s = ParallelModel::backward_scale(); the logged loss is the last stage's mean, averaged over
// the data-parallel ranks and given to every rank (world all-reduce, the other stages adding 0);
// the balance losses are summed over the stages.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/train/schedule.h"

namespace loom::train {

struct PipelineAction {
  enum class Kind { forward, backward };
  Kind kind = Kind::forward;
  int chunk = 0;        // local chunk index: virtual stage chunk·p + pp_rank
  int64_t micro_batch = 0;
  bool operator==(const PipelineAction&) const = default;
};

// One rank's actions for a step, in order: 1F1B for chunks == 1, interleaved 1F1B otherwise.
// Asserts what the configuration checks (config::interleaved_micro_batch_problem is empty).
std::vector<PipelineAction> pipeline_order(int pp, int pp_rank, int chunks, int64_t micro_batches);

// Where one rank's step time went, per action of pipeline_order (bench/bench_pipeline).
struct PipelineStepTimes {
  std::vector<double> compute_s;  // per action: the forward or backward compute
  std::vector<double> wait_s;     // per action: blocked on communication before it
  std::vector<int64_t> live_bytes;  // per action: allocator bytes in use after it
  int64_t start_bytes = 0;        // allocator bytes in use when the step's first action starts
  double step_s = 0;              // the whole run_step, loss averaging excluded
};

// The step's timeline predicted from per-chunk compute times, no communication cost: every
// rank runs pipeline_order, each action starting when its rank is free and its input exists
// (bench/bench_pipeline compares it with the measured idle time).
struct PipelineReplay {
  std::vector<double> finish_s;  // per pp rank: when its last action ends
  std::vector<double> idle_s;    // per pp rank: finish minus its own compute
};
// forward_s[r][c], backward_s[r][c]: rank r's chunk c, one micro-batch.
PipelineReplay replay_pipeline(int pp, int chunks, int64_t micro_batches,
                               const std::vector<std::vector<double>>& forward_s,
                               const std::vector<std::vector<double>>& backward_s);

struct PipelineScheduleOptions {
  bool overlap_p2p = false;  // parallelism.pipeline_parallel_overlap_p2p
};

class PipelineSchedule final : public Schedule {
 public:
  PipelineSchedule(TrainModel& model, dist::ParallelModel& parallel, int64_t micro_batches,
                   PipelineScheduleOptions options = {});
  ~PipelineSchedule() override;
  StepResult run_step(const BatchSource& next_batch) override;
  const std::vector<PipelineAction>& order() const { return order_; }
  const PipelineStepTimes& last_times() const { return times_; }

 private:
  struct Channels;
  TrainModel& model_;
  dist::ParallelModel& parallel_;
  dist::PipelineStage& stage_;
  int64_t micro_batches_;
  PipelineScheduleOptions options_;
  std::vector<PipelineAction> order_;
  std::unique_ptr<Channels> channels_;
  PipelineStepTimes times_;
};

}  // namespace loom::train
