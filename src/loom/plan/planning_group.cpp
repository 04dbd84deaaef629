#include "loom/plan/planning_group.h"

#include <numeric>

#include "loom/core/error.h"

namespace loom::plan {

namespace {

class PlanningGroup final : public dist::ProcessGroup {
 public:
  PlanningGroup(std::string axis, int rank, std::vector<int> members)
      : ProcessGroup(std::move(axis), rank, std::move(members)) {}

  std::unique_ptr<ProcessGroup> split(std::string axis, const std::vector<int>& members) override {
    int mine = -1;
    std::vector<int> world;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] == rank()) mine = static_cast<int>(i);
      world.push_back(this->members()[static_cast<size_t>(members[i])]);
    }
    LOOM_CHECK(mine >= 0, ValueError, "planning mesh: rank ", rank(), " is not a member of its '", axis, "' group");
    return std::make_unique<PlanningGroup>(std::move(axis), mine, std::move(world));
  }

 protected:
  [[noreturn]] void refuse(const char* op) const {
    LOOM_THROW(DistError, "the planner's process group (mesh axis '", axis(), "') cannot ", op,
               ": it places ranks without running them");
  }
  void do_all_reduce(void*, int64_t, DType, dist::ReduceOp) override { refuse("all_reduce"); }
  void do_reduce_scatter(const void*, void*, int64_t, DType, dist::ReduceOp) override { refuse("reduce_scatter"); }
  void do_all_gather(const void*, void*, int64_t, DType) override { refuse("all_gather"); }
  void do_all_to_all_v(const void*, const std::vector<int64_t>&, void*, const std::vector<int64_t>&, DType) override {
    refuse("all_to_all_v");
  }
  void do_send(const void*, int64_t, DType, int, int) override { refuse("send"); }
  void do_recv(void*, int64_t, DType, int, int) override { refuse("recv"); }
  void do_broadcast(void*, int64_t, DType, int) override { refuse("broadcast"); }
  void do_barrier() override { refuse("barrier"); }
  std::unique_ptr<dist::PendingTransfer> do_isend(const void*, int64_t, DType, int, int) override { refuse("isend"); }
  std::unique_ptr<dist::PendingTransfer> do_irecv(void*, int64_t, DType, int, int) override { refuse("irecv"); }
};

}  // namespace

std::shared_ptr<dist::DeviceMesh> planning_mesh(const dist::ParallelDims& dims, int rank) {
  std::vector<int> all(static_cast<size_t>(dims.world_size()));
  std::iota(all.begin(), all.end(), 0);
  return std::make_shared<dist::DeviceMesh>(std::make_shared<PlanningGroup>("world", rank, std::move(all)), dims);
}

}  // namespace loom::plan
