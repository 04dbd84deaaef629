// ParallelDims (loom/dist/parallel_dims.h): the spec's inference of dp_replicate / dp_shard,
// the EP grid, rank coordinates, dataset shards and mesh groups (parallel_training.md,
// MindFormers' parallel_dims.py), and the world-size rules the configuration
// checks before it (config::world_size_problems, loom/config/parallel_layout.h).
#include <gtest/gtest.h>

#include "loom/config/parallel_layout.h"
#include "loom/core/error.h"
#include "loom/dist/parallel_dims.h"

using loom::ValueError;
using loom::dist::MeshAxis;
using loom::dist::ParallelDegrees;
using loom::dist::ParallelDims;
using loom::dist::RankCoordinates;

namespace {

ParallelDegrees deg(int shard, int tp = 1, int cp = 1, int pp = 1, int ep = 1) {
  return ParallelDegrees{shard, tp, cp, pp, ep};
}

std::string problems(int world, const ParallelDegrees& d) {
  std::string out;
  for (const auto& p : loom::config::world_size_problems(world, d)) out += p + "\n";
  return out;
}

}  // namespace

// parallel_training.md §1.4 Scenario A: 8 devices, data_parallel_shard -1 -> dp_shard 8.
TEST(ParallelDims, PureFsdpUsesEveryDataParallelRankForSharding) {
  auto d = ParallelDims::infer(8, deg(-1));
  EXPECT_EQ(d.dp_replicate(), 1);
  EXPECT_EQ(d.dp_shard(), 8);
  EXPECT_EQ(d.data_parallel(), 8);
  EXPECT_EQ(d.fsdp(), 8);
  EXPECT_TRUE(d.fsdp_enabled());
}

// §1.4 Scenario B: 16 devices, shard 8 -> dp_replicate 16 // 8 = 2.
TEST(ParallelDims, HsdpInfersTheReplicaDegree) {
  auto d = ParallelDims::infer(16, deg(8));
  EXPECT_EQ(d.dp_replicate(), 2);
  EXPECT_EQ(d.dp_shard(), 8);
  EXPECT_EQ(d.data_parallel(), 16);
}

// §2.4: tp 2 on 8 devices leaves data_parallel 4.
TEST(ParallelDims, TensorParallelTakesItsShareFirst) {
  auto d = ParallelDims::infer(8, deg(-1, 2));
  EXPECT_EQ(d.dp_shard(), 4);
  EXPECT_EQ(d.tp(), 2);
  EXPECT_FALSE(ParallelDims::infer(1, deg(-1)).fsdp_enabled());
}

// §3.5 Scenario A: cp 2 -> FSDP shard group dp_shard * cp = 8.
TEST(ParallelDims, ContextParallelRanksShardParametersToo) {
  auto d = ParallelDims::infer(8, deg(-1, 1, 2));
  EXPECT_EQ(d.dp_shard(), 4);
  EXPECT_EQ(d.fsdp(), 8);
  auto one = ParallelDims::infer(2, deg(-1, 1, 2));
  EXPECT_EQ(one.dp_shard(), 1);
  EXPECT_TRUE(one.fsdp_enabled());  // "even if dp_shard == 1"
}

// §5.4 Scenario A (tp 4, ep 2 on 8) and B (tp 2, ep 8 on 16): efsdp = dp_shard * cp * tp / ep.
TEST(ParallelDims, ExpertGrid) {
  auto a = ParallelDims::infer(8, deg(-1, 4, 1, 1, 2));
  EXPECT_EQ(a.dp_shard(), 2);
  EXPECT_EQ(a.efsdp(), 4);
  EXPECT_EQ(a.sparse_mesh(), (std::vector<MeshAxis>{{"pp", 1}, {"dp_replicate", 1}, {"efsdp", 4}, {"ep", 2}}));
  auto b = ParallelDims::infer(16, deg(-1, 2, 1, 1, 8));
  EXPECT_EQ(b.dp_shard(), 8);
  EXPECT_EQ(b.efsdp(), 2);
  EXPECT_EQ(b.dense_mesh(), (std::vector<MeshAxis>{{"pp", 1}, {"dp_replicate", 1}, {"fsdp", 8}, {"tp", 2}}));
}

// Limitations: data_parallel = world // (tp * pp * cp) must be >= 1 (reference message).
TEST(ParallelDims, ModelParallelLargerThanWorld) {
  EXPECT_EQ(problems(4, deg(-1, 8)),
            "tensor_parallel(8) * pipeline_parallel(1) * context_parallel(1) must be less than or equal to "
            "world_size(4).\n");
}

