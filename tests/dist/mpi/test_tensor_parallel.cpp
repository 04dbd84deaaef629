// Tensor parallelism with sequence parallelism against one process (Megatron-SP; spec
// parallel_training.md §2): for every architecture, the initial local pieces are slices of the
// one-process weights, and one step's loss and every parameter's grad (the local pieces, after the
// tp sums of replicated parameters and FSDP's reductions) match the one-process step within fp32
// rounding. Run at 2 ranks (tp 2) and 4 ranks (tp 4 with GQA KV heads shared by 2 ranks, and tp 2 ×
// fsdp 2).
#include <gtest/gtest.h>

#include <cmath>

#include "../dist_test_util.h"
#include "parallel_test_util.h"
#include "loom/dist/parallelize.h"
#include "loom/core/allocator.h"
#include "loom/dist/runtime.h"
#include "loom/memory/policy.h"
#include "loom/optim/grad_norm.h"

namespace loom::dist {
namespace {

using testing::expect_close;
using testing::local_of;

using testing::Json;

// Sizes every tp in {2, 4} divides: vocabulary, heads, ffn, sequence; 2 KV heads (shared at tp 4).
Json tp_llama() {
  return Json{{"model_type", "llama"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 24},
              {"rms_norm_eps", 1e-5}, {"attention_bias", true}, {"compute_dtype", "float32"}};
}

Json tp_qwen3() {
  return Json{{"model_type", "qwen3"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 8}, {"intermediate_size", 16},
              {"tie_word_embeddings", true}, {"compute_dtype", "float32"}};
}

Json tp_qwen3_moe() {
  return Json{{"model_type", "qwen3_moe"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"head_dim", 4}, {"intermediate_size", 16},
              {"moe_intermediate_size", 8}, {"num_experts", 4}, {"num_experts_per_tok", 2},
              {"norm_topk_prob", true}, {"router_aux_loss_coef", 0.01}, {"compute_dtype", "float32"}};
}

Json tp_deepseek_v3() {
  Json j = testing::dist_tiny_deepseek_v3();
  j["vocab_size"] = 24;
  j["num_attention_heads"] = 4;
  j["intermediate_size"] = 24;
  j["moe_router_enable_expert_bias"] = true;
  return j;
}

std::shared_ptr<DeviceMesh> mesh_for(int tp, int data_parallel_shard = -1) {
  auto world = Runtime::get()->world();
  ParallelDegrees d;
  d.tensor_parallel = tp;
  d.data_parallel_shard = data_parallel_shard;
  return std::make_shared<DeviceMesh>(world, ParallelDims::infer(world->size(), d));
}

// One optimizer step's forward and backward of `micro` micro-batches per data-parallel rank,
// against one process training all of them.
void check_step(const Json& section, int tp, int data_parallel_shard, int64_t micro) {
  const int64_t vocab = section.at("vocab_size").get<int64_t>(), B = 2, S = 8;
  auto mesh = mesh_for(tp, data_parallel_shard);
  const int dp = mesh->dims().data_parallel(), d = mesh->dims().dataset_shard_id(mesh->rank());
  models::BuiltModel plain = models::build_model(section), split = models::build_model(section);
  plain.model->materialize(17);
  auto parallel = parallelize(*split.model, mesh, {});
  parallel->materialize(17);
  for (auto& [name, p] : split.model->named_parameters())
    expect_close(p->local(), local_of(plain.model->find_parameter(name)->tensor, *p), 0, name + " init");

  std::map<std::string, Tensor> ref;
  const double ref_loss = testing::reference_step(*plain.model, vocab, B, S, 0, micro * dp, &ref);
  // testing::reference_step injects every micro-batch's balance and MTP losses with scale 1; each
  // micro-batch runs on one data-parallel rank here, so the same scale gives the same sum.
  split.model->set_auxiliary_loss_grad_scale(1.0);
  const double loss = testing::parallel_step(*split.model, *parallel, *mesh, vocab, B, S, micro, dp, d);
  EXPECT_NEAR(loss, ref_loss, 1e-6 * std::fabs(ref_loss));
  for (auto& [name, p] : split.model->named_parameters())
    expect_close(p->local().grad(), local_of(ref.at(name), *p), 2e-5, name + " grad");

  testing::expect_grad_norm_matches(*plain.model, *split.model, *parallel, *mesh);
}

struct Arch {
  const char* name;
  Json (*section)();
};
const Arch kArchitectures[] = {{"llama", tp_llama}, {"qwen3", tp_qwen3}, {"qwen3_moe", tp_qwen3_moe},
                               {"deepseek_v3", tp_deepseek_v3}};

TEST(TensorParallelMpi, EveryArchitectureOverAllRanksMatchesOneProcess) {
  const int n = Runtime::get()->world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const Arch& a : kArchitectures) {
    SCOPED_TRACE(a.name);
    check_step(a.section(), n, -1, 1);
  }
}

TEST(TensorParallelMpi, InsideFsdpWithAccumulation) {
  if (Runtime::get()->world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (const Arch& a : kArchitectures) {
    SCOPED_TRACE(a.name);
    check_step(a.section(), 2, -1, 2);  // tp 2 inside, fsdp 2 outside, 2 micro-batches each
  }
}

TEST(TensorParallelMpi, PlacementsRecordTheSplits) {
  const int n = Runtime::get()->world_size();
  if (n != 4) GTEST_SKIP() << "needs 4 ranks";
  auto mesh = mesh_for(4);
  models::BuiltModel m = models::build_model(tp_llama());
  auto parallel = parallelize(*m.model, mesh, {});
  const int r = mesh->group("tp").rank();
  // Query heads split; the 2 KV heads shared by 2 ranks each; fc1's gate and up halves split
  // alike; linear_proj by input columns; norms partial.
  const nn::Parameter& q = *m.model->find_parameter("decoder.layers.0.self_attention.linear_q.weight");
  EXPECT_EQ(q.local_shape(), (Shape{4, 16}));
  const nn::Parameter& k = *m.model->find_parameter("decoder.layers.0.self_attention.linear_k.weight");
  EXPECT_EQ(k.placement.on("tp")->copies, 2);
  EXPECT_EQ(k.pieces()[0].global_offset[0], (r / 2) * 4);
  const nn::Parameter& fc1 = *m.model->find_parameter("decoder.layers.0.mlp.linear_fc1.weight");
  ASSERT_EQ(fc1.pieces().size(), 2u);
  EXPECT_EQ(fc1.pieces()[1].global_offset[0], 24 + r * 6);
  EXPECT_EQ(m.model->find_parameter("decoder.layers.0.self_attention.linear_proj.weight")->placement.on("tp")->dim, 1);
  EXPECT_EQ(m.model->find_parameter("decoder.layers.0.input_layernorm.weight")->placement.on("tp")->kind,
            nn::AxisPlacement::Kind::partial);
  EXPECT_EQ(mesh->replica_factor(k.placement), 2);
  EXPECT_EQ(mesh->replica_factor(q.placement), 1);
  EXPECT_EQ(parallel->backward_scale(), 1.0);  // one data shard: the tp ranks' loss counted once
}

TEST(TensorParallelMpi, CommunicationRecomputeDropsTheGatheredSequenceAndKeepsTheNumbers) {
  // recompute_comm '.*\\.all_gather' (spec memory_optimization.md): the sequence all-gathers'
  // outputs are regenerated in backward instead of being held from forward to backward.
  const int n = Runtime::get()->world_size();
  if (n != 2) GTEST_SKIP() << "needs 2 ranks";
  Json section = tp_llama();
  section["hidden_size"] = 64;
  struct Result {
    double loss;
    int64_t held_bytes;
    std::map<std::string, std::vector<double>> grads;
  };
  auto run = [&](bool comm_recompute) {
    models::BuiltModel m = models::build_model(section);
    ParallelizeOptions o;
    if (comm_recompute)
      o.memory_policy = [&m](nn::Module& module) {
        memory::RecomputeOptions rc;
        rc.comm_enable = true;
        rc.comm_select = {{".*\\.all_gather", {0, 1}}};
        std::vector<memory::LayerRef> layers;
        auto decoder = m.model->decoder().layers();
        for (size_t i = 0; i < decoder.size(); ++i)
          layers.push_back({static_cast<int64_t>(i), "decoder.layers." + std::to_string(i), decoder[i]});
        memory::MemoryPlan plan = memory::plan_memory(layers, 2, rc, {});
        EXPECT_EQ(plan.comm_recompute.at(1), (std::vector<std::string>{"self_attention.all_gather", "mlp.all_gather"}));
        
        memory::apply_memory_plan(module, layers, plan, rc);
      };
    auto parallel = parallelize(*m.model, mesh_for(2), o);
    parallel->materialize(17);
    const int64_t before = memory_stats().current_bytes;
    nn::LMOutput out = m.model->forward(testing::micro_batch(24, 4, 16, 0));
    Result r{out.loss.item(), memory_stats().current_bytes - before, {}};
    autograd::backward(out.loss);
    for (auto& [name, local] : m.model->local_parameters()) r.grads[name] = local.grad().to_double_vector();
    return r;
  };
  const Result kept = run(false), regenerated = run(true);
  EXPECT_EQ(regenerated.loss, kept.loss);
  EXPECT_EQ(regenerated.grads, kept.grads);  // the same all-gather, run again: bitwise
  // Per gather, the [4, 16, 64] fp32 output goes and its [4, 8, 64] input stays to regenerate it:
  // (t-1)/t of the gathered bytes, two gathers per layer, two layers (recompute_comm, spec
  // memory_optimization.md).
  const int64_t saved = kept.held_bytes - regenerated.held_bytes, expected = 2 * 2 * (4 * 16 * 64 * 4) / 2;
  EXPECT_GE(saved, expected * 9 / 10) << kept.held_bytes << " -> " << regenerated.held_bytes;
  EXPECT_LE(saved, expected * 11 / 10) << kept.held_bytes << " -> " << regenerated.held_bytes;
}

}  // namespace
}  // namespace loom::dist
