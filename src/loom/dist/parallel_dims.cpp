#include "loom/dist/parallel_dims.h"

#include <algorithm>
#include <functional>

#include "loom/core/error.h"

namespace loom::dist {

namespace {

std::string s(int v) { return std::to_string(v); }

}  // namespace

std::vector<std::string> ParallelDims::problems(int world, const ParallelDegrees& d) {
  std::vector<std::string> out;
  if (world < 1) out.push_back("world size must be >= 1, got " + s(world));
  const std::pair<const char*, int> degrees[] = {{"tensor_parallel", d.tensor_parallel},
                                                 {"context_parallel", d.context_parallel},
                                                 {"pipeline_parallel", d.pipeline_parallel},
                                                 {"expert_parallel", d.expert_parallel}};
  for (const auto& [name, value] : degrees)
    if (value < 1) out.push_back(std::string("parallelism.") + name + " must be >= 1, got " + s(value));
  if (d.data_parallel_shard == 0 || d.data_parallel_shard < -1)
    out.push_back("parallelism.data_parallel_shard must be -1 (shard over every data-parallel rank) or a "
                  "positive shard degree, got " + s(d.data_parallel_shard));
  if (!out.empty()) return out;

  const int tp = d.tensor_parallel, cp = d.context_parallel, pp = d.pipeline_parallel, ep = d.expert_parallel;
  const long long model_ranks = static_cast<long long>(tp) * pp * cp;
  const long long dp = world / model_ranks;
  if (dp <= 0) {
    out.push_back("tensor_parallel(" + s(tp) + ") * pipeline_parallel(" + s(pp) + ") * context_parallel(" + s(cp) +
                  ") must be less than or equal to world_size(" + s(world) + ").");
    return out;
  }
  const long long dp_replicate = d.data_parallel_shard < 0 ? 1 : std::max<long long>(dp / d.data_parallel_shard, 1);
  const long long dp_shard = dp / dp_replicate;
  const long long product = dp_replicate * dp_shard * cp * tp * pp;
  if (product != world) {
    std::string why;
    if (world % model_ranks != 0)
      why = "world_size must be divisible by tensor_parallel * pipeline_parallel * context_parallel = " +
            std::to_string(model_ranks);
    else
      why = "parallelism.data_parallel_shard (" + s(d.data_parallel_shard) + ") must divide data_parallel (" +
            std::to_string(dp) + " = world_size / (tp * pp * cp))";
    out.push_back("Invalid parallel dims: dp_replicate(" + std::to_string(dp_replicate) + ") * dp_shard(" +
                  std::to_string(dp_shard) + ") * cp(" + s(cp) + ") * tp(" + s(tp) + ") * pp(" + s(pp) +
                  ") = " + std::to_string(product) + " != world_size(" + s(world) + "); " + why);
    return out;
  }
  const long long expert_block = dp_shard * cp * tp;
  if (expert_block % ep != 0)
    out.push_back("parallelism.expert_parallel (" + s(ep) + ") must divide dp_shard * cp * tp = " +
                  std::to_string(expert_block) + " (dp_shard " + std::to_string(dp_shard) + ", cp " + s(cp) + ", tp " +
                  s(tp) + "): experts are spread over the dp_shard x cp x tp ranks of one replica, so efsdp = "
                  "dp_shard * cp * tp / expert_parallel must be a whole number");
  return out;
}

ParallelDims ParallelDims::infer(int world, const ParallelDegrees& d) {
  auto issues = problems(world, d);
  if (!issues.empty()) {
    std::string all;
    for (std::size_t i = 0; i < issues.size(); ++i) all += (i ? "\n" : "") + issues[i];
    throw ConfigError(all);
  }
  ParallelDims dims;
  dims.world_size_ = world;
  dims.tp_ = d.tensor_parallel;
  dims.cp_ = d.context_parallel;
  dims.pp_ = d.pipeline_parallel;
  dims.ep_ = d.expert_parallel;
  const int dp = world / (dims.tp_ * dims.pp_ * dims.cp_);
  dims.dp_replicate_ = d.data_parallel_shard < 0 ? 1 : std::max(dp / d.data_parallel_shard, 1);
  dims.dp_shard_ = dp / dims.dp_replicate_;
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
