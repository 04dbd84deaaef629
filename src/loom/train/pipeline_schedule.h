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
// GPipe (pipeline_parallel_schedule: gpipe, v = 1; a Loom extension: the reference reserves the
// string and runs 1F1B): every forward, then every backward, in micro-batch order, so a rank
// holds all m micro-batches' activations (against 1F1B's p - i) for the same bubble. The same
// micro-batch order makes its grads those of 1F1B.
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

// one_f_one_b: 1F1B for chunks == 1, interleaved 1F1B otherwise; gpipe: chunks == 1 only.
enum class PipelineScheduleKind { one_f_one_b, gpipe };

// One rank's actions for a step, in order. Asserts what the configuration checks
// (config::interleaved_micro_batch_problem is empty; gpipe with one chunk).
std::vector<PipelineAction> pipeline_order(int pp, int pp_rank, int chunks, int64_t micro_batches,
                                           PipelineScheduleKind kind = PipelineScheduleKind::one_f_one_b);

// The order's actions as the schedule runs them, as indices into `order`: one action per step,
// or with overlap_b_f a backward and the forward after it as one step (backward first).
std::vector<std::vector<size_t>> pipeline_steps(const std::vector<PipelineAction>& order, bool overlap_b_f);

// Where one rank's step time went, per action of pipeline_order (bench/bench_pipeline).
struct PipelineStepTimes {
  std::vector<double> compute_s;  // per action: the forward or backward compute
  std::vector<double> wait_s;     // per action: blocked on communication before it
  std::vector<int64_t> live_bytes;  // per action: allocator bytes in use after it
  int64_t start_bytes = 0;        // allocator bytes in use when the step's first action starts
  double tail_s = 0;              // after the last action: the sends' completion, finish_backward
  double step_s = 0;              // the whole run_step, loss averaging excluded
};

// The step's timeline predicted from per-chunk compute times: every rank runs pipeline_order,
// each step of pipeline_steps starting when its rank is free and its inputs exist, its outputs
// sent when it ends (bench/bench_pipeline compares it with the measured idle time). Without
// costs no communication or bookkeeping takes time; with them, each message takes transfer_s,
// every action of rank r takes action_overhead_s[r] beyond its compute (posting and completing
// transfers, reading the batch) and rank r's step ends tail_s[r] after its last action (the
// sends' completion, finish_backward). An activation is too large for MPI's eager protocol: its
// copy starts once the receive is posted. Without overlap_p2p that is when the consuming step
// starts, so the transfer follows both the producer's end and the receiver's previous step; with
// it the receive is posted one step early and the copy can run during that step.
struct PipelineReplayCosts {
  double transfer_s = 0;
  bool receives_posted_early = false;     // pipeline_parallel_overlap_p2p
  std::vector<double> action_overhead_s;  // per pp rank (empty: none)
  std::vector<double> tail_s;             // per pp rank (empty: none)
};
struct PipelineReplay {
  std::vector<double> finish_s;  // per pp rank: when its step ends
  std::vector<double> idle_s;    // per pp rank: finish minus its own compute
};
// forward_s[r][c], backward_s[r][c]: rank r's chunk c, one micro-batch.
PipelineReplay replay_pipeline(int pp, int chunks, int64_t micro_batches,
                               const std::vector<std::vector<double>>& forward_s,
                               const std::vector<std::vector<double>>& backward_s,
                               PipelineScheduleKind kind = PipelineScheduleKind::one_f_one_b,
                               bool overlap_b_f = false, const PipelineReplayCosts& costs = {});

struct PipelineScheduleOptions {
  bool overlap_p2p = false;  // parallelism.pipeline_parallel_overlap_p2p
  PipelineScheduleKind kind = PipelineScheduleKind::one_f_one_b;  // parallelism.pipeline_parallel_schedule
  bool overlap_b_f = false;  // config::PipelinePlan::overlap_b_f (MoE models only)
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
  std::vector<std::vector<size_t>> steps_;       // pipeline_steps(order_)
  std::vector<std::vector<dist::PipelineChunk>> pieces_;  // per chunk: its layers one by one with overlap_b_f
  std::unique_ptr<Channels> channels_;
  PipelineStepTimes times_;
};

}  // namespace loom::train
