#include "loom/dist/parallel_dims.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::dist {

ParallelDims ParallelDims::infer(int world, const ParallelDegrees& d) {
  LOOM_ASSERT(world >= 1 && d.tensor_parallel >= 1 && d.context_parallel >= 1 && d.pipeline_parallel >= 1 &&
                  d.expert_parallel >= 1 && (d.data_parallel_shard == -1 || d.data_parallel_shard >= 1),
              "parallel degrees must be validated (config::world_size_problems) before the layout is inferred");
  ParallelDims dims;
  dims.world_size_ = world;
  dims.tp_ = d.tensor_parallel;
  dims.cp_ = d.context_parallel;
  dims.pp_ = d.pipeline_parallel;
  dims.ep_ = d.expert_parallel;
  const int dp = world / (dims.tp_ * dims.pp_ * dims.cp_);
  LOOM_ASSERT(dp >= 1, "tensor * pipeline * context parallel exceed the world of ", world, " ranks");
  dims.dp_replicate_ = d.data_parallel_shard < 0 ? 1 : std::max(dp / d.data_parallel_shard, 1);
  dims.dp_shard_ = dp / dims.dp_replicate_;
  LOOM_ASSERT(static_cast<long long>(dims.data_parallel()) * dims.cp_ * dims.tp_ * dims.pp_ == world &&
                  dims.dp_shard_ * dims.cp_ * dims.tp_ % dims.ep_ == 0,
              "the degrees do not fit the world of ", world, " ranks");
  return dims;
}

RankCoordinates ParallelDims::coordinates(int rank) const {
  LOOM_CHECK(rank >= 0 && rank < world_size_, ValueError, "rank ", rank, " is outside the world of ", world_size_,
             " ranks");
  RankCoordinates c;
  c.tp = rank % tp_;
  rank /= tp_;
  c.cp = rank % cp_;
  rank /= cp_;
  c.dp_shard = rank % dp_shard_;
  rank /= dp_shard_;
  c.dp_replicate = rank % dp_replicate_;
  c.pp = rank / dp_replicate_;
  return c;
}

int ParallelDims::rank_of(const RankCoordinates& c) const {
  return (((c.pp * dp_replicate_ + c.dp_replicate) * dp_shard_ + c.dp_shard) * cp_ + c.cp) * tp_ + c.tp;
}

int ParallelDims::ep_index(int rank) const {
  const RankCoordinates c = coordinates(rank);
  return ((c.dp_shard * cp_ + c.cp) * tp_ + c.tp) % ep_;
}

int ParallelDims::efsdp_index(int rank) const {
  const RankCoordinates c = coordinates(rank);
  return ((c.dp_shard * cp_ + c.cp) * tp_ + c.tp) / ep_;
}

int ParallelDims::dataset_shard_id(int rank) const {
  LOOM_CHECK(rank >= 0 && rank < world_size_, ValueError, "rank ", rank, " is outside the world of ", world_size_,
             " ranks");
  return rank % (world_size_ / pp_) / tp_ / cp_;
}

std::vector<MeshAxis> ParallelDims::dense_mesh() const {
  return {{"pp", pp_}, {"dp_replicate", dp_replicate_}, {"fsdp", fsdp()}, {"tp", tp_}};
}

std::vector<MeshAxis> ParallelDims::sparse_mesh() const {
  return {{"pp", pp_}, {"dp_replicate", dp_replicate_}, {"efsdp", efsdp()}, {"ep", ep_}};
}

std::vector<int> ParallelDims::group_ranks(const std::string& axis, int rank) const {
  // The ranks that share every coordinate outside the axis, built from the coordinates (a planner
  // asks this for every role of every layout of thousands of ranks: no scan of the world), in
  // rank order because the loops nest as the rank's digits do (tp fastest).
  const RankCoordinates c = coordinates(rank);
  auto varying = [&](bool pp, bool dp_replicate, bool dp_shard, bool cp, bool tp) {
    auto first = [](bool free, int mine) { return free ? 0 : mine; };
    auto end = [](bool free, int mine, int size) { return free ? size : mine + 1; };
    std::vector<int> out;
    for (int a = first(pp, c.pp); a < end(pp, c.pp, pp_); ++a)
      for (int b = first(dp_replicate, c.dp_replicate); b < end(dp_replicate, c.dp_replicate, dp_replicate_); ++b)
        for (int s = first(dp_shard, c.dp_shard); s < end(dp_shard, c.dp_shard, dp_shard_); ++s)
          for (int x = first(cp, c.cp); x < end(cp, c.cp, cp_); ++x)
            for (int t = first(tp, c.tp); t < end(tp, c.tp, tp_); ++t) out.push_back(rank_of({a, b, s, x, t}));
    return out;
  };
  if (axis == "pp") return varying(true, false, false, false, false);
  if (axis == "dp_replicate") return varying(false, true, false, false, false);
  if (axis == "dp_shard") return varying(false, false, true, false, false);
  if (axis == "cp") return varying(false, false, false, true, false);
  if (axis == "tp") return varying(false, false, false, false, true);
  if (axis == "fsdp") return varying(false, false, true, true, false);
  if (axis == "batch") return varying(false, true, true, false, false);
  if (axis == "loss") return varying(false, true, true, true, false);
  if (axis == "ep" || axis == "efsdp") {
    // Within a (pp, dp_replicate) block the dp_shard·cp·tp ranks are split into rows of ep:
    // "ep" is a row (ranks f with the same f / ep), "efsdp" a column (the same f % ep).
    const int block = dp_shard_ * cp_ * tp_;
    const int base = (c.pp * dp_replicate_ + c.dp_replicate) * block, f = rank - base;
    std::vector<int> out;
    if (axis == "ep")
      for (int j = 0; j < ep_; ++j) out.push_back(base + f / ep_ * ep_ + j);
    else
      for (int i = 0; i < block / ep_; ++i) out.push_back(base + i * ep_ + f % ep_);
    return out;
  }
  LOOM_THROW(ValueError, "unknown mesh axis '", axis,
             "'; use pp, dp_replicate, dp_shard, cp, tp, fsdp, batch, loss, ep or efsdp");
}

}  // namespace loom::dist
