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

struct ParallelLayout {
  int world_size = 1;
  dist::ParallelDims dims;
  // data_parallel * local_batch_size: samples one micro-step of every data-parallel rank takes.
  std::int64_t samples_per_micro_step = 1;
  // global_batch_size // samples_per_micro_step (floor); with rampup, the value at the start.
  std::int64_t num_accumulation_steps = 1;
  // samples_per_micro_step * num_accumulation_steps: what one optimizer step really trains on.
  std::int64_t samples_per_step = 1;
  std::optional<PipelinePlan> pipeline;
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
