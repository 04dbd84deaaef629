// FSDP / HSDP across processes (spec parallel_training.md §1; MindFormers' loss sense and FSDP
// gradient sum; TorchTitan-style parity): the same weights as one process from meta init, the same
// loss and grads as one process training the same global batch (bit for bit with pure FSDP:
// rank-order sums reproduce the one-process accumulation order), and AdamW steps on shards matching
// full-model steps.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "../dist_test_util.h"
#include "loom/core/allocator.h"
#include "loom/dist/fsdp.h"
#include "loom/dist/parallelize.h"
#include "loom/dist/runtime.h"
#include "loom/optim/adamw.h"
#include "loom/optim/grad_norm.h"

namespace loom::dist {
namespace {

using testing::Json;

std::shared_ptr<DeviceMesh> mesh_for(int data_parallel_shard) {
  auto world = Runtime::get()->world();
  ParallelDegrees d;
  d.data_parallel_shard = data_parallel_shard;
  return std::make_shared<DeviceMesh>(world, ParallelDims::infer(world->size(), d));
}

// The rows of a full tensor this rank's FSDP shard of parameter `name` covers (its placement).
Tensor rows_of(const Tensor& full, nn::Module& model, const std::string& name) {
  const nn::AxisPlacement* rows = model.find_parameter(name)->placement.on("fsdp");
  return full.narrow(0, rows->ranges[0].begin, rows->ranges[0].length);
}

void compare(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  auto a = got.contiguous().to_float_vector(), b = want.contiguous().to_float_vector();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    if (tol == 0) ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << what << " [" << i << "] " << a[i] << " vs " << b[i];
    else ASSERT_NEAR(a[i], b[i], tol * (1.0 + std::fabs(b[i]))) << what << " [" << i << "]";
  }
}

struct Trained {
  models::BuiltModel plain, sharded;
  std::shared_ptr<FullyShardedModel> fsdp;
  int64_t vocab;
};

Trained make_trained(const Json& section, int data_parallel_shard, const FsdpOptions& options = {}) {
  Trained s{models::build_model(section), models::build_model(section), nullptr, section.at("vocab_size").get<int64_t>()};
  s.plain.model->materialize(17);
  s.fsdp = apply_fsdp(*s.sharded.model, mesh_for(data_parallel_shard), options);
  s.fsdp->materialize(17);
  return s;
}

// `micro` micro-batches per rank; data-parallel rank r takes global micro-batch j·dp + r at
// micro step j (the loader's sharding). Backward with sense 1/world (MindFormers' get_loss_sense).
double fsdp_step(Trained& s, int64_t micro, int64_t step = 0) {
  DeviceMesh& mesh = s.fsdp->mesh();
  const int dp = mesh.world_size(), r = mesh.rank();
  s.fsdp->zero_grad();
  double loss = 0;
  for (int64_t j = 0; j < micro; ++j) {
    nn::LMOutput out = s.sharded.model->forward(testing::micro_batch(s.vocab, 2, 5, step * micro * dp + j * dp + r));
    Tensor scaled = micro > 1 ? ops::scale(out.loss, 1.0 / static_cast<double>(micro)) : out.loss;
    autograd::backward(scaled, Tensor::full(scaled.shape(), 1.0 / dp));
    loss += out.loss.item() / static_cast<double>(micro);
  }
  s.fsdp->finish_backward();
  return mesh.world().all_reduce_scalar(loss) / dp;  // logged loss: mean over ranks
}

void check_grads(Trained& s, const std::map<std::string, Tensor>& ref, double tol) {
  for (auto& [name, shard] : s.sharded.model->local_parameters()) {
    EXPECT_EQ(shard.shape(), s.sharded.model->find_parameter(name)->local_shape()) << name;
    compare(shard.grad(), rows_of(ref.at(name), *s.sharded.model, name), tol, name + " grad");
  }
}

TEST(FsdpMpi, MetaInitShardsAreSlicesOfTheOneProcessWeights) {
  Trained s = make_trained(testing::dist_tiny_llama(), -1);
  auto plain = s.plain.model->state_dict();
  for (auto& [name, shard] : s.sharded.model->state_dict()) compare(shard, rows_of(plain.at(name), *s.sharded.model, name), 0, name);
}

TEST(FsdpMpi, PureFsdpStepEqualsOneProcessBitForBit) {
  for (const char* policy : {"always", "never"}) {
    SCOPED_TRACE(policy);
    FsdpOptions o;
    o.reshard_after_forward_policy = policy;
    Trained s = make_trained(testing::dist_tiny_llama(), -1, o);
    const int n = Runtime::get()->world_size();
    std::map<std::string, Tensor> ref;
    const double ref_loss = testing::reference_step(*s.plain.model, s.vocab, 2, 5, 0, n, &ref);
    const double loss = fsdp_step(s, 1);
    if (n <= 2) EXPECT_EQ(loss, ref_loss);
    else EXPECT_NEAR(loss, ref_loss, 1e-6);  // mean of n floats: exact sums, order may round differently
    check_grads(s, ref, 0);
  }
}

TEST(FsdpMpi, Bf16ParametersGatherInBf16AndReduceFp32MainGrads) {
  // Mixed precision (spec other_training_features.md §4): bf16 parameters travel as bf16, grads are
  // fp32 main grads.
  Json section = testing::dist_tiny_llama();
  section["params_dtype"] = "bfloat16";
  Trained s = make_trained(section, -1);
  const int n = Runtime::get()->world_size();
  std::map<std::string, Tensor> ref;
  testing::reference_step(*s.plain.model, s.vocab, 2, 5, 0, n, &ref);
  fsdp_step(s, 1);
  for (auto& [name, shard] : s.sharded.model->local_parameters()) {
    EXPECT_EQ(shard.dtype(), DType::bf16) << name;
    EXPECT_EQ(shard.grad().dtype(), DType::f32) << name;
  }
  check_grads(s, ref, 0);
}

// What travels under each precision: parameters are all-gathered in their own dtype (bf16
// compute on float32 parameters still gathers float32: the cast to bf16 happens at use), grads
// are reduce-scattered as fp32 main grads whatever the dtypes.
TEST(FsdpMpi, GatherBytesFollowTheParameterDtypeAndReductionsStayFp32) {
  struct Case { const char* params; const char* compute; int64_t gather = 0, reduce = 0; };
  std::vector<Case> cases{{"float32", "float32"}, {"float32", "bfloat16"}, {"bfloat16", "bfloat16"}};
  for (Case& c : cases) {
    Json section = testing::dist_tiny_llama();
    section["params_dtype"] = c.params;
    section["compute_dtype"] = c.compute;
    FsdpOptions options;  // as the trainer sets it from model.compute_dtype
    if (std::string(c.compute) == "bfloat16") options.compute_dtype = DType::bf16;
    Trained s = make_trained(section, -1, options);
    s.fsdp->reset_comm_stats();
    fsdp_step(s, 1);
    c.gather = s.fsdp->param_gather_bytes();
    c.reduce = s.fsdp->grad_reduce_bytes();
    EXPECT_GT(c.gather, 0) << c.params << "/" << c.compute;
    EXPECT_LE(c.gather + c.reduce, s.fsdp->comm_stats().bytes_sent) << c.params << "/" << c.compute;
  }
  // bf16 compute on fp32 weights gathers the matmul weights in bf16, the norm weights and the
  // embedding table in fp32: between all-bf16 parameters and all-fp32 ones.
  EXPECT_LT(cases[1].gather, cases[0].gather);
  EXPECT_GT(cases[1].gather, cases[2].gather);
  EXPECT_EQ(2 * cases[2].gather, cases[0].gather);
  EXPECT_EQ(cases[1].reduce, cases[0].reduce);
  EXPECT_EQ(cases[2].reduce, cases[0].reduce);
}

TEST(FsdpMpi, GradNormWithReplicaFactorsEqualsOneProcess) {
  // MindFormers' _calculate_global_grad_norm: Σ_p Σg²/replica_factor(p) over the world, then sqrt.
  for (int shard : {-1, 2}) {
    if (shard == 2 && Runtime::get()->world_size() != 4) continue;
    Trained s = make_trained(testing::dist_tiny_llama(), shard);
    const int n = Runtime::get()->world_size();
    std::map<std::string, Tensor> ref;
    testing::reference_step(*s.plain.model, s.vocab, 2, 5, 0, n, &ref);
    fsdp_step(s, 1);
    optim::NamedParams full, shards;
    for (auto& [name, p] : s.plain.model->named_parameters()) full.push_back({name, p->tensor});
    for (auto& [name, t] : s.sharded.model->local_parameters()) shards.push_back({name, t});
    const double want = optim::global_grad_norm(full);
    const double got = optim::global_grad_norm(
        shards,
        [&](const optim::NamedParam& p) {
          return static_cast<double>(s.fsdp->mesh().replica_factor(s.sharded.model->find_parameter(p.name)->placement));
        },
        [&](double v) { return s.fsdp->mesh().world().all_reduce_scalar(v); });
    EXPECT_NEAR(got, want, 1e-6 * want) << "data_parallel_shard " << shard;
  }
}

TEST(FsdpMpi, MoeMlaMtpModelStepEqualsOneProcess) {
  Trained s = make_trained(testing::dist_tiny_deepseek_v3(), -1);
  const int n = Runtime::get()->world_size();
  s.sharded.model->set_auxiliary_loss_grad_scale(1.0);
  std::map<std::string, Tensor> ref;
  const double ref_loss = testing::reference_step(*s.plain.model, s.vocab, 2, 5, 0, n, &ref);
  // The injected MTP/balance losses carry the model's aux grad scale: with sense 1/n it must be
  // the same 1/n·(1/A) the one-process run applies through loss / A.
  s.sharded.model->set_auxiliary_loss_grad_scale(1.0);
  const double loss = fsdp_step(s, 1);
  EXPECT_NEAR(loss, ref_loss, 1e-6);
  check_grads(s, ref, 1e-6);
}

TEST(FsdpMpi, GradientAccumulationCombinedWithDataParallel) {
  Trained s = make_trained(testing::dist_tiny_llama(), -1);
  const int n = Runtime::get()->world_size();
  std::map<std::string, Tensor> ref;
  const double ref_loss = testing::reference_step(*s.plain.model, s.vocab, 2, 5, 0, 2 * n, &ref);
  const double loss = fsdp_step(s, 2);
  EXPECT_NEAR(loss, ref_loss, 1e-6);
  check_grads(s, ref, 1e-6);  // (g00+g01)+(g10+g11) vs ((g00+g01)+g10)+g11
}

TEST(FsdpMpi, HsdpTwoByTwoMatchesOneProcess) {
  if (Runtime::get()->world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  Trained s = make_trained(testing::dist_tiny_llama(), 2);  // dp_replicate 2 x dp_shard 2
  EXPECT_EQ(s.fsdp->mesh().size("dp_replicate"), 2);
  std::map<std::string, Tensor> ref;
  const double ref_loss = testing::reference_step(*s.plain.model, s.vocab, 2, 5, 0, 4, &ref);
  const double loss = fsdp_step(s, 1);
  EXPECT_NEAR(loss, ref_loss, 1e-6);
  check_grads(s, ref, 1e-6);
  // The two replicas (ranks r and r + 2) hold the same rows; the grad norm counts them once.
  const nn::Parameter& fc1 = *s.sharded.model->find_parameter("decoder.layers.0.mlp.linear_fc1.weight");
  EXPECT_EQ(fc1.placement.on("fsdp")->ranges[0].begin, (s.fsdp->mesh().rank() % 2) * ((fc1.global_shape[0] + 1) / 2));
  EXPECT_EQ(fc1.placement.on("dp_replicate"), nullptr);
  EXPECT_EQ(s.fsdp->mesh().replica_factor(fc1.placement), 2);
}

TEST(FsdpMpi, GradientDivisionAveragesInsteadOfSumming) {
  // disable_gradient_division: false ⇒ FSDP divides by the data-parallel size itself, so a loss
  // backpropagated without the 1/world sense gives the same grads.
  FsdpOptions o;
  o.disable_gradient_division = false;
  Trained s = make_trained(testing::dist_tiny_llama(), -1, o);
  const int n = Runtime::get()->world_size();
  std::map<std::string, Tensor> ref;
  testing::reference_step(*s.plain.model, s.vocab, 2, 5, 0, n, &ref);
  s.fsdp->zero_grad();
  nn::LMOutput out = s.sharded.model->forward(testing::micro_batch(s.vocab, 2, 5, s.fsdp->mesh().rank()));
  autograd::backward(out.loss);
  s.fsdp->finish_backward();
  check_grads(s, ref, 1e-6);
}

TEST(FsdpMpi, AdamWOnShardsTracksTheFullModel) {
  // Three steps; the optimizer sees only shards. Same updates as AdamW on the full model.
  Trained s = make_trained(testing::dist_tiny_llama(), -1);
  const int n = Runtime::get()->world_size();
  optim::AdamWOptions ao;
  ao.learning_rate = 1e-2;
  optim::NamedParams full, shards;
  for (auto& [name, p] : s.plain.model->named_parameters()) full.push_back({name, p->tensor});
  for (auto& [name, t] : s.sharded.model->local_parameters()) shards.push_back({name, t});
  optim::AdamW plain_opt(full, ao), shard_opt(shards, ao);
  for (int64_t step = 0; step < 3; ++step) {
    const double ref_loss = testing::reference_step(*s.plain.model, s.vocab, 2, 5, step * n, n, nullptr);
    plain_opt.step();
    const double loss = fsdp_step(s, 1, step);
    shard_opt.step();
    EXPECT_NEAR(loss, ref_loss, 1e-6) << "step " << step;
  }
  auto plain = s.plain.model->state_dict();
  for (auto& [name, shard] : s.sharded.model->state_dict())
    compare(shard, rows_of(plain.at(name), *s.sharded.model, name), 0, name + " after 3 AdamW steps");
}

TEST(FsdpMpi, CpuOffloadKeepsShardsAndOptimizerStateInTheHostPool) {
  // spec parallel_training.md §1.3 cpu_offload: sharded params, grads and optimizer state leave
  // device memory; training is unchanged.
  FsdpOptions o;
  o.cpu_offload = true;
  const int64_t host_before = host_pool().stats().current_bytes;
  Trained off = make_trained(testing::dist_tiny_llama(), -1, o);
  Trained on = make_trained(testing::dist_tiny_llama(), -1);
  optim::NamedParams a, b;
  for (auto& [name, t] : off.sharded.model->local_parameters()) a.push_back({name, t});
  for (auto& [name, t] : on.sharded.model->local_parameters()) b.push_back({name, t});
  optim::AdamW opt_off(a, {}), opt_on(b, {});
  opt_off.relocate_state(host_pool());
  const FsdpMemory m = off.fsdp->memory();
  EXPECT_GE(host_pool().stats().current_bytes - host_before,
            m.sharded_param_bytes + m.sharded_grad_bytes + opt_off.state_bytes());
  EXPECT_GT(opt_off.state_bytes(), 0);
  for (int64_t step = 0; step < 2; ++step) {
    EXPECT_EQ(fsdp_step(off, 1, step), fsdp_step(on, 1, step));
    opt_off.step();
    opt_on.step();
  }
  auto x = off.sharded.model->state_dict(), y = on.sharded.model->state_dict();
  for (auto& [name, t] : x) compare(t, y.at(name), 0, name + " with cpu_offload");
}

TEST(FsdpMpi, ShardedMemoryIsAFractionOfTheModel) {
  // Target: per-rank parameter + grad state <= 1/n of one process + one unit's params.
  Trained s = make_trained(testing::dist_tiny_llama(), -1);
  const int n = Runtime::get()->world_size();
  int64_t full_bytes = 0;
  for (auto& [name, p] : s.plain.model->named_parameters()) full_bytes += static_cast<int64_t>(p->tensor.nbytes());
  const FsdpMemory m = s.fsdp->memory();
  EXPECT_LE(m.sharded_param_bytes, full_bytes / n + m.largest_unit_param_bytes);
  EXPECT_LE(m.sharded_grad_bytes, full_bytes / n + m.largest_unit_param_bytes);
}

TEST(FsdpMpi, ParallelizeShardsAfterTheMemoryPolicyAndScalesTheLoss) {
  const int n = Runtime::get()->world_size();
  if (n < 2) GTEST_SKIP() << "needs 2 or more ranks";
  models::BuiltModel plain = models::build_model(testing::dist_tiny_llama());
  models::BuiltModel model = models::build_model(testing::dist_tiny_llama());
  plain.model->materialize(17);
  const std::string name = "decoder.layers.0.mlp.linear_fc1.weight";
  bool sharded_when_policy_ran = true;
  ParallelizeOptions o;
  o.memory_policy = [&](nn::Module& m) { sharded_when_policy_ran = m.find_parameter(name)->local_shard.defined(); };
  auto parallel = parallelize(*model.model, mesh_for(-1), o);
  EXPECT_FALSE(sharded_when_policy_ran);  // recompute/swap wrap the model before FSDP does
  ASSERT_NE(parallel->fsdp(), nullptr);
  EXPECT_EQ(parallel->backward_scale(), 1.0 / n);
  parallel->materialize(17);
  compare(model.model->state_dict().at(name), rows_of(plain.model->state_dict().at(name), *model.model, name), 0, name);
  EXPECT_EQ(parallel->replica_factor(name), 1.0);
}

}  // namespace
}  // namespace loom::dist
