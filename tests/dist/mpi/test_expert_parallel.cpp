// Expert parallelism against one process (dist/expert_parallel.h): the routed experts of rank e
// are experts [e·E/ep, (e+1)·E/ep) of the one-process weights, and one step's loss, every
// parameter's grad (the local pieces after the all-to-all's backward and FSDP's efsdp/fsdp
// reductions) and the grad norm match the one-process step within fp32 rounding, for Qwen3-MoE
// and DeepSeek-V3 (MLA, shared experts, groups, expert bias, MTP), at ep 2 and 4, inside tp
// (ep ≤ tp), across tp (ep > tp) and beside FSDP. Run at 2 and 4 ranks.
#include <gtest/gtest.h>

#include <cmath>

#include "../dist_test_util.h"
#include "parallel_test_util.h"
#include "loom/dist/expert_parallel.h"
#include "loom/dist/parallelize.h"
#include "loom/dist/runtime.h"
#include "loom/ops/reduce.h"
#include "loom/optim/grad_norm.h"

namespace loom::dist {
namespace {

using testing::expect_close;
using testing::local_of;

using testing::Json;

// 8 experts: ep 2 and 4 divide them, and every rank keeps more than one.
Json ep_qwen3_moe() {
  return Json{{"model_type", "qwen3_moe"}, {"vocab_size", 24}, {"hidden_size", 16}, {"num_hidden_layers", 2},
              {"num_attention_heads", 4}, {"num_key_value_heads", 4}, {"head_dim", 4}, {"intermediate_size", 16},
              {"moe_intermediate_size", 8}, {"num_experts", 8}, {"num_experts_per_tok", 2},
              {"norm_topk_prob", true}, {"router_aux_loss_coef", 0.01}, {"compute_dtype", "float32"}};
}

Json ep_deepseek_v3() {
  Json j = testing::dist_tiny_deepseek_v3();
  j["num_attention_heads"] = 4;
  j["intermediate_size"] = 24;
  j["n_routed_experts"] = 8;
  j["n_group"] = 4;
  j["topk_group"] = 2;
  j["moe_router_enable_expert_bias"] = true;
  return j;
}

std::shared_ptr<DeviceMesh> mesh_for(int ep, int tp) {
  auto world = Runtime::get()->world();
  ParallelDegrees d;
  d.tensor_parallel = tp;
  d.expert_parallel = ep;
  return std::make_shared<DeviceMesh>(world, ParallelDims::infer(world->size(), d));
}

// One optimizer step of `micro` micro-batches per data-parallel rank against one process.
void check_step(const Json& section, int ep, int tp, int64_t micro, const ExpertParallelOptions& expert = {}) {
  const int64_t vocab = section.at("vocab_size").get<int64_t>(), B = 2, S = 8;
  auto mesh = mesh_for(ep, tp);
  const int dp = mesh->dims().data_parallel(), d = mesh->dims().dataset_shard_id(mesh->rank());
  models::BuiltModel plain = models::build_model(section), split = models::build_model(section);
  plain.model->materialize(17);
  ParallelizeOptions options;
  options.expert = expert;
  auto parallel = parallelize(*split.model, mesh, options);
  parallel->materialize(17);
  for (auto& [name, p] : split.model->named_parameters())
    expect_close(p->local(), local_of(plain.model->find_parameter(name)->tensor, *p), 0, name + " init");

  // Each rank computes its E/ep experts: weight1's local rows are experts, FSDP-sharded over efsdp.
  const int64_t E = split.model->config().num_experts;
  const nn::Parameter& w1 = split.model->moe_layers()[0]->experts().weight1();
  ASSERT_NE(w1.placement.on("ep"), nullptr);
  EXPECT_EQ(w1.placement.on("ep")->ranges[0].begin, mesh->group("ep").rank() * (E / ep));
  EXPECT_EQ(w1.placement.on("tp"), nullptr);  // not partial over tp: the all-to-all sums its grads

  std::map<std::string, Tensor> ref;
  const double ref_loss = testing::reference_step(*plain.model, vocab, B, S, 0, micro * dp, &ref);
  split.model->set_auxiliary_loss_grad_scale(1.0);
  const double loss = testing::parallel_step(*split.model, *parallel, *mesh, vocab, B, S, micro, dp, d);
  EXPECT_NEAR(loss, ref_loss, 1e-6 * std::fabs(ref_loss));
  for (auto& [name, p] : split.model->named_parameters())
    expect_close(p->local().grad(), local_of(ref.at(name), *p), 2e-5, name + " grad");

  // Routing counts summed over the ranks that route other tokens are the one-process counts.
  for (size_t i = 0; i < plain.model->moe_layers().size(); ++i) {
    Tensor counts = split.model->moe_layers()[i]->router().tokens_per_expert().clone();
    mesh->group("batch").all_reduce(counts);
    mesh->group("tp").all_reduce(counts);
    EXPECT_EQ(counts.to_int_vector(), plain.model->moe_layers()[i]->router().tokens_per_expert().to_int_vector())
        << "MoE layer " << i;
  }

  testing::expect_grad_norm_matches(*plain.model, *split.model, *parallel, *mesh);
}

struct Arch {
  const char* name;
  Json (*section)();
};
const Arch kArchitectures[] = {{"qwen3_moe", ep_qwen3_moe}, {"deepseek_v3", ep_deepseek_v3}};

TEST(ExpertParallelMpi, OverEveryRankBesideFsdp) {
  const int n = Runtime::get()->world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const Arch& a : kArchitectures) {
    SCOPED_TRACE(a.name);
    check_step(a.section(), n, 1, 1);  // ep = world, fsdp = world, efsdp 1
    check_step(a.section(), n, 1, 2);  // with accumulation
  }
}

TEST(ExpertParallelMpi, HalfTheRanksWithEfsdp) {
  if (Runtime::get()->world_size() != 4) GTEST_SKIP() << "needs 4 ranks";
  for (const Arch& a : kArchitectures) {
    SCOPED_TRACE(a.name);
    check_step(a.section(), 2, 1, 1);  // ep 2 × efsdp 2, fsdp 4
  }
}

TEST(ExpertParallelMpi, InsideAndAcrossTensorParallel) {
  const int n = Runtime::get()->world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const Arch& a : kArchitectures) {
    SCOPED_TRACE(a.name);
    check_step(a.section(), n, n, 1);  // ep = tp: the ep group is the tp group
    if (n == 4) {
      check_step(a.section(), 2, 4, 1);  // ep < tp: efsdp 2 with no dense fsdp
      check_step(a.section(), 4, 2, 1);  // ep > tp: across two tp groups, fsdp 2
    }
  }
}