// Limitations: dp_replicate * dp_shard * cp * tp * pp == world_size.
TEST(ParallelDims, ProductMustEqualWorldSize) {
  EXPECT_EQ(problems(10, deg(-1, 4)),
            "Invalid parallel dims: dp_replicate(1) * dp_shard(2) * cp(1) * tp(4) * pp(1) = 8 != world_size(10); "
            "world_size must be divisible by tensor_parallel * pipeline_parallel * context_parallel = 4\n");
  // data_parallel 10 with shard 3: dp_replicate 3, dp_shard 3 -> 9 ranks.
  EXPECT_NE(problems(10, deg(3)).find("parallelism.data_parallel_shard (3) must divide data_parallel (10"),
            std::string::npos);
}

// Limitations: expert_parallel must divide dp_shard * cp * tp.
TEST(ParallelDims, ExpertParallelMustDivideTheExpertBlock) {
  EXPECT_NE(problems(8, deg(-1, 2, 1, 1, 3)).find("parallelism.expert_parallel (3) must divide dp_shard * cp * tp = 8"),
            std::string::npos);
  // EP is not a separate device dimension: ep 8 on 8 devices is fine.
  EXPECT_EQ(problems(8, deg(-1, 1, 1, 1, 8)), "");
}

// Each degree is a rule of the parallelism section, reported once at its field by the
// configuration (test_parallel_rules.cpp, test_resolved_config.cpp); the world-size rules take
// degrees that passed it.
TEST(ParallelDims, DegreesMustBePositive) {
  EXPECT_NE(problems(0, deg(-1)).find("world size must be >= 1"), std::string::npos);
  EXPECT_THROW(problems(8, deg(0, 0, 1, 1, 0)), loom::Error);
}

// ParallelDims computes the layout of checked degrees; anything else is a bug, refused.
TEST(ParallelDims, InferRefusesDegreesTheRulesReject) {
  EXPECT_THROW(ParallelDims::infer(8, deg(-1, 0, 1, 1, 0)), loom::Error);
  EXPECT_THROW(ParallelDims::infer(0, deg(-1)), loom::Error);
  EXPECT_THROW(ParallelDims::infer(4, deg(-1, 8)), loom::Error);           // tp larger than the world
  EXPECT_THROW(ParallelDims::infer(10, deg(-1, 4)), loom::Error);          // product != world
  EXPECT_THROW(ParallelDims::infer(8, deg(-1, 2, 1, 1, 3)), loom::Error);  // ep does not divide 8
}

// A shard degree larger than data_parallel leaves dp_replicate at 1 (reference max(dp // shard, 1)).
TEST(ParallelDims, ShardLargerThanDataParallel) {
  auto d = ParallelDims::infer(8, deg(16));
  EXPECT_EQ(d.dp_replicate(), 1);
  EXPECT_EQ(d.dp_shard(), 8);
}

// Rank order (pp, dp_replicate, dp_shard, cp, tp), tp fastest.
TEST(ParallelDims, RankCoordinatesRoundTrip) {
  auto d = ParallelDims::infer(16, deg(2, 2, 1, 2));  // pp 2, dp 4 = 2 x 2, tp 2
  EXPECT_EQ(d.dp_replicate(), 2);
  EXPECT_EQ(d.coordinates(13), (RankCoordinates{1, 1, 0, 0, 1}));
  EXPECT_EQ(d.coordinates(0), (RankCoordinates{0, 0, 0, 0, 0}));
  EXPECT_EQ(d.coordinates(1).tp, 1);
  EXPECT_EQ(d.coordinates(2).dp_shard, 1);
  for (int r = 0; r < 16; ++r) EXPECT_EQ(d.rank_of(d.coordinates(r)), r);
  EXPECT_THROW(d.coordinates(16), ValueError);
  auto c = ParallelDims::infer(8, deg(-1, 2, 2));  // dp 2, cp 2, tp 2
  EXPECT_EQ(c.coordinates(7), (RankCoordinates{0, 0, 1, 1, 1}));
  EXPECT_EQ(c.coordinates(2), (RankCoordinates{0, 0, 0, 1, 0}));
}

// Dataset shard id = rank % (world / pp) // tp // cp; TP x CP groups read the same batch.
TEST(ParallelDims, DatasetShards) {
  auto d = ParallelDims::infer(16, deg(2, 2, 1, 2));
  EXPECT_EQ(d.num_dataset_shards(), 4);
  for (int r = 0; r < 16; ++r) {
    const auto c = d.coordinates(r);
    EXPECT_EQ(d.dataset_shard_id(r), r % 8 / 2);
    EXPECT_EQ(d.dataset_shard_id(r), c.dp_replicate * d.dp_shard() + c.dp_shard);
  }
  auto cp = ParallelDims::infer(8, deg(-1, 2, 2));
  EXPECT_EQ(cp.dataset_shard_id(3), 0);
  EXPECT_EQ(cp.dataset_shard_id(4), 1);
}

