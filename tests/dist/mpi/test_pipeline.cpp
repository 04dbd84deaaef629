// Pipeline parallelism against one process (dist/pipeline.h, runtime/pipeline_schedule.h): each
// rank holds only its stages' parameters, initialised to the one-process values under their
// global names; one step of 1F1B or interleaved 1F1B over m micro-batches gives the one-process
// loss (logged by every rank) and, on every parameter a rank holds, the one-process grad (the
// tied or MTP-shared embedding summed over the first and last stage), and the grad norm summed
// over the stages. Run at 2, 3, 4 and 8 ranks: pp 2/3/4, uneven layer lists, v 2 and 3, pp × fsdp,
// pp × tp, pp × tp × fsdp, tied embeddings, DeepSeek-V3 with MTP, GPipe, backward/forward overlap (alone, with
// overlap_p2p and v 2, at pp 2 × ep 2), bf16 compute (the cuts' grads in bf16, as on one process),
// and FSDP's one reduction per step. The eval mode's
// forward-only schedule gives the train mode's loss of the same micro-batches and no grads.
#include <gtest/gtest.h>

#include <cmath>

#include "../dist_test_util.h"
#include "parallel_test_util.h"
#include "loom/dist/parallelize.h"
#include "loom/dist/runtime.h"
#include "loom/optim/grad_norm.h"
#include "loom/runtime/causal_lm_model.h"
#include "loom/runtime/pipeline_schedule.h"
#include "loom/train/model_hooks.h"