// The dispatcher alone, with routing that sends every token copy to the experts of ep rank 0:
// the other ranks receive no rows (their experts run on empty inputs and get zero grads), and
// every rank's output and input grads are those of one process computing its tokens.
TEST(ExpertParallelMpi, RanksThatReceiveNoTokens) {
  const int n = Runtime::get()->world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  auto mesh = mesh_for(n, 1);
  const Json section = ep_qwen3_moe();
  models::BuiltModel plain = models::build_model(section), split = models::build_model(section);
  plain.model->materialize(17);
  split.model->materialize(17);
  ASSERT_EQ(apply_expert_parallel(*split.model, *mesh), 2);
  const int64_t T = 6, D = 16, K = 2, L = 8 / n;
  std::vector<float> xs;
  for (int64_t i = 0; i < T * D; ++i) xs.push_back(static_cast<float>(std::sin(0.37 * static_cast<double>(i + 101 * mesh->rank()))));
  std::vector<int64_t> ids;
  for (int64_t t = 0; t < T; ++t) ids.insert(ids.end(), {t % L, (t + 1) % L});  // experts of ep rank 0 only
  const Tensor indices = Tensor::from_vector(ids, {T, K});
  const Tensor weights = Tensor::from_vector(std::vector<float>{0.7f, 0.3f, 0.6f, 0.4f, 0.5f, 0.5f, 0.9f, 0.1f,
                                                                0.2f, 0.8f, 0.55f, 0.45f}, {T, K});
  struct Result {
    Tensor y, dx;
  };
  auto run = [&](nn::MoELayer& moe) {
    Tensor x = Tensor::from_vector(xs, {T, D});
    x.set_requires_grad(true);
    nn::DispatchedTokens d = moe.token_dispatcher().dispatch(x, indices, weights);
    Tensor y = moe.token_dispatcher().combine(moe.experts().forward(d.tokens, d.tokens_per_expert), d.combine_state);
    autograd::backward(ops::sum(ops::mul(y, y)));
    return Result{y.detach(), x.grad()};
  };
  nn::MoELayer& ep_moe = *split.model->moe_layers()[0];
  nn::MoELayer& one_moe = *plain.model->moe_layers()[0];
  const Result got = run(ep_moe), want = run(one_moe);
  expect_close(got.y, want.y, 1e-6, "y");
  expect_close(got.dx, want.dx, 1e-6, "dx");
  // Expert grads: every rank's tokens, summed; ep ranks other than 0 saw none.
  for (nn::Parameter* p : {&one_moe.experts().weight1(), &one_moe.experts().weight2()}) {
    Tensor sum = p->tensor.grad().contiguous().clone();
    mesh->world().all_reduce(sum);
    const nn::Parameter& mine = p == &one_moe.experts().weight1() ? ep_moe.experts().weight1() : ep_moe.experts().weight2();
    expect_close(mine.tensor.grad(), local_of(sum, mine), 1e-5, "expert grad");
    if (mesh->group("ep").rank() != 0) {
      for (double g : mine.tensor.grad().to_double_vector()) ASSERT_EQ(g, 0.0);
    }
  }
}

