#include "loom/dist/parallel_dims.h"

#include <algorithm>
#include <functional>

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
  // Two ranks are in the same group when the key of everything *outside* the axis matches.
  using Key = std::function<long long(int)>;
  auto coords = [this](int r) { return coordinates(r); };
  Key key;
  if (axis == "pp") key = [&](int r) { auto c = coords(r); return (long long)rank_of({0, c.dp_replicate, c.dp_shard, c.cp, c.tp}); };
  else if (axis == "dp_replicate") key = [&](int r) { auto c = coords(r); return (long long)rank_of({c.pp, 0, c.dp_shard, c.cp, c.tp}); };
  else if (axis == "dp_shard") key = [&](int r) { auto c = coords(r); return (long long)rank_of({c.pp, c.dp_replicate, 0, c.cp, c.tp}); };
  else if (axis == "cp") key = [&](int r) { auto c = coords(r); return (long long)rank_of({c.pp, c.dp_replicate, c.dp_shard, 0, c.tp}); };
  else if (axis == "tp") key = [&](int r) { auto c = coords(r); return (long long)rank_of({c.pp, c.dp_replicate, c.dp_shard, c.cp, 0}); };
  else if (axis == "fsdp") key = [&](int r) { auto c = coords(r); return (long long)rank_of({c.pp, c.dp_replicate, 0, 0, c.tp}); };
  else if (axis == "batch") key = [&](int r) { auto c = coords(r); return (long long)rank_of({c.pp, 0, 0, c.cp, c.tp}); };
  else if (axis == "loss") key = [&](int r) { auto c = coords(r); return (long long)rank_of({c.pp, 0, 0, 0, c.tp}); };
  else if (axis == "ep" || axis == "efsdp") {
    const bool along_ep = axis == "ep";
    key = [&, along_ep](int r) {
      auto c = coords(r);
      const long long other = along_ep ? efsdp_index(r) : ep_index(r);
      return ((long long)c.pp * dp_replicate_ + c.dp_replicate) * world_size_ + other;
    };
  } else {
    LOOM_THROW(ValueError, "unknown mesh axis '", axis,
               "'; use pp, dp_replicate, dp_shard, cp, tp, fsdp, batch, loss, ep or efsdp");
  }
  const long long mine = key(rank);
  std::vector<int> out;
  for (int r = 0; r < world_size_; ++r)
    if (key(r) == mine) out.push_back(r);
  return out;
}

}  // namespace loom::dist
