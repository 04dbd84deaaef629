// FSDP on one process (the shard group has one rank): the wrappers, hooks, resharding and grad
// reduction must leave the numbers of the plain model unchanged, bit for bit. Multi-rank
// sharding is tested under mpirun in tests/dist/mpi/test_fsdp_mpi.cpp.
#include <gtest/gtest.h>

#include <bit>

#include "dist_test_util.h"
#include "loom/autograd/checkpoint.h"
#include "loom/core/allocator.h"
#include "loom/dist/fsdp.h"

namespace loom::dist {
namespace {

using testing::Json;

void expect_bit_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_TRUE(a.defined()) << what;
  ASSERT_TRUE(b.defined()) << what;
  ASSERT_EQ(a.numel(), b.numel()) << what;
  auto x = a.contiguous().to_float_vector(), y = b.contiguous().to_float_vector();
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(x[i]), std::bit_cast<uint32_t>(y[i])) << what << " element " << i;
}

struct Pair {
  models::BuiltModel plain, sharded;
  std::shared_ptr<FullyShardedModel> fsdp;
};

Pair make_models(const Json& section, const FsdpOptions& options, uint64_t seed = 5) {
  Pair p{models::build_model(section), models::build_model(section), nullptr};
  p.plain.model->materialize(seed);
  p.fsdp = apply_fsdp(*p.sharded.model, DeviceMesh::single(), options);
  p.fsdp->materialize(seed);
  return p;
}

// Same loss and the same grads as the plain model, with A micro-batches.
void check_parity(const Json& section, const FsdpOptions& options, int64_t micro) {
  Pair p = make_models(section, options);
  const int64_t vocab = section.at("vocab_size").get<int64_t>();
  std::map<std::string, Tensor> ref;
  const double ref_loss = testing::reference_step(*p.plain.model, vocab, 2, 5, 0, micro, &ref);
  p.fsdp->zero_grad();
  double loss = 0;
  for (int64_t i = 0; i < micro; ++i) {
    nn::LMOutput out = p.sharded.model->forward(testing::micro_batch(vocab, 2, 5, i));
    autograd::backward(micro > 1 ? ops::scale(out.loss, 1.0 / static_cast<double>(micro)) : out.loss);
    p.fsdp->finish_backward();
    loss += out.loss.item() / static_cast<double>(micro);
  }
  EXPECT_EQ(loss, ref_loss);
  auto shards = p.sharded.model->local_parameters();
  EXPECT_EQ(shards.size(), ref.size());
  for (auto& [name, shard] : shards) {
    ASSERT_TRUE(ref.count(name)) << name;
    expect_bit_equal(shard.grad(), ref[name], name + " grad");
  }
  EXPECT_EQ(p.fsdp->memory().gathered_param_bytes, 0);  // everything resharded after backward
}

TEST(FsdpSingleRank, MetaInitGivesTheOneProcessWeights) {
  Pair p = make_models(testing::dist_tiny_llama(), {});
  auto plain = p.plain.model->state_dict();
  auto sharded = p.sharded.model->state_dict();
  ASSERT_EQ(plain.size(), sharded.size());
  for (auto& [name, t] : plain) expect_bit_equal(sharded.at(name), t, name);
}

TEST(FsdpSingleRank, LossAndGradsMatchThePlainModelForEveryPolicy) {
  for (const char* policy : {"always", "never", "default"}) {
    SCOPED_TRACE(policy);
    FsdpOptions o;
    o.reshard_after_forward_policy = policy;
    check_parity(testing::dist_tiny_llama(), o, 1);
  }
}

TEST(FsdpSingleRank, TiedEmbeddingsAndGradientAccumulation) {
  check_parity(testing::dist_tiny_llama(/*tied=*/true), {}, 3);
}

TEST(FsdpSingleRank, MoeMlaAndMtpUnits) {
  check_parity(testing::dist_tiny_deepseek_v3(), {}, 2);
}

TEST(FsdpSingleRank, ComposesWithFullRecomputeAppliedFirst) {
  // The memory policy wraps layers in checkpoint() before FSDP (dist/parallelize.h order): the
  // recompute inside backward must find the parameters gathered.
  const Json section = testing::dist_tiny_llama();
  models::BuiltModel plain = models::build_model(section), sharded = models::build_model(section);
  plain.model->materialize(5);
  for (auto* layer : sharded.model->decoder().layers())
    layer->add_forward_wrapper([](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
      return autograd::checkpoint(inner, in);
    });
  auto fsdp = apply_fsdp(*sharded.model, DeviceMesh::single(), {});
  fsdp->materialize(5);
  std::map<std::string, Tensor> ref;
  const double ref_loss = testing::reference_step(*plain.model, 25, 2, 5, 0, 1, &ref);
  nn::LMOutput out = sharded.model->forward(testing::micro_batch(25, 2, 5, 0));
  autograd::backward(out.loss);
  fsdp->finish_backward();
  EXPECT_EQ(out.loss.item(), ref_loss);
  for (auto& [name, shard] : sharded.model->local_parameters()) expect_bit_equal(shard.grad(), ref[name], name);
}

