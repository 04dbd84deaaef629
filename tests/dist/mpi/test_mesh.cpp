// Device mesh groups over real processes (TorchTitan's rank layout), at 1, 2 and 4 ranks.
#include <gtest/gtest.h>

#include "loom/dist/device_mesh.h"
#include "loom/dist/runtime.h"

namespace loom::dist {
namespace {

// A parameter sharded along dim 0 over `axis` (every rank holding its own rows).
nn::Placement sharded_on(const std::string& axis) {
  nn::Placement p;
  p.add(Shape{8}, nn::AxisPlacement::shard(axis, 0, {{0, 2}}));
  return p;
}

// Sum of the world ranks of this rank's group along `axis`, through that group.
int64_t group_rank_sum(DeviceMesh& mesh, const std::string& axis) {
  return mesh.group(axis).all_reduce_scalar(int64_t{mesh.rank()});
}

int64_t expected_sum(const ParallelDims& dims, const std::string& axis, int rank) {
  int64_t s = 0;
  for (int r : dims.group_ranks(axis, rank)) s += r;
  return s;
}

void check_mesh(const ParallelDegrees& degrees) {
  auto world = Runtime::get()->world();
  const ParallelDims dims = ParallelDims::infer(world->size(), degrees);
  DeviceMesh mesh(world, dims);
  for (const std::string& axis : DeviceMesh::axis_names()) {
    if (axis == "world") continue;
    EXPECT_EQ(mesh.group(axis).size(), static_cast<int>(dims.group_ranks(axis, mesh.rank()).size())) << axis;
    EXPECT_EQ(mesh.group(axis).size(), mesh.size(axis)) << axis;
    EXPECT_EQ(group_rank_sum(mesh, axis), expected_sum(dims, axis, mesh.rank())) << axis;
    EXPECT_EQ(mesh.group(axis).members(), dims.group_ranks(axis, mesh.rank())) << axis;
  }
}

TEST(Mesh, PureFsdpGroups) {
  ParallelDegrees d;  // data_parallel_shard -1: every rank shards
  check_mesh(d);
  auto world = Runtime::get()->world();
  DeviceMesh mesh(world, ParallelDims::infer(world->size(), d));
  EXPECT_EQ(mesh.size("fsdp"), world->size());
  EXPECT_EQ(mesh.size("dp_replicate"), 1);
  // An FSDP-sharded parameter has one copy of each grad element; a replicated one has fsdp copies.
  EXPECT_EQ(mesh.replica_factor(sharded_on("fsdp")), 1);
  EXPECT_EQ(mesh.replica_factor(nn::Placement()), world->size());
}

TEST(Mesh, HsdpGroupsWhenFourRanks) {
  auto world = Runtime::get()->world();
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  ParallelDegrees d;
  d.data_parallel_shard = 2;  // dp_replicate 2 x dp_shard 2
  check_mesh(d);
  DeviceMesh mesh(world, ParallelDims::infer(4, d));
  EXPECT_EQ(mesh.size("dp_replicate"), 2);
  EXPECT_EQ(mesh.size("fsdp"), 2);
  // (rep, shard): rank = rep * 2 + shard.
  EXPECT_EQ(mesh.group("fsdp").members(), (std::vector<int>{mesh.rank() / 2 * 2, mesh.rank() / 2 * 2 + 1}));
  EXPECT_EQ(mesh.group("dp_replicate").members(), (std::vector<int>{mesh.rank() % 2, mesh.rank() % 2 + 2}));
  EXPECT_EQ(mesh.replica_factor(sharded_on("fsdp")), 2);
}

TEST(Mesh, TensorAndPipelineAxesWhenFourRanks) {
  auto world = Runtime::get()->world();
  if (world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  ParallelDegrees d;
  d.tensor_parallel = 2;
  d.pipeline_parallel = 2;
  check_mesh(d);
  ParallelDegrees e;
  e.context_parallel = 2;
  e.expert_parallel = 2;
  check_mesh(e);
}

TEST(Mesh, StatsByGroupCountsAStrategysSubgroupUnderItsAxis) {
  auto world = Runtime::get()->world();
  if (world->size() % 2 != 0) GTEST_SKIP() << "needs an even number of ranks";
  ParallelDegrees d;
  d.tensor_parallel = 2;
  DeviceMesh mesh(world, ParallelDims::infer(world->size(), d));
  ProcessGroup& tp = mesh.group("tp");
  // At 2 ranks tp is the whole world and shares its communicator.
  const std::string tp_group = world->size() == 2 ? "world" : "tp";
  EXPECT_EQ(tp.axis(), tp_group);
  std::unique_ptr<ProcessGroup> helper = tp.split_subgroup("tp_helper", {0, 1});
  std::unique_ptr<ProcessGroup> apart = tp.split("tp_apart", {0, 1});
  mesh.reset_stats();
  std::vector<float> x(100, 1.0f);
  helper->all_reduce(std::span<float>(x));
  apart->all_reduce(std::span<float>(x));  // a plain split is its own communicator: not counted
  const int64_t sent = helper->stats().bytes_sent;
  EXPECT_GT(sent, 0);
  EXPECT_EQ(apart->stats().bytes_sent, sent);
  EXPECT_EQ(tp.stats().bytes_sent, 0);
  EXPECT_EQ(tp.subgroup_stats().bytes_sent, sent);
  const auto by_group = mesh.stats_by_group();
  ASSERT_TRUE(by_group.count(tp_group));
  EXPECT_EQ(by_group.at(tp_group).bytes_sent, sent);
  EXPECT_EQ(by_group.count("tp_helper"), 0u);
  if (tp_group != "world") EXPECT_EQ(by_group.at("world").bytes_sent, 0);
  mesh.reset_stats();
  EXPECT_EQ(mesh.stats_by_group().at(tp_group).bytes_sent, 0);
}

}  // namespace
}  // namespace loom::dist