TEST(ParallelDims, GroupRanksAlongEachAxis) {
  auto d = ParallelDims::infer(16, deg(2, 2, 1, 2));
  EXPECT_EQ(d.group_ranks("tp", 13), (std::vector<int>{12, 13}));
  EXPECT_EQ(d.group_ranks("dp_shard", 13), (std::vector<int>{13, 15}));
  EXPECT_EQ(d.group_ranks("dp_replicate", 13), (std::vector<int>{9, 13}));
  EXPECT_EQ(d.group_ranks("batch", 13), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(d.group_ranks("pp", 13), (std::vector<int>{5, 13}));
  EXPECT_EQ(d.group_ranks("fsdp", 13), (std::vector<int>{13, 15}));
  auto c = ParallelDims::infer(8, deg(-1, 2, 2));
  EXPECT_EQ(c.group_ranks("cp", 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(c.group_ranks("fsdp", 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(c.group_ranks("loss", 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_THROW(c.group_ranks("zz", 0), ValueError);
}

// EP carved out of dp_shard x cp x tp inside one replica: ep fastest in the flattened block.
TEST(ParallelDims, ExpertGroups) {
  auto d = ParallelDims::infer(8, deg(-1, 4, 1, 1, 2));  // dp_shard 2, tp 4, ep 2
  EXPECT_EQ(d.ep_index(5), 1);
  EXPECT_EQ(d.efsdp_index(5), 2);
  EXPECT_EQ(d.group_ranks("ep", 5), (std::vector<int>{4, 5}));
  EXPECT_EQ(d.group_ranks("efsdp", 5), (std::vector<int>{1, 3, 5, 7}));
  auto h = ParallelDims::infer(16, deg(4, 2, 1, 1, 8));  // dp_replicate 2, dp_shard 4, tp 2, ep 8
  EXPECT_EQ(h.efsdp(), 1);
  EXPECT_EQ(h.group_ranks("ep", 9), (std::vector<int>{8, 9, 10, 11, 12, 13, 14, 15}));
}

// Every group, for every axis and rank of mixed layouts, is exactly the ranks that share the
// rank's coordinates outside the axis (the definition, by a scan of the world).
TEST(ParallelDims, GroupRanksAreTheRanksSharingEveryOtherCoordinate) {
  const std::vector<std::pair<int, ParallelDegrees>> layouts = {
      {48, deg(2, 2, 3, 2, 3)}, {32, deg(4, 2, 2, 1, 4)}, {24, deg(-1, 3, 1, 2, 1)}, {16, deg(2, 1, 2, 2, 2)}};
  for (const auto& [world, degrees] : layouts) {
    const ParallelDims d = ParallelDims::infer(world, degrees);
    auto same = [&](const std::string& axis, int a, int b) {
      const RankCoordinates x = d.coordinates(a), y = d.coordinates(b);
      const bool pp = x.pp == y.pp, rep = x.dp_replicate == y.dp_replicate, shard = x.dp_shard == y.dp_shard,
                 cp = x.cp == y.cp, tp = x.tp == y.tp;
      if (axis == "pp") return rep && shard && cp && tp;
      if (axis == "dp_replicate") return pp && shard && cp && tp;
      if (axis == "dp_shard") return pp && rep && cp && tp;
      if (axis == "cp") return pp && rep && shard && tp;
      if (axis == "tp") return pp && rep && shard && cp;
      if (axis == "fsdp") return pp && rep && tp;
      if (axis == "batch") return pp && cp && tp;
      if (axis == "loss") return pp && tp;
      if (axis == "ep") return pp && rep && d.efsdp_index(a) == d.efsdp_index(b);
      return pp && rep && d.ep_index(a) == d.ep_index(b);  // efsdp
    };
    for (const std::string axis : {"pp", "dp_replicate", "dp_shard", "cp", "tp", "fsdp", "batch", "loss", "ep", "efsdp"})
      for (int r = 0; r < world; ++r) {
        std::vector<int> expected;
        for (int q = 0; q < world; ++q)
          if (same(axis, r, q)) expected.push_back(q);
        EXPECT_EQ(d.group_ranks(axis, r), expected) << axis << " of rank " << r << " in a world of " << world;
      }
  }
}
