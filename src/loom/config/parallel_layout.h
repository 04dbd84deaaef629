// The parallel layout a configuration gets on a given number of ranks: ParallelDims, gradient
// accumulation and pipeline stages, with every world-size dependent rule of
// parallel_training.md ("Parallelism Configuration Limitations") and other_training_features.md §1.
#pragma once

#include <cstdint>
#include <optional>

#include "loom/config/diagnostics.h"
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

// Adds every problem to `diag`; returns the layout when the degrees fit the world size.
std::optional<ParallelLayout> resolve_layout(const TrainConfig& config, int world_size, Diagnostics& diag);
// Throws ConfigError listing every problem.
ParallelLayout resolve_layout(const TrainConfig& config, int world_size);

}  // namespace loom::config
