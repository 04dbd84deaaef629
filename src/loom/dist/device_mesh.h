// The device mesh: one process group per mesh axis of ParallelDims (TorchTitan's mesh layout, as
// MindFormers' parallel_dims.py builds it), built once from the world group. Ranks are laid out
// (pp, dp_replicate, dp_shard, cp, tp), tp fastest; the dense mesh is (pp, dp_replicate, fsdp =
// dp_shard·cp, tp), the sparse (expert) mesh (pp, dp_replicate, efsdp = dp_shard·cp·tp/ep, ep), and
// "loss" = batch × cp is where the logged loss is averaged.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/dist/parallel_dims.h"
#include "loom/dist/process_group.h"
#include "loom/nn/placement.h"

namespace loom::dist {

class DeviceMesh {
 public:
  // Every axis below, in this order.
  static const std::vector<std::string>& axis_names();

  // Collective over `world` (every rank builds the mesh, in the same order of calls). The
  // world's size must equal dims.world_size().
  DeviceMesh(std::shared_ptr<ProcessGroup> world, ParallelDims dims);
  // A one-process mesh (every axis has size 1): the single-process trainer and tests.
  static std::shared_ptr<DeviceMesh> single();

  const ParallelDims& dims() const { return dims_; }
  int rank() const { return world_->rank(); }
  int world_size() const { return world_->size(); }
  RankCoordinates coordinates() const { return dims_.coordinates(rank()); }
  ProcessGroup& world() { return *world_; }
  const std::shared_ptr<ProcessGroup>& world_ptr() const { return world_; }

  // The group of this rank along `axis` ("pp", "dp_replicate", "dp_shard", "cp", "tp", "fsdp",
  // "batch", "loss", "ep", "efsdp", "world"); ValueError naming the axes otherwise.
  ProcessGroup& group(const std::string& axis);
  std::shared_ptr<ProcessGroup> group_ptr(const std::string& axis);
  int size(const std::string& axis) const;

  // How many ranks of the data-parallel SPMD mesh (dp_replicate, fsdp, tp for dense parameters;
  // dp_replicate, efsdp, ep for experts, i.e. parameters placed on ep or efsdp) hold the same
  // local gradient values of a parameter with this placement: the size of every axis it is not
  // sharded over (replicated, partial before its sum, or absent), times the copies of a shared
  // slice on the axes it is. The grad norm divides each local Σg² by it (MindFormers'
  // _calculate_global_grad_norm).
  int replica_factor(const nn::Placement& placement) const;

  // Bytes this process sent over every axis group since reset_stats().
  CommStats total_stats() const;
  void reset_stats();
  // The same traffic per communicator, keyed by its name (ProcessGroup::axis()): an axis whose
  // group is the whole world shares the world's communicator and is counted under "world"
  // (group(axis).axis() says which). Each includes its strategies' sub-groups (split_subgroup).
  std::map<std::string, CommStats> stats_by_group() const;

 private:
  DeviceMesh() = default;
  std::shared_ptr<ProcessGroup> world_;
  ParallelDims dims_;
  std::map<std::string, std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace loom::dist
