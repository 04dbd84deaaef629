// The parallel layout a configuration gets on a given number of ranks: ParallelDims, gradient
// accumulation and pipeline stages, with every world-size dependent rule of
// parallel_training.md ("Parallelism Configuration Limitations") and other_training_features.md §1.
// The world-size rules live here, once, with the spec's messages; dist::ParallelDims only
// computes the layout of degrees that passed them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/layer_spec.h"
#include "loom/config/sections.h"
#include "loom/dist/parallel_dims.h"

namespace loom::config {

// training.rampup_batch_size as Megatron-LM's RampupBatchsizeNumMicroBatchesCalculator ramps it
// (MindFormers' dynamic batch follows the same closed form): the global batch size grows from
// `start` by `increment` every ramp_samples / ((target - start) / increment) consumed samples,
// and is `target` (training.global_batch_size) once more than ramp_samples were consumed.
struct BatchRampup {
  std::int64_t start = 1;
  std::int64_t increment = 1;
  std::int64_t ramp_samples = 0;
  std::int64_t target = 1;
  // The global batch size of the step that begins after `consumed_samples` samples.
  std::int64_t global_batch_size(std::int64_t consumed_samples) const;
};

struct ParallelLayout {
  int world_size = 1;
  dist::ParallelDims dims;
  // data_parallel * local_batch_size: samples one micro-step of every data-parallel rank takes.
  std::int64_t samples_per_micro_step = 1;
  // global_batch_size // samples_per_micro_step (floor); with rampup, the value at the start.
  std::int64_t num_accumulation_steps = 1;
  // samples_per_micro_step * num_accumulation_steps: what one optimizer step really trains on.
  std::int64_t samples_per_step = 1;
  std::optional<BatchRampup> rampup;
  std::optional<PipelinePlan> pipeline;

  // The micro-batches of the step that begins after `consumed_samples` samples: the ramp's
  // global batch size rounded down to whole micro-steps (Megatron's running batch size), else
  // num_accumulation_steps.
  std::int64_t micro_batches_at(std::int64_t consumed_samples) const;
  // The micro-batches of a step at the full global batch size (after any ramp): an evaluation's
  // global batch.
  std::int64_t final_micro_batches() const;
  // Every micro-batch count a step of this run can have, ascending.
  std::vector<std::int64_t> micro_batch_counts() const;
};

dist::ParallelDegrees parallel_degrees(const ParallelismConfig& parallelism);

// Every reason degrees that are each valid (>= 1; data_parallel_shard -1 or >= 1, which the
// parallelism rules check) do not fit `world_size` ranks, in the spec's words; empty when they fit.
std::vector<std::string> world_size_problems(int world_size, const dist::ParallelDegrees& degrees);

// Why the interleaved 1F1B schedule (chunks > 1) cannot run `micro_batches` per step over `pp`
// ranks, empty when it can: it runs them in rounds of m / max(1, m / pp), so m must be a
// multiple of the number of rounds (the reference's ScheduleInterleaved1F1B rule).
std::string interleaved_micro_batch_problem(int pp, int chunks, std::int64_t micro_batches);

}  // namespace loom::config
