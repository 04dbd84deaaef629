// The pipeline schedules (spec parallel_training.md §4.2; Megatron's forward_backward_pipelining_*,
// PyTorch's Schedule1F1B / ScheduleInterleaved1F1B): the order in which one pp rank runs the
// forwards and backwards of its model chunks (dist/pipeline.h) over the step's m micro-batches, m =
// the accumulation steps (global_batch_size / (data_parallel · local_batch_size);
// pipeline_parallel_microbatch_size is overwritten by it, as the spec says).
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
// Evaluation runs forwards only: every micro-batch through this rank's chunks in virtual-stage
// order (forward_only_order), as Megatron's forward_only pipelining does.
//
// These orders are pure functions of (p, rank, v, m): the executor (pipeline_schedule.h), the
// timeline replay below, `loom plan` and bench/bench_pipeline share them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::runtime {

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

// Evaluation's order: micro-batch m's forward of chunk 0, 1, ..., v - 1, then m + 1's.
std::vector<PipelineAction> forward_only_order(int chunks, int64_t micro_batches);

// The order's actions as the schedule runs them, as indices into `order`: one action per step,
// or with overlap_b_f a backward and the forward after it as one step (backward first).
std::vector<std::vector<size_t>> pipeline_steps(const std::vector<PipelineAction>& order, bool overlap_b_f);

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

}  // namespace loom::runtime
