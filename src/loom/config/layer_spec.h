// Layer specs ('5', '0-3') used by recompute, recompute_comm and swap, and the pipeline layer
// placement (parallelism.pipeline_parallel_layers_per_stage), with the reference's rules and
// messages (MindFormers' activation_checkpoint.py layer-spec parser and pipeline_parallel.py
// PpLayerSetting).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/diagnostics.h"
#include "loom/config/sections.h"

namespace loom::config {

// An inclusive range of layer ids.
struct LayerRange {
  std::int64_t first = 0;
  std::int64_t last = 0;
  bool operator==(const LayerRange&) const = default;
};

// Checks each spec ('5' or 'start-end' with start <= end, within [0, num_layers-1] when
// num_layers is known) and that the specs are strictly ascending and non-overlapping. Problems
// go to `diag` under `field_path[i]`; the valid ranges are returned. For recompute and swap,
// num_layers counts the MTP layers too (MTP layer i is layer num_layers + i).
std::vector<LayerRange> parse_layer_specs(const LayerSpecs& specs, std::optional<std::int64_t> num_layers,
                                          const std::string& field_path, Diagnostics& diag);
// The same, throwing ConfigError that lists every problem.
std::vector<LayerRange> parse_layer_specs(const LayerSpecs& specs, std::optional<std::int64_t> num_layers,
                                          const std::string& field_path);

// Every layer id covered by the ranges, ascending.
std::vector<std::int64_t> layer_ids(const std::vector<LayerRange>& ranges);
// "0-3, 5" (a single layer is written once).
std::string format_layer_range(const LayerRange& range);

// One pipeline model chunk: virtual stage `index` = chunk * pipeline_parallel + pp_rank.
struct VirtualStage {
  int index = 0;
  int pp_rank = 0;
  int chunk = 0;
  LayerRange layers;
};

struct PipelinePlan {
  int pipeline_parallel = 1;
  int interleave_num = 1;
  // "1f1b", "interleaved_1f1b" or "gpipe": the configured schedule, lower-cased, with 1f1b
  // upgraded to interleaved_1f1b when interleave_num > 1 (reference _infer_schedule_type).
  std::string schedule = "1f1b";
  // pipeline_parallel_overlap_b_f as it takes effect: on for MoE models only (check_parallelism).
  bool overlap_b_f = false;
  bool is_auto = true;
  // By virtual stage index; empty when the number of layers is unknown.
  std::vector<VirtualStage> stages;

  int num_virtual_stages() const { return pipeline_parallel * interleave_num; }
  // Virtual stages held by a pipeline rank: chunk * pp + pp_rank for each chunk.
  std::vector<int> local_stage_indices(int pp_rank) const;
};

// Resolves the pipeline placement of `num_layers` decoder layers (without MTP layers). Problems
// go to `diag` (paths under "parallelism."); returns nullopt when the placement is invalid.
// `config` tells a default from a value the user wrote (for warnings).
std::optional<PipelinePlan> plan_pipeline(const ParallelismConfig& parallelism, std::optional<std::int64_t> num_layers,
                                          const TrainConfig& config, Diagnostics& diag);

}  // namespace loom::config