namespace loom::dist {
namespace {

using testing::expect_close;
using testing::local_of;

using testing::Json;

constexpr int64_t kBatch = 2, kSeq = 8;

Json llama(int64_t layers, bool tied) {
  return Json{{"model_type", "llama"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", layers},
              {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"intermediate_size", 24},
              {"rms_norm_eps", 1e-5}, {"tie_word_embeddings", tied}, {"compute_dtype", "float32"}};
}

Json deepseek_v3(int64_t layers = 2) {
  Json j = testing::dist_tiny_deepseek_v3();
  j["moe_router_enable_expert_bias"] = true;
  j["num_hidden_layers"] = layers;
  return j;
}

// bf16 compute, fp32 weights: activations and their grads cross the stages in bf16.
Json bf16(Json section) {
  section["compute_dtype"] = "bfloat16";
  return section;
}

data::Batch batch_of(const nn::LMBatch& b) {
  data::Batch out;
  out.input_ids = b.input_ids;
  out.labels = b.labels;
  out.loss_mask = b.loss_mask;
  return out;
}

struct Layout {
  const char* name;
  Json section;
  int pp, tp;
  std::vector<std::pair<int64_t, int64_t>> stage_layers;  // by virtual stage
  int64_t micro;                                          // micro-batches per data-parallel rank
  bool overlap_p2p = false;
  bool overlap_b_f = false;
  int ep = 1;
  runtime::PipelineScheduleKind kind = runtime::PipelineScheduleKind::one_f_one_b;
};

// One step of the pipeline schedule against one process running all data-parallel ranks'
// micro-batches through the plain schedule.
void check_step(const Layout& l) {
  SCOPED_TRACE(l.name);
  auto world = Runtime::get()->world();
  ParallelDegrees degrees;
  degrees.pipeline_parallel = l.pp;
  degrees.tensor_parallel = l.tp;
  degrees.expert_parallel = l.ep;
  auto mesh = std::make_shared<DeviceMesh>(world, ParallelDims::infer(world->size(), degrees));
  const int dp = mesh->dims().data_parallel(), d = mesh->dims().dataset_shard_id(mesh->rank());
  const int64_t vocab = l.section.at("vocab_size").get<int64_t>();

  // One process: all dp · m micro-batches.
  models::BuiltModel plain = models::build_model(l.section);
  runtime::CausalLMModel plain_model(plain.args, plain.model);
  auto plain_parallel = parallelize(*plain.model, DeviceMesh::single(), {});
  plain_parallel->materialize(17);
  train::ModelHooks plain_hooks(plain.args, *plain.model, *plain_parallel);
  plain_hooks.set_backward_scale(runtime::micro_batch_backward_scale(*plain_parallel, l.micro * dp));
  int64_t next = 0;
  runtime::PlainSchedule plain_schedule(plain_model, *plain_parallel, l.micro * dp);
  const runtime::StepResult want =
      plain_schedule.run([&] { return batch_of(testing::micro_batch(vocab, kBatch, kSeq, next++)); },
                         runtime::Mode::train);

  models::BuiltModel split = models::build_model(l.section);
  runtime::CausalLMModel split_model(split.args, split.model);
  ParallelizeOptions options;
  options.fsdp.pipeline_parallel = true;  // reshard_after_forward_policy default: never under pp
  options.pipeline.pipeline_parallel = l.pp;
  options.pipeline.chunks = static_cast<int>(l.stage_layers.size()) / l.pp;
  options.pipeline.stage_layers = l.stage_layers;
  auto parallel = parallelize(*split.model, mesh, options);
  parallel->materialize(17);
  ASSERT_NE(parallel->pipeline(), nullptr);
  const PipelineStage& stage = *parallel->pipeline();

  // This rank holds its chunks' layers only, under their global names, with the one-process values.
  int64_t held = 0;
  for (auto& [name, p] : split.model->named_parameters()) {
    expect_close(p->local(), local_of(plain.model->find_parameter(name)->tensor, *p), 0, name + " init");
    held += p->global_shape.numel();
  }
  for (const nn::TransformerLayer* layer : split.model->decoder().layers()) {
    bool mine = false;
    for (const PipelineChunk& c : stage.chunks())
      mine |= layer->layer_number() >= c.first_layer && layer->layer_number() <= c.last_layer;
    EXPECT_TRUE(mine) << "layer " << layer->layer_number();
  }
  EXPECT_EQ(split.model->has_embedding(), stage.chunks().front().first || (stage.holds_loss() &&
                                                                             split.model->head_uses_embedding()));
  EXPECT_EQ(split.model->has_head(), stage.holds_loss());
  EXPECT_LT(held, plain.model->num_parameters());

  train::ModelHooks split_hooks(split.args, *split.model, *parallel);
  split_hooks.set_backward_scale(runtime::micro_batch_backward_scale(*parallel, l.micro));
  runtime::PipelineSchedule schedule(split_model, *parallel, l.micro,
                                   {l.overlap_p2p, l.kind, l.overlap_b_f});
  int64_t j = 0;
  FullyShardedModel* fsdp = mesh->size("fsdp") > 1 ? parallel->fsdp() : nullptr;
  if (fsdp) fsdp->reset_comm_stats();
  // Data-parallel rank d takes global micro-batch j·dp + d at micro step j, every stage the same.
  const runtime::StepResult got = schedule.run(
      [&] { return batch_of(testing::micro_batch(vocab, kBatch, kSeq, (j++) * dp + d)); }, runtime::Mode::train);
  const int64_t reduce_bytes = fsdp ? fsdp->grad_reduce_bytes() : 0;
  EXPECT_EQ(got.micro_batches, l.micro);
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * std::fabs(want.loss));
  EXPECT_EQ(world->all_reduce_scalar(got.loss, ReduceOp::max), world->all_reduce_scalar(got.loss, ReduceOp::min))
      << "every rank logs the same loss";
  for (const auto& [k, v] : want.extras) {
    ASSERT_TRUE(got.extras.contains(k)) << k;
    EXPECT_NEAR(got.extras.at(k), v, 1e-6 * std::fabs(v) + 1e-12) << k;
  }
  for (auto& [name, p] : split.model->named_parameters())
    expect_close(p->local().grad(), local_of(plain.model->find_parameter(name)->tensor.grad(), *p), 2e-5,
                 name + " grad");

  optim::NamedParams full, local;
  for (auto& [name, t] : plain.model->local_parameters()) full.push_back({name, t});
  for (auto& [name, t] : split.model->local_parameters()) local.push_back({name, t});
  const double norm = optim::global_grad_norm(full);
  const double got_norm = optim::global_grad_norm(
      local, [&](const optim::NamedParam& p) { return parallel->replica_factor(p.name); },
      [&](double v) { return mesh->world().all_reduce_scalar(v); });
  EXPECT_NEAR(got_norm, norm, 1e-6 * norm);

  // Eval mode on the same micro-batches: the train mode's loss and extras, no grads formed and no
  // routing counted (the MoE check below sees the training step's counts only).
  const std::vector<std::pair<std::string, Tensor>> grads = [&] {
    std::vector<std::pair<std::string, Tensor>> out;
    for (auto& [name, p] : split.model->named_parameters())
      if (p->local().grad().defined()) out.emplace_back(name, p->local().grad().clone());
    return out;
  }();
  int64_t e = 0;
  const runtime::StepResult evaluated = schedule.run(
      [&] { return batch_of(testing::micro_batch(vocab, kBatch, kSeq, (e++) * dp + d)); }, runtime::Mode::eval);
  EXPECT_EQ(evaluated.micro_batches, l.micro);
  EXPECT_NEAR(evaluated.loss, got.loss, 1e-6 * std::fabs(got.loss));
  for (const auto& [k, v] : got.extras) EXPECT_NEAR(evaluated.extras.at(k), v, 1e-6 * std::fabs(v) + 1e-12) << k;
  for (const auto& [name, before] : grads)
    expect_close(split.model->find_parameter(name)->local().grad(), before, 0, name + " grad after eval");

  // The MoE monitor's routing counts: every stage's layers, under the one-process keys (one data
  // shard and no tp, so no other rank routed other tokens).
  if (dp == 1 && l.tp == 1) {
    plain_hooks.after_optimizer_step();
    split_hooks.after_optimizer_step();
    EXPECT_EQ(split_hooks.tokens_per_expert(), plain_hooks.tokens_per_expert());
    if (l.section.at("model_type") == "deepseek_v3") {
      // Every layer but the first (dense) is MoE, and so is the MTP layer.
      EXPECT_EQ(plain_hooks.tokens_per_expert().size(), l.section.at("num_hidden_layers").get<size_t>());
    }
  }

  // FSDP inside a stage reduces each unit once per step, at its chunk's last micro-batch: a step
  // of m micro-batches sends the reduction bytes of a step of one.
  if (fsdp) {
    runtime::PipelineSchedule one_micro_batch(split_model, *parallel, 1, {l.overlap_p2p});
    fsdp->reset_comm_stats();
    int64_t k = 0;
    one_micro_batch.run([&] { return batch_of(testing::micro_batch(vocab, kBatch, kSeq, (k++) * dp + d)); },
                        runtime::Mode::train);
    EXPECT_GT(reduce_bytes, 0);
    EXPECT_EQ(reduce_bytes, fsdp->grad_reduce_bytes()) << l.micro << " micro-batches against one";
  }
}

TEST(PipelineMpi, TwoStagesMatchOneProcess) {
  if (Runtime::get()->world_size() != 2) GTEST_SKIP() << "needs 2 ranks";
  check_step({"pp2 1f1b", llama(4, false), 2, 1, {{0, 1}, {2, 3}}, 4});
  check_step({"pp2 uneven list", llama(4, false), 2, 1, {{0, 0}, {1, 3}}, 3});
  check_step({"pp2 one micro-batch (bubble)", llama(2, false), 2, 1, {{0, 0}, {1, 1}}, 1});
  check_step({"pp2 tied embeddings", llama(2, true), 2, 1, {{0, 0}, {1, 1}}, 4});
  check_step({"pp2 deepseek-v3 mtp", deepseek_v3(), 2, 1, {{0, 0}, {1, 1}}, 4});
  check_step({"pp2 v2 interleaved", llama(4, true), 2, 1, {{0, 0}, {1, 1}, {2, 2}, {3, 3}}, 4});
  check_step({"pp2 v3 interleaved", llama(6, false), 2, 1, {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}}, 6});
  check_step({"pp2 v2 three micro-batches", llama(4, false), 2, 1, {{0, 0}, {1, 1}, {2, 2}, {3, 3}}, 3});
  check_step({"pp2 overlap_p2p", llama(4, false), 2, 1, {{0, 1}, {2, 3}}, 4, true});
  check_step({"pp2 v2 overlap_p2p", llama(4, false), 2, 1, {{0, 0}, {1, 1}, {2, 2}, {3, 3}}, 4, true});
  check_step({"pp2 gpipe", llama(4, true), 2, 1, {{0, 1}, {2, 3}}, 4, false, false, 1,
              runtime::PipelineScheduleKind::gpipe});
  // Backward/forward overlap: two layers per chunk, so each chunk runs layer by layer.
  check_step({"pp2 deepseek-v3 overlap_b_f", deepseek_v3(4), 2, 1, {{0, 1}, {2, 3}}, 4, false, true});
  check_step({"pp2 bf16", bf16(llama(4, false)), 2, 1, {{0, 1}, {2, 3}}, 4});
  check_step({"pp2 bf16 deepseek-v3 overlap_b_f", bf16(deepseek_v3(4)), 2, 1, {{0, 1}, {2, 3}}, 4, false, true});
  check_step({"pp2 v2 deepseek-v3 overlap_b_f overlap_p2p", deepseek_v3(8), 2, 1,
              {{0, 1}, {2, 3}, {4, 5}, {6, 7}}, 4, true, true});
}

TEST(PipelineMpi, ThreeStagesMatchOneProcess) {
  if (Runtime::get()->world_size() != 3) GTEST_SKIP() << "needs 3 ranks";
  check_step({"pp3 1f1b", llama(3, true), 3, 1, {{0, 0}, {1, 1}, {2, 2}}, 5});
  check_step({"pp3 v2", llama(6, false), 3, 1, {{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}}, 6});
}

TEST(PipelineMpi, FourRanksMatchOneProcess) {
  if (Runtime::get()->world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  check_step({"pp4 1f1b", llama(4, false), 4, 1, {{0, 0}, {1, 1}, {2, 2}, {3, 3}}, 6});
  check_step({"pp2 x fsdp2", llama(4, true), 2, 1, {{0, 1}, {2, 3}}, 2});
  check_step({"pp2 v2 x fsdp2", llama(4, false), 2, 1, {{0, 0}, {1, 1}, {2, 2}, {3, 3}}, 4});
  check_step({"pp2 x tp2", llama(2, true), 2, 2, {{0, 0}, {1, 1}}, 4});
  check_step({"pp2 x tp2 deepseek-v3", deepseek_v3(), 2, 2, {{0, 0}, {1, 1}}, 2});
  check_step({"pp2 x ep2 deepseek-v3 overlap_b_f", deepseek_v3(4), 2, 1, {{0, 1}, {2, 3}}, 4, false, true, 2});
}

TEST(PipelineMpi, EightRanksOfThreeAxesMatchOneProcess) {
  // Every axis of a production layout at once: each stage's layers split over tp 2 and sharded over
  // fsdp 2, the tied embedding's grad summed over the first and last stage across both, each
  // data-parallel rank its own micro-batches.
  if (Runtime::get()->world_size() != 8) GTEST_SKIP() << "needs 8 ranks";
  check_step({"pp2 x tp2 x fsdp2", llama(4, true), 2, 2, {{0, 1}, {2, 3}}, 2});
}

}  // namespace
}  // namespace loom::dist
