// The trainer's multi-process pieces (semantics.md §1.2, spec parallel_training.md): which
// layouts this build trains, the FSDP options from the parallelism section, the values every
// rank must agree on (logged loss, grad norm, routing counts, QK-clip maxima), and sharded
// checkpoint contents. Kept out of trainer.cpp so the single-process loop stays readable.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/config/parallel_layout.h"
#include "loom/config/sections.h"
#include "loom/dist/fsdp.h"
#include "loom/optim/named_param.h"
#include "loom/optim/qk_clip.h"
#include "loom/train/checkpoint.h"

namespace loom::train {

// ConfigError for layouts this build cannot train yet (tensor/context/pipeline/expert parallelism
// arrive with later issues; Muon needs whole matrices, so no FSDP sharding with it).
void check_distributed_support(const config::TrainConfig& config, const config::ParallelLayout& layout);

dist::FsdpOptions fsdp_options(const config::ParallelismConfig& parallelism, const config::ParallelLayout& layout);

// Mean of a per-rank value over every rank (the reference's all_reduce(loss, SUM) / world).
double mean_over_ranks(dist::ProcessGroup& world, double value);

// QK-clip inputs: per-head maxima over every rank.
void max_over_ranks(dist::ProcessGroup& world, std::vector<optim::QkClipLayer>& layers);

// Sharded checkpoint contents of this rank (model, optimizer and, on rank 0, metadata.json).
void shard_checkpoint_contents(CheckpointContents& contents, dist::FullyShardedModel* fsdp, dist::ProcessGroup& world,
                               const std::optional<std::string>& prefix, bool remove_redundancy);

}  // namespace loom::train
