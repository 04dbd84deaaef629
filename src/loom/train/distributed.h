// The trainer's parallel pieces (semantics.md §1.2, spec parallel_training.md): the FSDP options
// from the parallelism section, the QK-clip maxima every rank
// must agree on, and the sharded checkpoint contents. They work on a mesh of any size (one
// process included), so the trainer calls them unconditionally.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/config/parallel_layout.h"
#include "loom/config/sections.h"
#include "loom/dist/expert_parallel.h"
#include "loom/dist/fsdp.h"
#include "loom/dist/pipeline.h"
#include "loom/nn/module.h"
#include "loom/optim/named_param.h"
#include "loom/optim/qk_clip.h"
#include "loom/train/checkpoint.h"
#include "loom/train/pipeline_schedule.h"

namespace loom::train {

dist::FsdpOptions fsdp_options(const config::ParallelismConfig& parallelism, const dist::ParallelDims& dims);

// The token dispatcher of expert parallelism (moe_token_dispatcher_type, npu_nums_per_device).
dist::ExpertParallelOptions expert_parallel_options(const config::ParallelismConfig& parallelism);

// The virtual stages' layers as the configuration placed them (config::plan_pipeline).
dist::PipelineLayout pipeline_layout(const config::PipelinePlan& plan);
// The pipeline schedule's options as they take effect (overlap_b_f on MoE models only).
PipelineScheduleOptions pipeline_schedule_options(const config::ParallelismConfig& parallelism,
                                                  const config::PipelinePlan& plan);

// Per-MoE-layer routing counts of every pipeline stage (each holds its own layers' counts):
// the union over `pp`, the same on every rank.
std::map<int64_t, std::vector<int64_t>> gather_over_stages(dist::ProcessGroup& pp,
                                                           const std::map<int64_t, std::vector<int64_t>>& counts);

// QK-clip inputs of this rank's heads (tensor parallelism splits them) in global head order.
void gather_heads(dist::ProcessGroup& tp, std::vector<optim::QkClipLayer>& layers);

// QK-clip inputs (after gather_heads): per-head maxima over every rank that holds the same layers,
// i.e. the data-parallel and context-parallel ranks of this rank's pipeline stage (dp_replicate ×
// fsdp; its tp ranks hold the same gathered heads). Other stages hold other layers.
void max_over_stage_replicas(dist::DeviceMesh& mesh, std::vector<optim::QkClipLayer>& layers);

// Sharded checkpoint contents of this rank: what its files hold (its pieces of every tensor,
// placed by the parameters' placements) and, on rank 0 of a multi-process run, metadata.json.
void shard_checkpoint_contents(CheckpointContents& contents, nn::Module& module, dist::ProcessGroup& world,
                               const std::optional<std::string>& prefix, bool remove_redundancy);

}  // namespace loom::train