ExpertParallelOptions deredundant(int ranks_per_node) {
  return {TokenDispatcher::alltoall_deredundancy, ranks_per_node};
}

// The de-redundant dispatcher trains like one process: nodes of 2 ranks (2 nodes at 4 ranks, one
// at 2), nodes of 1 (every peer across nodes), beside efsdp and inside tp.
TEST(ExpertParallelMpi, DeredundantDispatcherStep) {
  const int n = Runtime::get()->world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  for (const Arch& a : kArchitectures) {
    SCOPED_TRACE(a.name);
    check_step(a.section(), n, 1, 1, deredundant(2));
    check_step(a.section(), n, 1, 2, deredundant(1));
    if (n == 4) {
      check_step(a.section(), 2, 1, 1, deredundant(1));  // ep 2 × efsdp 2: two nodes of one rank
      check_step(a.section(), 4, 2, 1, deredundant(2));  // ep > tp
    }
  }
}

// The de-redundant dispatcher alone against alltoall on the same routing (K = 3, given, not
// routed): outputs, token grads, routing-weight grads and expert grads. Routings: a spread one,
// and one where every token picks several experts of one remote node (all three of them on the
// other node at 4 ranks with nodes of 2), so a row crosses once for several experts.
TEST(ExpertParallelMpi, DeredundantDispatcherMatchesAlltoall) {
  const int n = Runtime::get()->world_size();
  if (n != 2 && n != 4) GTEST_SKIP() << "needs 2 or 4 ranks";
  auto mesh = mesh_for(n, 1);
  const Json section = ep_qwen3_moe();
  const int me = mesh->group("ep").rank();
  const int64_t T = 7, D = 16, K = 3, E = 8;
  std::vector<float> xs, ws;
  for (int64_t i = 0; i < T * D; ++i) xs.push_back(static_cast<float>(std::sin(0.37 * static_cast<double>(i + 101 * me))));
  for (int64_t i = 0; i < T * K; ++i) ws.push_back(static_cast<float>(0.2 + 0.5 * std::fabs(std::cos(0.9 * static_cast<double>(i + 7 * me)))));
  struct Result {
    Tensor y, dx, dw, dw1, dw2;
  };
  auto run = [&](nn::MoELayer& moe, const Tensor& indices) {
    Tensor x = Tensor::from_vector(xs, {T, D}), w = Tensor::from_vector(ws, {T, K});
    x.set_requires_grad(true);
    w.set_requires_grad(true);
    nn::DispatchedTokens d = moe.token_dispatcher().dispatch(x, indices, w);
    Tensor y = moe.token_dispatcher().combine(moe.experts().forward(d.tokens, d.tokens_per_expert), d.combine_state);
    autograd::backward(ops::sum(ops::mul(y, y)));
    return Result{y.detach(), x.grad(), w.grad(), moe.experts().weight1().tensor.grad(),
                  moe.experts().weight2().tensor.grad()};
  };
  const int64_t per_node = 4;  // experts of one node of 2 ranks at 4 ranks (E/ep = 2 per rank)
  std::vector<std::vector<int64_t>> routings(2);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) routings[0].push_back((t * 5 + k * 3 + me) % E);
    const int64_t other_node = n == 4 ? per_node * (1 - me / 2) : 0;
    for (int64_t k = 0; k < K; ++k) routings[1].push_back(other_node + (t + k) % per_node);
  }
  for (int ranks_per_node : {1, 2}) {
    for (const std::vector<int64_t>& ids : routings) {
      SCOPED_TRACE("nodes of " + std::to_string(ranks_per_node) + " ranks, routing " + std::to_string(&ids - routings.data()));
      models::BuiltModel plain = models::build_model(section), dered = models::build_model(section);
      plain.model->materialize(17);
      dered.model->materialize(17);
      ASSERT_EQ(apply_expert_parallel(*plain.model, *mesh), 2);
      ASSERT_EQ(apply_expert_parallel(*dered.model, *mesh, deredundant(ranks_per_node)), 2);
      const Tensor indices = Tensor::from_vector(ids, {T, K});
      const Result want = run(*plain.model->moe_layers()[0], indices);
      const Result got = run(*dered.model->moe_layers()[0], indices);
      expect_close(got.y, want.y, 1e-6, "y");
      expect_close(got.dx, want.dx, 1e-6, "dx");
      expect_close(got.dw, want.dw, 1e-6, "routing-weight grads");
      expect_close(got.dw1, want.dw1, 1e-6, "weight1 grad");
      expect_close(got.dw2, want.dw2, 1e-6, "weight2 grad");
    }
  }
}

