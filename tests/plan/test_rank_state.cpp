#include "loom/plan/rank_state.h"

#include <gtest/gtest.h>

#include "loom/models/accounting.h"
#include "plan_test_util.h"

namespace loom::plan {
namespace {

using testing::load;
using testing::moe_yaml;
using testing::tiny_yaml;

int64_t total_parameters(const config::LoadedConfig& c) {
  return models::count_parameters(c.resolved->model_args()).total;
}

const HeldParameter* find(const std::vector<HeldParameter>& ps, const std::string& name) {
  for (const auto& p : ps)
    if (p.name == name) return &p;
  return nullptr;
}

TEST(RankState, OneRankHoldsTheWholeModelInFp32) {
  const auto c = load(tiny_yaml(), 1);
  const auto held = held_parameters(c.config, *c.resolved, 0);
  const StateBytes s = state_bytes(held, c.resolved->layout.dims, 0);
  const int64_t n = total_parameters(c);
  EXPECT_FALSE(s.fsdp);
  EXPECT_EQ(s.parameter_bytes, 4 * n);
  EXPECT_EQ(s.gradient_bytes, 4 * n);
  EXPECT_EQ(s.optimizer_bytes, 8 * n);  // AdamW's two fp32 moments, no master copy
}

TEST(RankState, Bf16ParametersAddAnFp32MasterCopy) {
  std::string yaml = tiny_yaml();
  yaml.replace(yaml.find("params_dtype: float32"), 21, "params_dtype: bfloat16");
  const auto c = load(yaml, 1);
  const StateBytes s = state_bytes(held_parameters(c.config, *c.resolved, 0), c.resolved->layout.dims, 0);
  const int64_t n = total_parameters(c);
  EXPECT_EQ(s.parameter_bytes, 2 * n);
  EXPECT_EQ(s.optimizer_bytes, 12 * n);
}

TEST(RankState, FsdpPadsEveryBucketToWholeBlocksAndSplitsTheOptimizerRowsExactly) {
  // 3 shard ranks: vocab 1000 rows -> blocks of 334, the last rank holds 332.
  const auto c = load(tiny_yaml(), 3);
  const auto& dims = c.resolved->layout.dims;
  ASSERT_EQ(dims.fsdp(), 3);
  const auto held = held_parameters(c.config, *c.resolved, 0);
  int64_t padded = 0;
  for (const HeldParameter& p : held) {
    const int64_t rows = p.local[0], row = p.local.numel() / rows;
    padded += (rows + 2) / 3 * row;
  }
  int64_t optimizer_sum = 0;
  for (int r = 0; r < 3; ++r) {
    const StateBytes s = state_bytes(held, dims, r);
    EXPECT_TRUE(s.fsdp);
    EXPECT_EQ(s.parameter_bytes, 4 * padded) << "rank " << r;
    EXPECT_EQ(s.gradient_bytes, 4 * padded) << "rank " << r;
    optimizer_sum += s.optimizer_bytes;
  }
  // The ranks' own rows partition every parameter: no padding in the optimizer state.
  EXPECT_EQ(optimizer_sum, 8 * total_parameters(c));
  EXPECT_GT(state_bytes(held, dims, 0).optimizer_bytes, state_bytes(held, dims, 2).optimizer_bytes);
}

TEST(RankState, TensorParallelSplitsAreTheStrategysOwn) {
  const auto c = load(tiny_yaml(), 2, {"parallelism.tensor_parallel=2"});
  const auto held = held_parameters(c.config, *c.resolved, 1);
  EXPECT_EQ(find(held, "embedding.word_embeddings.weight")->local, Shape({500, 64}));
  EXPECT_EQ(find(held, "decoder.layers.0.self_attention.linear_q.weight")->local, Shape({32, 64}));
  EXPECT_EQ(find(held, "decoder.layers.0.self_attention.linear_proj.weight")->local, Shape({64, 32}));
  EXPECT_EQ(find(held, "decoder.layers.0.mlp.linear_fc1.weight")->local, Shape({96, 64}));  // gate+up halves
  EXPECT_EQ(find(held, "decoder.layers.0.input_layernorm.weight")->local, Shape({64}));   // whole
  EXPECT_EQ(find(held, "decoder.layers.0.mlp.linear_fc1.weight")->unit, "decoder.layers.0");
  EXPECT_EQ(find(held, "output_layer.weight")->unit, "");
}

TEST(RankState, PipelineStagesKeepTheirLayersAndEnds) {
  const auto c = load(tiny_yaml(), 2, {"parallelism.pipeline_parallel=2"});
  const auto first = held_parameters(c.config, *c.resolved, 0);
  const auto last = held_parameters(c.config, *c.resolved, 1);
  EXPECT_NE(find(first, "embedding.word_embeddings.weight"), nullptr);
  EXPECT_EQ(find(first, "output_layer.weight"), nullptr);
  EXPECT_NE(find(first, "decoder.layers.1.mlp.linear_fc2.weight"), nullptr);
  EXPECT_EQ(find(first, "decoder.layers.2.mlp.linear_fc2.weight"), nullptr);
  EXPECT_NE(find(last, "output_layer.weight"), nullptr);
  EXPECT_NE(find(last, "decoder.final_layernorm.weight"), nullptr);
  EXPECT_EQ(find(last, "embedding.word_embeddings.weight"), nullptr);
  int64_t both = 0;
  for (const auto* stage : {&first, &last})
    for (const auto& p : *stage) both += p.local.numel();
  EXPECT_EQ(both, total_parameters(c));
}

TEST(RankState, ExpertParallelSplitsRoutedExpertsAndFsdpShardsThemOverEfsdp) {
  const auto c = load(moe_yaml(), 4, {"parallelism.expert_parallel=2"});
  const auto& dims = c.resolved->layout.dims;
  ASSERT_EQ(dims.efsdp(), 2);
  const auto held = held_parameters(c.config, *c.resolved, 0);
  const HeldParameter* w1 = find(held, "decoder.layers.0.mlp.experts.weight1");
  ASSERT_NE(w1, nullptr);
  EXPECT_TRUE(w1->expert);
  EXPECT_EQ(w1->local[0], 4);  // 8 experts over ep 2
  const StateBytes s = state_bytes(held, dims, 0);
  bool efsdp = false;
  for (const auto& b : s.buckets) efsdp = efsdp || (b.group == "efsdp" && b.group_size == 2);
  EXPECT_TRUE(efsdp);
}

}  // namespace
}  // namespace loom::plan

namespace loom::plan {
namespace {

TEST(RankState, Bf16ComputeGathersTheMatmulWeightsInBf16AndTheRestInFp32) {
  std::string yaml = testing::tiny_yaml();
  yaml.replace(yaml.find("compute_dtype: float32"), 22, "compute_dtype: bfloat16");
  const auto c = testing::load(yaml, 2);
  const auto held = held_parameters(c.config, *c.resolved, 0);
  const HeldParameter* fc1 = find(held, "decoder.layers.0.mlp.linear_fc1.weight");
  const HeldParameter* norm = find(held, "decoder.layers.0.input_layernorm.weight");
  EXPECT_EQ(fc1->gather_dtype, DType::bf16);
  EXPECT_EQ(norm->gather_dtype, DType::f32);
  const StateBytes s = state_bytes(held, c.resolved->layout.dims, 0);
  bool bf16 = false, f32 = false;
  for (const auto& b : s.buckets) {
    EXPECT_EQ(b.dtype, DType::f32);  // the shards stay fp32
    bf16 = bf16 || b.gather_dtype == DType::bf16;
    f32 = f32 || b.gather_dtype == DType::f32;
  }
  EXPECT_TRUE(bf16 && f32);
}

}  // namespace
}  // namespace loom::plan
