// The one-rank process group (every code path runs without mpirun), the rank-order reduction
// shared by the backends, the watchdog and the one-process mesh. Multi-process behaviour is in
// tests/dist/mpi/ (run by mpirun from CTest).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "loom/dist/device_mesh.h"
#include "loom/dist/process_group.h"
#include "loom/dist/runtime.h"
#include "loom/dist/watchdog.h"

namespace loom::dist {
namespace {

TEST(SingleRankGroup, CollectivesAreCopiesOrNothing) {
  auto g = make_single_rank_group("fsdp");
  EXPECT_EQ(g->size(), 1);
  EXPECT_EQ(g->rank(), 0);
  EXPECT_EQ(g->axis(), "fsdp");
  std::vector<float> v{1, 2, 3};
  g->all_reduce(std::span<float>(v));
  EXPECT_EQ(v, (std::vector<float>{1, 2, 3}));
  std::vector<float> out(3);
  g->reduce_scatter(std::span<const float>(v), std::span<float>(out));
  EXPECT_EQ(out, v);
  std::vector<bf16> b{bf16(1.5f)}, bo(1);
  g->all_gather(std::span<const bf16>(b), std::span<bf16>(bo));
  EXPECT_EQ(static_cast<float>(bo[0]), 1.5f);
  std::vector<int64_t> i{4, 5}, io(2);
  g->all_to_all_v(std::span<const int64_t>(i), {2}, std::span<int64_t>(io), {2});
  EXPECT_EQ(io, i);
  g->broadcast(std::span<int64_t>(i), 0);
  g->barrier();
  EXPECT_EQ(g->all_reduce_scalar(2.5), 2.5);
  EXPECT_EQ(g->stats().bytes_sent, 0);
}

TEST(SingleRankGroup, ChecksSizesDtypesAndPeers) {
  auto g = make_single_rank_group("world");
  std::vector<float> in(4), out(3);
  EXPECT_THROW(g->reduce_scatter(std::span<const float>(in), std::span<float>(out)), ShapeError);
  EXPECT_THROW(g->all_gather(std::span<const float>(in), std::span<float>(out)), ShapeError);
  EXPECT_THROW(g->send(std::span<const float>(in), 0), ValueError);  // no other rank
  EXPECT_THROW(g->all_reduce(Tensor::zeros({2}, DType::u8)), DTypeError);
  EXPECT_THROW(g->all_reduce(Tensor::zeros({4, 4}).transpose(0, 1)), ValueError);  // not contiguous
  try {
    g->all_to_all_v(std::span<const float>(in), {1, 2}, std::span<float>(out), {3});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("one entry per rank"), std::string::npos) << e.what();
  }
}

TEST(SingleRankGroup, AsynchronousOpsReturnCompletedHandles) {
  auto g = make_single_rank_group("tp");
  std::vector<float> v{1, 2, 3}, out(3);
  std::vector<WorkHandle> works;
  works.push_back(g->iall_reduce(std::span<float>(v)));
  works.push_back(g->ireduce_scatter(std::span<const float>(v), std::span<float>(out)));
  EXPECT_EQ(out, v);  // done before the handle came back: nothing to wait for
  std::vector<double> gathered(3);
  std::vector<double> mine{4, 5, 6};
  works.push_back(g->iall_gather(std::span<const double>(mine), std::span<double>(gathered)));
  EXPECT_EQ(gathered, mine);
  std::vector<int64_t> i{7, 8}, io(2);
  works.push_back(g->iall_to_all_v(std::span<const int64_t>(i), {2}, std::span<int64_t>(io), {2}));
  EXPECT_EQ(io, i);
  works.push_back(g->ibroadcast(std::span<int64_t>(i), 0));
  Tensor t = Tensor::full({2, 2}, 3.0), tg = Tensor::zeros({2, 2});
  works.push_back(g->iall_reduce(t));
  works.push_back(g->iall_gather(t, tg));
  EXPECT_EQ(tg.at({1, 1}), 3.0);
  for (const auto& w : works) {
    EXPECT_TRUE(w->is_completed()) << w->op();
    EXPECT_NO_THROW(w->wait());
  }
  EXPECT_EQ(g->stats().bytes_sent, 0);
  EXPECT_EQ(g->stats().num_collectives, 0);
}

TEST(SingleRankGroup, AsynchronousArgumentErrorsAreThrownAtIssue) {
  auto g = make_single_rank_group("world");
  std::vector<float> in(4), out(3);
  EXPECT_THROW(g->ireduce_scatter(std::span<const float>(in), std::span<float>(out)), ShapeError);
  EXPECT_THROW(g->iall_gather(std::span<const float>(in), std::span<float>(out)), ShapeError);
  EXPECT_THROW(g->iall_reduce(Tensor::zeros({2}, DType::u8)), DTypeError);
  EXPECT_THROW(g->ibroadcast(std::span<float>(in), 1), ValueError);
  try {
    g->isend(std::span<const float>(in), 0);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("isend on mesh axis 'world': peer 0 must be another rank"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(g->irecv(Tensor::zeros({2}), 0), ValueError);
}

TEST(ReduceInRankOrder, SumIsASequentialChainPerElement) {
  // ((a + b) + c) in float: 1e8 + 1 - 1e8 = 0 in that order, 1 in another.
  std::vector<float> a{1e8f}, b{1.0f}, c{-1e8f}, out(1);
  reduce_in_rank_order({a.data(), b.data(), c.data()}, out.data(), 1, DType::f32, ReduceOp::sum);
  EXPECT_EQ(out[0], (1e8f + 1.0f) + -1e8f);
  reduce_in_rank_order({a.data(), c.data(), b.data()}, out.data(), 1, DType::f32, ReduceOp::sum);
  EXPECT_EQ(out[0], 1.0f);
}

TEST(ReduceInRankOrder, Bf16AccumulatesInFp32AndMaxMinIntegers) {
  std::vector<bf16> x{bf16(1.0f)}, y{bf16(0.00390625f)}, out(1);
  reduce_in_rank_order({x.data(), y.data(), y.data(), y.data()}, out.data(), 1, DType::bf16, ReduceOp::sum);
  EXPECT_EQ(static_cast<float>(out[0]), 1.015625f);  // fp32 1.01171875 rounded once to bf16
  std::vector<int64_t> p{3, -7}, q{5, -9}, r(2);
  reduce_in_rank_order({p.data(), q.data()}, r.data(), 2, DType::i64, ReduceOp::max);
  EXPECT_EQ(r, (std::vector<int64_t>{5, -7}));
  reduce_in_rank_order({p.data(), q.data()}, r.data(), 2, DType::i64, ReduceOp::min);
  EXPECT_EQ(r, (std::vector<int64_t>{3, -9}));
}

TEST(Watchdog, FiresOnACollectiveThatOutlastsTheTimeout) {
  Watchdog& wd = Watchdog::instance();
  const double saved = wd.timeout();
  int code = 0;
  wd.set_abort_handler([&code](int c) { code = c; });
  wd.set_timeout(0.15);
  const int64_t before = wd.fired();
  {
    CollectiveScope fast("all_gather", "fsdp", 2);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  EXPECT_EQ(wd.fired(), before);  // finished in time: nothing happens
  {
    CollectiveScope slow("reduce_scatter", "fsdp", 2);
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
  }
  EXPECT_EQ(wd.fired(), before + 1);
  EXPECT_EQ(code, Watchdog::kExitCode);
  wd.set_abort_handler({});
  wd.set_timeout(saved);
}

TEST(Runtime, WithoutALauncherTheWorldIsOneRank) {
  Runtime& rt = Runtime::init();
  EXPECT_FALSE(detect_launch().under_launcher);
  EXPECT_EQ(rt.world_size(), 1);
  EXPECT_EQ(rt.rank(), 0);
  EXPECT_FALSE(rt.uses_mpi());
  EXPECT_EQ(rt.world()->size(), 1);
}

TEST(DeviceMesh, OneProcessMeshHasEveryAxisOfSizeOne) {
  auto mesh = DeviceMesh::single();
  for (const auto& axis : DeviceMesh::axis_names()) {
    EXPECT_EQ(mesh->group(axis).size(), 1) << axis;
    EXPECT_EQ(mesh->size(axis), 1) << axis;
  }
  EXPECT_EQ(mesh->replica_factor(nn::Placement()), 1);
  EXPECT_THROW(mesh->group("dp"), ValueError);
}

TEST(DeviceMesh, RejectsALayoutForAnotherWorldSize) {
  auto world = std::shared_ptr<ProcessGroup>(make_single_rank_group("world"));
  try {
    DeviceMesh mesh(world, ParallelDims::infer(4, ParallelDegrees{}));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("loom launch -n 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::dist
