// The model runtime under every layout, built from a configuration as `loom train` builds it
// (runtime/model_runtime.h), and its schedule's two modes (runtime/schedule.h): on the same
// micro-batches, eval mode's loss equals the train mode's forward loss and one process's, and
// eval leaves no grads and no MoE routing counts behind; the logits of a batch are one process's,
// whole on every rank. Layouts: FSDP 2, TP 2, CP 2 (ring,
// Ulysses), EP 2, PP 2 and interleaved PP 2 (v 2) on 2 ranks; HSDP 2x2, TP 2 x FSDP 2, CP 2 x
// FSDP 2, EP 2 x FSDP 2, PP 2 x FSDP 2, PP 2 (v 2) x FSDP 2, TP 2 x CP 2 and PP 2 x TP 2 on 4.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../../dist/mpi/parallel_test_util.h"
#include "loom/config/config.h"
#include "loom/dist/runtime.h"
#include "loom/nn/moe.h"
#include "loom/nn/router.h"
#include "loom/runtime/backend.h"
#include "loom/runtime/model_runtime.h"

namespace loom::runtime {
namespace {

constexpr int64_t kBatch = 2, kSeq = 8;

const char* kLlama =
    "  model_type: llama\n  vocab_size: 24\n  hidden_size: 16\n  num_hidden_layers: 4\n  num_attention_heads: 4\n"
    "  num_key_value_heads: 2\n  intermediate_size: 24\n  max_position_embeddings: 16\n  compute_dtype: float32\n";
const char* kDeepSeek =
    "  model_type: deepseek_v3\n  vocab_size: 24\n  hidden_size: 16\n  num_hidden_layers: 2\n"
    "  num_attention_heads: 2\n  intermediate_size: 20\n  moe_intermediate_size: 6\n  n_routed_experts: 4\n"
    "  num_experts_per_tok: 2\n  n_group: 2\n  topk_group: 1\n  n_shared_experts: 1\n  first_k_dense_replace: 1\n"
    "  routed_scaling_factor: 2.5\n  q_lora_rank: 8\n  kv_lora_rank: 6\n  qk_nope_head_dim: 4\n"
    "  qk_pos_emb_head_dim: 2\n  v_head_dim: 4\n  num_nextn_predict_layers: 1\n  mtp_loss_scaling_factor: 0.3\n"
    "  moe_router_load_balancing_type: seq_aux_loss\n  moe_aux_loss_coeff: 0.001\n"
    "  moe_router_enable_expert_bias: True\n  max_position_embeddings: 16\n  compute_dtype: float32\n";

// 8 samples a step: 4 micro-batches of 2 on one process.
std::string config_yaml(const std::string& model, const std::string& parallelism) {
  return "training:\n  local_batch_size: 2\n  global_batch_size: 8\n  seed: 5\n"
         "lr_scheduler:\n  type: ConstantWarmUpLR\n  warmup_steps: 0\n" +
         (parallelism.empty() ? std::string() : "parallelism:" + parallelism + "\n") +
         "train_dataset:\n  dataloader:\n    type: BlendedMegatronDatasetDataLoader\n    config:\n      seq_length: " + std::to_string(kSeq) +
         "\n      create_attention_mask: False\n"
         "model:\n" + model;
}

config::LoadedConfig load(const std::string& yaml, int world_size) {
  config::LoadOptions o;
  o.world_size = world_size;
  return config::load_config_text(yaml, "<test config>", o);
}

data::Batch batch(int64_t index) {
  const nn::LMBatch b = testing::micro_batch(24, kBatch, kSeq, index);
  data::Batch out;
  out.input_ids = b.input_ids;
  out.labels = b.labels;
  out.loss_mask = b.loss_mask;
  return out;
}

int64_t routed_tokens(nn::CausalLM& model) {
  int64_t n = 0;
  for (nn::MoELayer* m : model.moe_layers())
    for (int64_t c : m->router().tokens_per_expert().to_int_vector()) n += c;
  return n;
}

// One step's micro-batches in eval mode, then in train mode, on the layout; eval on one process
// over every data-parallel rank's micro-batches.
void check_modes(const std::string& name, const std::string& model, const std::string& parallelism) {
  SCOPED_TRACE(name);
  const std::string yaml = config_yaml(model, parallelism);
  auto world = dist::Runtime::get()->world();
  config::LoadedConfig loaded = load(yaml, world->size());
  std::unique_ptr<Backend> backend = make_backend(loaded.resolved->device, world);
  ModelRuntime split(loaded.config, *loaded.resolved, *backend);
  split.initialize(5);
  const dist::ParallelDims& dims = split.mesh().dims();
  const int dp = dims.data_parallel(), d = dims.dataset_shard_id(split.mesh().rank());
  const int64_t A = split.micro_batches();
  // Data-parallel rank d takes global micro-batch j·dp + d at micro step j.
  auto source = [&] {
    auto j = std::make_shared<int64_t>(0);
    return [j, dp, d] { return batch((*j)++ * dp + d); };
  };

  const StepResult evaluated = split.schedule().run(source(), Mode::eval);
  EXPECT_EQ(evaluated.micro_batches, A);
  EXPECT_EQ(routed_tokens(split.causal_lm()), 0) << "eval counted routing for the expert-bias update";
  for (auto& [pname, local] : split.module().local_parameters()) {
    if (!local.grad().defined()) continue;
    for (double g : local.grad().to_double_vector()) ASSERT_EQ(g, 0.0) << pname << " got a grad in eval";
  }
  const StepResult trained = split.schedule().run(source(), Mode::train);
  EXPECT_NEAR(evaluated.loss, trained.loss, 1e-6 * std::fabs(trained.loss));
  for (const auto& [k, v] : trained.extras) {
    ASSERT_TRUE(evaluated.extras.contains(k)) << k;
    EXPECT_NEAR(evaluated.extras.at(k), v, 1e-6 * std::fabs(v) + 1e-12) << k;
  }
  EXPECT_EQ(world->all_reduce_scalar(evaluated.loss, dist::ReduceOp::max),
            world->all_reduce_scalar(evaluated.loss, dist::ReduceOp::min))
      << "every rank reports the same loss";

  // One process, the same 8 samples: A·dp micro-batches in order.
  config::LoadedConfig alone = load(config_yaml(model, ""), 1);
  std::unique_ptr<Backend> one_backend = make_backend(Device::cpu());
  ModelRuntime one(alone.config, *alone.resolved, *one_backend);
  one.initialize(5);
  ASSERT_EQ(one.micro_batches(), A * dp);
  int64_t next = 0;
  const StepResult want = one.schedule().run([&] { return batch(next++); }, Mode::eval);
  EXPECT_NEAR(evaluated.loss, want.loss, 1e-6 * std::fabs(want.loss));

  // The head's logits of this data shard's batch, whole on every rank (TP gathers the
  // vocabulary, CP the sequence, PP shares the last stage's), against one process's.
  const Tensor logits = split.schedule().logits(batch(d));
  ASSERT_EQ(logits.shape(), (Shape{kBatch, kSeq, 24}));
  testing::expect_close(logits, one.schedule().logits(batch(d)), 1e-5, "logits");
}

// Context parallelism takes the causal mask in its compressed form.
std::string compressed(const std::string& model) { return model + "  use_attn_mask_compression: True\n"; }

std::string pp2(const std::string& extra = "") {
  return "\n  pipeline_parallel: 2" + extra;
}

TEST(ScheduleModesMpi, TwoRanks) {
  if (dist::Runtime::get()->world_size() != 2) GTEST_SKIP() << "needs 2 ranks";
  check_modes("fsdp2", kLlama, "");
  check_modes("tp2", kLlama, "\n  tensor_parallel: 2");
  check_modes("cp2 ring", compressed(kLlama), "\n  context_parallel: 2");
  check_modes("cp2 ulysses", compressed(kLlama), "\n  context_parallel: 2\n  context_parallel_method: ulysses");
  check_modes("ep2", kDeepSeek, "\n  expert_parallel: 2");
  check_modes("pp2", kLlama, pp2());
  check_modes("pp2 v2", kLlama, pp2("\n  pipeline_parallel_interleave_num: 2"));
}

TEST(ScheduleModesMpi, FourRanks) {
  if (dist::Runtime::get()->world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  check_modes("hsdp 2x2", kLlama, "\n  data_parallel_shard: 2");
  check_modes("tp2 x fsdp2", kLlama, "\n  tensor_parallel: 2");
  check_modes("cp2 x fsdp2", compressed(kLlama), "\n  context_parallel: 2");
  check_modes("ep2 x fsdp2", kDeepSeek, "\n  expert_parallel: 2");
  check_modes("pp2 x fsdp2", kLlama, pp2());
  check_modes("pp2 v2 x fsdp2", kLlama, pp2("\n  pipeline_parallel_interleave_num: 2"));
  check_modes("tp2 x cp2", compressed(kLlama), "\n  tensor_parallel: 2\n  context_parallel: 2");
  check_modes("pp2 x tp2", kLlama, pp2("\n  tensor_parallel: 2"));
}

}  // namespace
}  // namespace loom::runtime