TEST(ExpertParallelMpi, PlacementsAndReplicaFactors) {
  const int n = Runtime::get()->world_size();
  if (n != 4) GTEST_SKIP() << "needs 4 ranks";
  auto mesh = mesh_for(2, 1);  // ep 2, efsdp 2, fsdp 4
  models::BuiltModel m = models::build_model(ep_qwen3_moe());
  auto parallel = parallelize(*m.model, mesh, {});
  const nn::Parameter& w2 = m.model->moe_layers()[1]->experts().weight2();
  EXPECT_EQ(w2.global_shape, (Shape{8, 8, 16}));
  EXPECT_EQ(w2.local_shape(), (Shape{2, 8, 16}));  // 8 experts / ep 2 / efsdp 2
  ASSERT_EQ(w2.pieces().size(), 1u);
  EXPECT_EQ(w2.pieces()[0].global_offset[0], mesh->dims().ep_index(mesh->rank()) * 4 +
                                                 mesh->dims().efsdp_index(mesh->rank()) * 2);
  EXPECT_NE(w2.placement.on("efsdp"), nullptr);
  EXPECT_EQ(mesh->replica_factor(w2.placement), 1);
  const nn::Parameter& router = m.model->moe_layers()[1]->router().weight();
  EXPECT_EQ(router.placement.on("ep"), nullptr);
  EXPECT_NE(router.placement.on("fsdp"), nullptr);
  EXPECT_EQ(parallel->backward_scale(), 0.25);
}

}  // namespace
}  // namespace loom::dist
