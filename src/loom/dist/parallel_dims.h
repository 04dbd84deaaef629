// The parallel layout inferred from the world size and the parallelism degrees, by the spec's rules
// (parallel_training.md; MindFormers' parallel_dims.py, a port of TorchTitan's ParallelDims): pure
// arithmetic, no communication, so the configuration and the device mesh share one definition.
// Whether degrees fit a world size is a rule of the configuration (config::world_size_problems,
// with the spec's messages); infer() takes degrees that passed it and asserts that they do.
//
//   data_parallel = world / (tp * pp * cp)
//   data_parallel_shard = -1  =>  dp_replicate = 1, dp_shard = data_parallel
//   otherwise                  dp_replicate = max(data_parallel / shard, 1), dp_shard = data_parallel / dp_replicate
//   ranks are laid out as (pp, dp_replicate, dp_shard, cp, tp), tp fastest
//   dense mesh  (pp, dp_replicate, fsdp = dp_shard * cp, tp)
//   sparse mesh (pp, dp_replicate, efsdp = dp_shard * cp * tp / ep, ep)   (experts)
#pragma once

#include <string>
#include <vector>

namespace loom::dist {

// What the `parallelism` section asks for.
struct ParallelDegrees {
  int data_parallel_shard = -1;  // -1: every data-parallel rank shards (pure FSDP)
  int tensor_parallel = 1;
  int context_parallel = 1;
  int pipeline_parallel = 1;
  int expert_parallel = 1;
};

// A rank's position on each axis of the (pp, dp_replicate, dp_shard, cp, tp) grid.
struct RankCoordinates {
  int pp = 0;
  int dp_replicate = 0;
  int dp_shard = 0;
  int cp = 0;
  int tp = 0;
  bool operator==(const RankCoordinates&) const = default;
};

struct MeshAxis {
  std::string name;
  int size = 1;
  bool operator==(const MeshAxis&) const = default;
};

class ParallelDims {
 public:
  // The layout of degrees that fit `world_size` (every degree >= 1, data_parallel_shard -1 or
  // >= 1, the product of the axes = world_size, expert_parallel dividing dp_shard * cp * tp).
  static ParallelDims infer(int world_size, const ParallelDegrees& degrees);

  int world_size() const { return world_size_; }
  int dp_replicate() const { return dp_replicate_; }
  int dp_shard() const { return dp_shard_; }
  int cp() const { return cp_; }
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int ep() const { return ep_; }
  // dp_replicate * dp_shard: the number of data-parallel shards of every batch.
  int data_parallel() const { return dp_replicate_ * dp_shard_; }
  // FSDP shard group of dense parameters: dp_shard * cp (CP ranks shard parameters too).
  int fsdp() const { return dp_shard_ * cp_; }
  // FSDP shard group of expert parameters: dp_shard * cp * tp / ep.
  int efsdp() const { return dp_shard_ * cp_ * tp_ / ep_; }
  bool fsdp_enabled() const { return dp_shard_ > 1 || cp_ > 1; }

  RankCoordinates coordinates(int rank) const;
  int rank_of(const RankCoordinates& c) const;
  // Index of the rank on the expert axes: position in the flattened (dp_shard, cp, tp) block
  // is efsdp_index * ep + ep_index.
  int ep_index(int rank) const;
  int efsdp_index(int rank) const;

  // Which shard of the data a rank reads: rank % (world / pp) / tp / cp (ranks of one TP x CP
  // group read the same batch); there are data_parallel() shards.
  int dataset_shard_id(int rank) const;
  int num_dataset_shards() const { return data_parallel(); }

  // Mesh axes, outermost first.
  std::vector<MeshAxis> dense_mesh() const;
  std::vector<MeshAxis> sparse_mesh() const;

  // The ranks that share every coordinate with `rank` except along `axis`, in axis order.
  // Axes: "pp", "dp_replicate", "dp_shard", "cp", "tp", "fsdp" (dp_shard x cp),
  // "batch" (dp_replicate x dp_shard), "loss" (batch x cp), "ep", "efsdp".
  std::vector<int> group_ranks(const std::string& axis, int rank) const;

 private:
  int world_size_ = 1;
  int dp_replicate_ = 1, dp_shard_ = 1, cp_ = 1, tp_ = 1, pp_ = 1, ep_ = 1;
};

}  // namespace loom::dist
