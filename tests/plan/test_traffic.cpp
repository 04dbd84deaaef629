#include "loom/plan/traffic.h"

#include <gtest/gtest.h>

#include "loom/plan/tp_volume.h"
#include "plan_test_util.h"

namespace loom::plan {
namespace {

using testing::load;
using testing::tiny_yaml;

std::map<std::string, int64_t> traffic(const config::LoadedConfig& c, int rank) {
  const auto& dims = c.resolved->layout.dims;
  const auto held = held_parameters(c.config, *c.resolved, rank);
  const StateBytes s = state_bytes(held, dims, rank);
  return bytes_sent_per_step(c.config, *c.resolved, dims.coordinates(rank).pp, s, 32);
}

TEST(Traffic, FsdpGathersEachUnitTwicePerMicroBatchAndReducesItsGradsInFp32) {
  // 4 shard ranks, global batch 8 = 4 ranks x 2: one micro-batch; reshard after forward.
  const auto c = load(tiny_yaml(), 4);
  const auto& dims = c.resolved->layout.dims;
  const auto held = held_parameters(c.config, *c.resolved, 0);
  const StateBytes s = state_bytes(held, dims, 0);
  int64_t expected = 0;
  for (const auto& b : s.buckets) {
    const int64_t gathers = b.unit.empty() ? 1 : 2;
    expected += gathers * 3 * b.shard_elements * 4 + 3 * b.shard_elements * 4;  // (n-1) blocks each
  }
  const auto t = traffic(c, 0);
  EXPECT_EQ(t.at("fsdp"), expected);
  EXPECT_EQ(t.count("dp_replicate"), 0u);
  EXPECT_EQ(t.at("world"), 3 * 3 * 8);  // loss, grad norm, finite agreement: 8 B each, (n-1) copies
}

TEST(Traffic, MicroBatchesMultiplyThePerMicroBatchCollectives) {
  const auto one = load(tiny_yaml(), 4);
  const auto two = load(tiny_yaml(), 4, {"training.global_batch_size=16"});
  ASSERT_EQ(two.resolved->layout.num_accumulation_steps, 2);
  const auto& dims = one.resolved->layout.dims;
  const StateBytes s = state_bytes(held_parameters(one.config, *one.resolved, 0), dims, 0);
  int64_t root = 0;
  for (const auto& b : s.buckets)
    if (b.unit.empty()) root += 3 * b.shard_elements * 4 * 2;  // its gather and its reduce, once per step
  EXPECT_EQ(traffic(two, 0).at("fsdp") - root, 2 * (traffic(one, 0).at("fsdp") - root));
}

TEST(Traffic, HsdpAllReducesTheShardGradsOverReplicas) {
  const auto c = load(tiny_yaml(), 4, {"parallelism.data_parallel_shard=2"});
  const auto& dims = c.resolved->layout.dims;
  ASSERT_EQ(dims.dp_replicate(), 2);
  const StateBytes s = state_bytes(held_parameters(c.config, *c.resolved, 0), dims, 0);
  int64_t expected = 0;
  for (const auto& b : s.buckets) expected += all_reduce_bytes(b.shard_elements, 4, 2);
  EXPECT_EQ(traffic(c, 0).at("dp_replicate"), expected);
}

TEST(Traffic, TensorParallelOfATwoLayerLlamaIsMegatronSpsVolumeByHand) {
  // tp 2 over the whole world, one micro-batch of B = 2 sequences of S = 32 tokens, hidden D = 64,
  // vocabulary 1000, fp32, 2 layers, no biases. Megatron-SP moves an activation [B, S, D] between
  // its sequence half and the whole sequence by an all-gather or a reduce-scatter that sends
  // (t-1)/t of it from each rank: B·S·D/2 = 2048 floats = 8192 B. Per step:
  //   embedding    reduce-scatter of the lookup | all-gather of its grad          2 × 8192
  //   each layer   attention's input gathered, linear_proj's output scattered, the MLP's
  //                input gathered, linear_fc2's output scattered | each one's dual  8 × 8192
  //   head         the final norm's output gathered | its grad scattered            2 × 8192
  //   loss         the vocabulary halves agree on the 64 tokens' row maxima, then on their
  //                (Σexp, target logit): all-reduces of 64 and 128 floats, small enough to be
  //                gathered ((t-1)·n each)                                       (64 + 128) × 4
  //   grads        of the parameters whole on both ranks, the five RMSNorm weights of 64
  //                (two per layer, the final one), all-reduced                   5 × 64 × 4
  // The step's loss and grad-norm scalars are not counted here (they are the world's).
  const auto c = load(tiny_yaml(), 2, {"parallelism.tensor_parallel=2", "training.global_batch_size=2",
                                       "model.num_hidden_layers=2"});
  ASSERT_EQ(c.resolved->layout.num_accumulation_steps, 1);
  const int64_t activation = 2 * 32 * 64 / 2 * 4;
  EXPECT_EQ(activation, 8192);
  EXPECT_EQ(traffic(c, 0).at("tp"), (2 + 2 * 8 + 2) * activation + (64 + 128) * 4 + 5 * 64 * 4);
  EXPECT_EQ(traffic(c, 1).at("tp"), traffic(c, 0).at("tp"));
}

TEST(Traffic, PipelineSendsActivationsForwardAndGradsBack) {
  const auto c = load(tiny_yaml(), 2, {"parallelism.pipeline_parallel=2", "training.global_batch_size=8"});
  const int64_t M = c.resolved->layout.num_accumulation_steps;
  ASSERT_EQ(M, 4);
  const int64_t boundary = 2 * 32 * 64 * 4;  // [B, S, D] fp32
  // + the MoE monitor's gather over the stages, empty for a dense model: its length (int64) and
  // the end mark (int64), to the one other stage.
  EXPECT_EQ(traffic(c, 0).at("pp"), M * boundary + 16);
  EXPECT_EQ(traffic(c, 1).at("pp"), M * boundary + 16);
  EXPECT_EQ(stage_chunks(*c.resolved, 1).front().first_layer, 2);
  EXPECT_TRUE(stage_chunks(*c.resolved, 1).front().head);
}

TEST(Traffic, ContextParallelRingSendsKvBlocksAroundTheRing) {
  const auto c = load(tiny_yaml(), 2, {"parallelism.context_parallel=2", "training.global_batch_size=2",
                                       "model.use_attn_mask_compression=true"});
  // Local tokens 2 x 16; 2 KV heads of 16: K+V = 32 x 64 floats; per layer (c-1)·kv fwd, (c-1)·kv + c·kv bwd.
  const int64_t kv = 2 * 16 * (32 + 32) * 4;
  // + the head loss's token count (f64) and loss share (fp32) summed over cp, one micro-batch.
  EXPECT_EQ(traffic(c, 0).at("cp"), 4 * (kv + kv + 2 * kv) + 8 + 4);
}

}  // namespace
}  // namespace loom::plan
