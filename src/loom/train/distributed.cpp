#include "loom/train/distributed.h"

#include <algorithm>

#include "loom/core/error.h"
#include "loom/dist/sharded_checkpoint.h"

namespace loom::train {

dist::FsdpOptions fsdp_options(const config::ParallelismConfig& parallelism, const dist::ParallelDims& dims) {
  dist::FsdpOptions o;
  o.reshard_after_forward_policy = parallelism.reshard_after_forward_policy;
  o.pipeline_parallel = dims.pp() > 1;
  o.disable_gradient_division = parallelism.disable_gradient_division;
  o.cpu_offload = parallelism.cpu_offload;
  return o;
}

dist::ExpertParallelOptions expert_parallel_options(const config::ParallelismConfig& parallelism) {
  dist::ExpertParallelOptions o;
  if (parallelism.moe_token_dispatcher_type == "alltoall_deredundancy")
    o.dispatcher = dist::TokenDispatcher::alltoall_deredundancy;
  o.ranks_per_node = parallelism.npu_nums_per_device;
  return o;
}

dist::PipelineLayout pipeline_layout(const config::PipelinePlan& plan) {
  dist::PipelineLayout layout;
  layout.pipeline_parallel = plan.pipeline_parallel;
  layout.chunks = plan.interleave_num;
  for (const config::VirtualStage& s : plan.stages) layout.stage_layers.emplace_back(s.layers.first, s.layers.last);
  return layout;
}

PipelineScheduleOptions pipeline_schedule_options(const config::ParallelismConfig& parallelism,
                                                  const config::PipelinePlan& plan) {
  PipelineScheduleOptions o;
  o.overlap_p2p = parallelism.pipeline_parallel_overlap_p2p;
  o.kind = plan.schedule == "gpipe" ? PipelineScheduleKind::gpipe : PipelineScheduleKind::one_f_one_b;
  o.overlap_b_f = plan.overlap_b_f;
  return o;
}

std::map<int64_t, std::vector<int64_t>> gather_over_stages(dist::ProcessGroup& pp,
                                                           const std::map<int64_t, std::vector<int64_t>>& counts) {
  if (pp.size() == 1) return counts;
  // Flattened as (layer, n, n counts)..., padded to the longest rank's length.
  std::vector<int64_t> mine;
  for (const auto& [layer, c] : counts) {
    mine.push_back(layer);
    mine.push_back(static_cast<int64_t>(c.size()));
    mine.insert(mine.end(), c.begin(), c.end());
  }
  const int64_t longest = pp.all_reduce_scalar(static_cast<int64_t>(mine.size()), dist::ReduceOp::max);
  mine.resize(static_cast<size_t>(longest + 1), -1);  // -1 ends a rank's list
  std::vector<int64_t> all(mine.size() * static_cast<size_t>(pp.size()));
  pp.all_gather(std::span<const int64_t>(mine), std::span<int64_t>(all));
  std::map<int64_t, std::vector<int64_t>> out;
  for (int r = 0; r < pp.size(); ++r) {
    const int64_t* p = all.data() + static_cast<size_t>(r) * mine.size();
    while (*p >= 0) {
      const int64_t layer = p[0], n = p[1];
      out[layer].assign(p + 2, p + 2 + n);
      p += 2 + n;
    }
  }
  return out;
}

void max_over_stage_replicas(dist::DeviceMesh& mesh, std::vector<optim::QkClipLayer>& layers) {
  // The ranks of one stage tracked the same layers in the same order (same model, same code path).
  std::vector<float> flat;
  for (const auto& l : layers) flat.insert(flat.end(), l.max_logits.begin(), l.max_logits.end());
  const int64_t n = static_cast<int64_t>(flat.size());
  for (const char* axis : {"dp_replicate", "fsdp"}) {
    dist::ProcessGroup& group = mesh.group(axis);
    if (group.size() == 1) continue;
    LOOM_CHECK(group.all_reduce_scalar(n, dist::ReduceOp::max) == n &&
                   group.all_reduce_scalar(n, dist::ReduceOp::min) == n,
               DistError, "QK-clip: ranks of one pipeline stage tracked different numbers of attention heads");
    group.all_reduce(std::span<float>(flat), dist::ReduceOp::max);
  }
  size_t k = 0;
  for (auto& l : layers)
    for (float& v : l.max_logits) v = flat[k++];
}

void gather_heads(dist::ProcessGroup& tp, std::vector<optim::QkClipLayer>& layers) {
  if (tp.size() == 1) return;
  // Tensor parallelism splits the heads in contiguous blocks by rank: gathering in rank order
  // restores the global head order.
  for (auto& l : layers) {
    std::vector<float> all(l.max_logits.size() * static_cast<size_t>(tp.size()));
    tp.all_gather(std::span<const float>(l.max_logits), std::span<float>(all));
    l.max_logits = std::move(all);
  }
}

void shard_checkpoint_contents(CheckpointContents& c, nn::Module& module, dist::ProcessGroup& world,
                               const std::optional<std::string>& prefix, bool remove_redundancy) {
  auto entries = dist::checkpoint_entries(module, c.model, c.optimizer);
  dist::ShardedSave s = dist::prepare_sharded_save(
      world, entries,
      [&prefix](bool optimizer, int rank, int world_size) {
        return optimizer ? optimizer_file_name(prefix, rank, world_size) : model_file_name(prefix, rank, world_size);
      },
      remove_redundancy);
  c.model = std::move(s.model);
  c.optimizer = std::move(s.optimizer);
  // The reference writes metadata.json for multi-card checkpoints only; one process holds whole
  // tensors, which load_resharded reads without it.
  if (world.size() > 1) c.metadata = std::move(s.metadata);
}

}  // namespace loom::train
