// The arithmetic of Muon under sharding that needs no processes (MindFormers' muon.py): which
// mesh axes split a parameter's matrices, which ranks hold a matrix together, and the owners of
// allgather_deredundency, balanced by estimated Newton–Schulz work on DeepSeek-V3's own layers.
// tests/train/mpi/test_muon_sharding_mpi.cpp runs the exchange itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "loom/models/registry.h"
#include "loom/optim/muon.h"
#include "loom/optim/placement_muon_sharding.h"

namespace loom::optim {
namespace {

using nlohmann::ordered_json;

dist::ParallelDims dims_of(int world, int shard = -1, int tp = 1) {
  dist::ParallelDegrees d;
  d.data_parallel_shard = shard;
  d.tensor_parallel = tp;
  return dist::ParallelDims::infer(world, d);
}

ParamPlacement placed(const Shape& global, std::vector<nn::AxisPlacement> axes) {
  ParamPlacement p{"w", global, {}};
  for (auto& a : axes) p.placement.add(global, std::move(a));
  return p;
}

// DeepSeek-V3 (671B) as its Hugging Face config describes it, built on the meta device: shapes only.
ordered_json deepseek_v3() {
  return ordered_json{{"model_type", "deepseek_v3"}, {"vocab_size", 129280}, {"hidden_size", 7168},
                      {"num_hidden_layers", 61}, {"num_attention_heads", 128}, {"intermediate_size", 18432},
                      {"moe_intermediate_size", 2048}, {"n_routed_experts", 256}, {"num_experts_per_tok", 8},
                      {"n_group", 8}, {"topk_group", 4}, {"n_shared_experts", 1}, {"first_k_dense_replace", 3},
                      {"routed_scaling_factor", 2.5}, {"q_lora_rank", 1536}, {"kv_lora_rank", 512},
                      {"qk_nope_head_dim", 128}, {"qk_pos_emb_head_dim", 64}, {"v_head_dim", 128},
                      {"num_nextn_predict_layers", 1}};
}

// The matrices FSDP splits (every 2-D Muon weight; the 3-D expert batches stay whole on their
// ranks), their estimated Newton–Schulz work, and the axes that split them: with
// `tensor_parallel`, the up/out projections and MLPs also over tp, the replicated down-
// projections and router over fsdp only.
struct MatrixSet {
  std::vector<std::string> names;
  std::vector<double> work;
  std::vector<std::vector<std::string>> axes;
};
MatrixSet deepseek_matrices(bool tensor_parallel) {
  const ordered_json section = deepseek_v3();
  models::BuiltModel built = models::build_model(section);
  // The model's split of its fused weights is the standard schema of its MLA sizes
  // (models/muon_info.h; tests/models checks that for every parameter).
  const MlaDims mla{built.args.num_attention_heads, built.args.qk_nope_head_dim, built.args.qk_rope_head_dim,
                    built.args.v_head_dim, built.args.q_lora_rank};
  const MuonSplitSchema schema = MuonSplitSchema::standard(mla);
  const MuonOptions options;
  MatrixSet set;
  for (auto& [name, p] : built.model->named_parameters()) {
    if (!p->trainable || p->global_shape.ndim() != 2 || !uses_newton_schulz(options, name, p->global_shape))
      continue;
    set.names.push_back(name);
    set.work.push_back(newton_schulz_work(schema.blocks(name, p->global_shape), 1,
                                                 static_cast<int64_t>(options.ns_schedule.size())));
    const bool replicated = name.find("linear_qa") != std::string::npos || name.find("linear_kva") != std::string::npos ||
                            name.find("router") != std::string::npos;
    set.axes.push_back(tensor_parallel && !replicated ? std::vector<std::string>{"tp", "fsdp"}
                                                      : std::vector<std::string>{"fsdp"});
  }
  return set;
}

}  // namespace

TEST(MuonShardingPlan, MatrixSplitAxesFromPlacements) {
  const dist::ParallelDims dims = dims_of(8, -1, 2);  // fsdp 4 × tp 2
  EXPECT_EQ(matrix_split_axes(placed({8, 4}, {nn::AxisPlacement::shard("fsdp", 0, {{0, 2}})}), dims),
            (std::vector<std::string>{"fsdp"}));
  EXPECT_EQ(matrix_split_axes(placed({8, 4}, {nn::AxisPlacement::shard("tp", 1, {{0, 2}}),
                                              nn::AxisPlacement::shard("fsdp", 0, {{0, 2}})}),
                              dims),
            (std::vector<std::string>{"tp", "fsdp"}));
  // Experts over FSDP in whole matrices: nothing to exchange; their ffn dim over tp: tp only.
  EXPECT_TRUE(matrix_split_axes(placed({4, 8, 6}, {nn::AxisPlacement::shard("fsdp", 0, {{0, 1}})}), dims).empty());
  EXPECT_EQ(matrix_split_axes(placed({4, 8, 6}, {nn::AxisPlacement::shard("tp", 2, {{0, 3}}),
                                                 nn::AxisPlacement::shard("fsdp", 0, {{0, 1}})}),
                              dims),
            (std::vector<std::string>{"tp"}));
  // Replicated or partial axes split nothing; an axis of one rank splits nothing either.
  EXPECT_TRUE(matrix_split_axes(placed({8, 4}, {nn::AxisPlacement::partial("tp")}), dims).empty());
  EXPECT_TRUE(matrix_split_axes(placed({8, 4}, {nn::AxisPlacement::shard("fsdp", 0, {{0, 8}})}), dims_of(1)).empty());
  EXPECT_TRUE(matrix_split_axes(placed({8}, {nn::AxisPlacement::shard("fsdp", 0, {{0, 2}})}), dims).empty());
}

TEST(MuonShardingPlan, HolderRanksShareEveryOtherCoordinate) {
  const dist::ParallelDims tp_fsdp = dims_of(8, -1, 2);  // ranks (dp_shard, tp), tp fastest
  EXPECT_EQ(holder_ranks(tp_fsdp, {"fsdp"}, 3), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(holder_ranks(tp_fsdp, {"tp"}, 3), (std::vector<int>{2, 3}));
  EXPECT_EQ(holder_ranks(tp_fsdp, {"tp", "fsdp"}, 3), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  const dist::ParallelDims hsdp = dims_of(8, 4);  // dp_replicate 2 × dp_shard 4
  EXPECT_EQ(holder_ranks(hsdp, {"fsdp"}, 5), (std::vector<int>{4, 5, 6, 7}));
}

// MindFormers' owners: LPT on batch·(ns_steps·(2·L·s² + s³) + a·b) balances DeepSeek-V3's
// matrices to max/mean ≤ 1.2, every owner is one of its matrix's holders, and each holder group
// has exactly one owner per matrix.
TEST(MuonShardingPlan, OwnersBalanceDeepSeekV3Work) {
  struct Case {
    const char* what;
    dist::ParallelDims dims;
    bool tp;
  };
  for (const Case& c : {Case{"fsdp 8", dims_of(8), false}, Case{"fsdp 16", dims_of(16), false},
                        Case{"hsdp 2x4", dims_of(8, 4), false}, Case{"tp 2 x fsdp 4", dims_of(8, -1, 2), true}}) {
    SCOPED_TRACE(c.what);
    const MatrixSet set = deepseek_matrices(c.tp);
    ASSERT_GT(set.names.size(), 300u);
    const OwnerPlan plan = plan_owners(c.dims, set.axes, set.work);
    ASSERT_EQ(plan.groups.size(), set.names.size());
    std::vector<double> load(static_cast<size_t>(c.dims.world_size()), 0.0);
    for (size_t j = 0; j < plan.groups.size(); ++j) {
      std::vector<int> covered;
      for (const HolderGroup& g : plan.groups[j]) {
        ASSERT_NE(std::find(g.ranks.begin(), g.ranks.end(), g.owner), g.ranks.end()) << set.names[j];
        load[static_cast<size_t>(g.owner)] += set.work[j];
        covered.insert(covered.end(), g.ranks.begin(), g.ranks.end());
      }
      std::sort(covered.begin(), covered.end());
      std::vector<int> world(static_cast<size_t>(c.dims.world_size()));
      std::iota(world.begin(), world.end(), 0);
      EXPECT_EQ(covered, world) << set.names[j] << ": the holder groups must partition the world";
    }
    EXPECT_EQ(load, plan.load);
    const double mean = std::accumulate(load.begin(), load.end(), 0.0) / static_cast<double>(load.size());
    const double max = *std::max_element(load.begin(), load.end());
    EXPECT_LE(max / mean, 1.2) << "max " << max << " mean " << mean;
    // The same input gives the same owners (every rank plans alone).
    const OwnerPlan again = plan_owners(c.dims, set.axes, set.work);
    for (size_t j = 0; j < plan.groups.size(); ++j)
      for (size_t g = 0; g < plan.groups[j].size(); ++g) EXPECT_EQ(again.groups[j][g].owner, plan.groups[j][g].owner);
  }
}

}  // namespace loom::optim
