#include "loom/dist/device_mesh.h"

#include "loom/core/error.h"

namespace loom::dist {

const std::vector<std::string>& DeviceMesh::axis_names() {
  static const std::vector<std::string> names = {"pp", "dp_replicate", "dp_shard", "cp",  "tp",   "fsdp",
                                                 "batch", "loss",      "ep",       "efsdp", "world"};
  return names;
}

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, ParallelDims dims)
    : world_(std::move(world)), dims_(std::move(dims)) {
  LOOM_CHECK(world_ != nullptr, ValueError, "DeviceMesh: the world group is null");
  LOOM_CHECK(world_->size() == dims_.world_size(), ConfigError, "the parallel layout is for ", dims_.world_size(),
             " ranks but ", world_->size(), " processes were started; start ", dims_.world_size(),
             " processes (loom launch -n ", dims_.world_size(), ") or change the parallelism section");
  for (const std::string& axis : axis_names()) {
    if (axis == "world") {
      groups_[axis] = world_;
      continue;
    }
    std::vector<int> members = dims_.group_ranks(axis, world_->rank());
    // A group of the whole world shares its communicator, except ep: its all-to-all traffic is
    // counted apart from FSDP's and tensor parallelism's on the same ranks (CommStats).
    if (static_cast<int>(members.size()) == world_->size() && (axis != "ep" || members.size() == 1)) {
      groups_[axis] = world_;
      continue;
    }
    groups_[axis] = std::shared_ptr<ProcessGroup>(world_->split(axis, members));
  }
}

std::shared_ptr<DeviceMesh> DeviceMesh::single() {
  return std::make_shared<DeviceMesh>(std::shared_ptr<ProcessGroup>(make_single_rank_group("world")),
                                      ParallelDims::infer(1, ParallelDegrees{}));
}

ProcessGroup& DeviceMesh::group(const std::string& axis) { return *group_ptr(axis); }

std::shared_ptr<ProcessGroup> DeviceMesh::group_ptr(const std::string& axis) {
  auto it = groups_.find(axis);
  if (it == groups_.end()) {
    std::string all;
    for (const auto& n : axis_names()) all += (all.empty() ? "" : ", ") + n;
    LOOM_THROW(ValueError, "device mesh: unknown axis '", axis, "'; the axes are ", all);
  }
  return it->second;
}

int DeviceMesh::size(const std::string& axis) const {
  if (axis == "world") return world_->size();
  if (axis == "pp") return dims_.pp();
  if (axis == "dp_replicate") return dims_.dp_replicate();
  if (axis == "dp_shard") return dims_.dp_shard();
  if (axis == "cp") return dims_.cp();
  if (axis == "tp") return dims_.tp();
  if (axis == "fsdp") return dims_.fsdp();
  if (axis == "batch") return dims_.data_parallel();
  if (axis == "loss") return dims_.data_parallel() * dims_.cp();
  if (axis == "ep") return dims_.ep();
  if (axis == "efsdp") return dims_.efsdp();
  LOOM_THROW(ValueError, "device mesh: unknown axis '", axis, "'");
}

int DeviceMesh::replica_factor(const nn::Placement& placement) const {
  const bool expert = placement.on("ep") != nullptr || placement.on("efsdp") != nullptr;
  const std::vector<std::string> spmd = expert ? std::vector<std::string>{"dp_replicate", "efsdp", "ep"}
                                               : std::vector<std::string>{"dp_replicate", "fsdp", "tp"};
  int factor = 1;
  for (const auto& axis : spmd) {
    const nn::AxisPlacement* a = placement.on(axis);
    factor *= a && a->kind == nn::AxisPlacement::Kind::shard ? a->copies : size(axis);
  }
  return factor;
}

CommStats DeviceMesh::total_stats() const {
  CommStats total;
  std::vector<const ProcessGroup*> seen;
  for (const auto& [axis, g] : groups_) {
    bool dup = false;
    for (auto* s : seen) dup = dup || s == g.get();
    if (dup) continue;
    seen.push_back(g.get());
    total += g->stats();
  }
  return total;
}

std::map<std::string, CommStats> DeviceMesh::stats_by_group() const {
  std::map<std::string, CommStats> out;
  for (const auto& [axis, g] : groups_) {
    if (out.count(g->axis())) continue;  // an axis sharing another's communicator
    CommStats s = g->stats();
    s += g->subgroup_stats();
    out[g->axis()] = s;
  }
  return out;
}

void DeviceMesh::reset_stats() {
  for (auto& [axis, g] : groups_) g->reset_stats();
}

}  // namespace loom::dist