TEST(FsdpSingleRank, ReshardPolicyDecidesWhatStaysGatheredAfterForward) {
  // spec parallel_training.md §1.3: always frees the gathered weights after forward, never keeps
  // them for backward; default = always without PP, never with PP. The root stays gathered.
  for (const char* policy : {"always", "never"}) {
    FsdpOptions o;
    o.reshard_after_forward_policy = policy;
    Pair p = make_models(testing::dist_tiny_llama(), o);
    const FsdpMemory before = p.fsdp->memory();
    EXPECT_EQ(before.gathered_param_bytes, 0);
    nn::LMOutput out = p.sharded.model->forward(testing::micro_batch(25, 2, 5, 0));
    const int64_t root_bytes = 2 * 25 * 18 * 4 + 18 * 4;  // embedding + head + final norm
    const int64_t gathered = p.fsdp->memory().gathered_param_bytes;
    if (std::string(policy) == "always") EXPECT_EQ(gathered, root_bytes);
    else EXPECT_GT(gathered, root_bytes);
    autograd::backward(out.loss);
    p.fsdp->finish_backward();
    EXPECT_EQ(p.fsdp->memory().gathered_param_bytes, 0);
  }
  FsdpOptions pp;
  pp.pipeline_parallel = true;
  EXPECT_FALSE(make_models(testing::dist_tiny_llama(), pp).fsdp->reshard_after_forward());
  EXPECT_TRUE(make_models(testing::dist_tiny_llama(), {}).fsdp->reshard_after_forward());
  FsdpOptions bad;
  bad.reshard_after_forward_policy = "sometimes";
  try {
    make_models(testing::dist_tiny_llama(), bad);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallelism.reshard_after_forward_policy"), std::string::npos);
  }
}

TEST(FsdpSingleRank, AppliedToAMaterialisedModelKeepsItsValues) {
  const Json section = testing::dist_tiny_llama();
  models::BuiltModel m = models::build_model(section);
  m.model->materialize(9);
  auto values = m.model->state_dict();
  std::map<std::string, Tensor> copies;
  for (auto& [n, t] : values) copies[n] = t.clone();
  auto fsdp = apply_fsdp(*m.model, DeviceMesh::single(), {});
  for (auto& [n, t] : m.model->state_dict()) expect_bit_equal(t, copies.at(n), n);
  // The parameters themselves are released until a forward gathers them.
  EXPECT_TRUE(m.model->find_parameter("decoder.layers.0.mlp.linear_fc1.weight")->tensor.is_meta());
}

TEST(FsdpSingleRank, CpuOffloadMovesShardsToTheHostPool) {
  const int64_t host_before = host_pool().stats().current_bytes;
  FsdpOptions o;
  o.cpu_offload = true;
  Pair p = make_models(testing::dist_tiny_llama(), o);
  const FsdpMemory m = p.fsdp->memory();
  EXPECT_GE(host_pool().stats().current_bytes - host_before, m.sharded_param_bytes + m.sharded_grad_bytes);
  EXPECT_GT(m.sharded_param_bytes, 0);
  check_parity(testing::dist_tiny_llama(), o, 1);
}

TEST(FsdpSingleRank, PlacementsAndReplicaFactors) {
  Pair p = make_models(testing::dist_tiny_llama(), {});
  const nn::Parameter& fc2 = *p.sharded.model->find_parameter("decoder.layers.1.mlp.linear_fc2.weight");
  EXPECT_EQ(fc2.global_shape, (Shape{18, 22}));
  const auto pieces = fc2.pieces();
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].global_offset, (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(pieces[0].shape, (Shape{18, 22}));
  EXPECT_EQ(fc2.local_shape(), (Shape{18, 22}));
  EXPECT_EQ(p.fsdp->mesh().replica_factor(fc2.placement), 1);
  EXPECT_TRUE(p.plain.model->find_parameter("decoder.layers.0.input_layernorm.weight")->placement.axes().empty());
  const nn::AxisPlacement* rows = p.sharded.model->find_parameter("decoder.layers.0.input_layernorm.weight")->placement.on("fsdp");
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(rows->kind, nn::AxisPlacement::Kind::shard);
  EXPECT_EQ(rows->dim, 0);
  EXPECT_EQ(p.fsdp->unit_names(),
            (std::vector<std::string>{"decoder.layers.0", "decoder.layers.1", "decoder.layers.2", "(root)"}));
}

TEST(FsdpSingleRank, LoadFullStateDictFillsShardsAndNamesProblems) {
  Pair p = make_models(testing::dist_tiny_llama(), {});
  auto state = p.plain.model->state_dict();
  p.fsdp->load_full_state_dict(state);
  state.erase("decoder.final_layernorm.weight");
  state["decoder.layers.0.mlp.linear_fc1.weight"] = Tensor::zeros({3, 3});
  try {
    p.fsdp->load_full_state_dict(state);
    FAIL();
  } catch (const CheckpointError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing: decoder.final_layernorm.weight"), std::string::npos) << msg;
    EXPECT_NE(msg.find("shape mismatch: decoder.layers.0.mlp.linear_fc1.weight"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace loom::dist
