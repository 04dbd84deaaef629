// MoE router and layer invariants (DeepSeek-V3's Gate, HF Qwen3-MoE's router): k distinct
// experts per token, the group limit, normalised and scaled weights, the expert bias steering
// selection but never the weights, the aux-loss-free update rule, balance-loss values on a
// hand-computed case, their injected gradient, token counts that recompute does not double; the
// forward as route → dispatch → expert compute → combine, and expert parallelism attaching by
// wrapping dispatch and combine from outside.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "loom/autograd/checkpoint.h"
#include "loom/nn/moe.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/moe.h"
#include "loom/ops/reduce.h"
#include "loom/ops/shape.h"
#include "nn_test_util.h"
#include "testing/gradcheck.h"

using namespace loom;
using namespace loom::nn;
using loom::testing::gradcheck;
using loom::testing::leaf;
using loom::testing::parameters_of;
using loom::testing::random_f64;
using loom::testing::tiny_f64_config;

namespace {

TransformerConfig moe_config(int64_t experts, int64_t topk) {
  auto c = tiny_f64_config();
  c.num_experts = experts;
  c.moe_topk = topk;
  c.moe_intermediate_size = 3;
  return c;
}

// Router scores s = score_fn(x Wᵀ) computed here independently.
std::vector<double> scores_of(const Tensor& x, const Tensor& w, ScoreFunction f) {
  std::vector<double> xv = x.to_double_vector(), wv = w.to_double_vector();
  const int64_t E = w.size(0), D = w.size(1), T = x.numel() / D;
  std::vector<double> s(static_cast<size_t>(T * E));
  for (int64_t t = 0; t < T; ++t) {
    double mx = -1e300;
    for (int64_t e = 0; e < E; ++e) {
      double l = 0;
      for (int64_t d = 0; d < D; ++d) l += xv[t * D + d] * wv[e * D + d];
      s[t * E + e] = l;
      mx = std::max(mx, l);
    }
    if (f == ScoreFunction::sigmoid) {
      for (int64_t e = 0; e < E; ++e) s[t * E + e] = 1 / (1 + std::exp(-s[t * E + e]));
    } else {
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += std::exp(s[t * E + e] - mx);
      for (int64_t e = 0; e < E; ++e) s[t * E + e] = std::exp(s[t * E + e] - mx) / z;
    }
  }
  return s;
}

}  // namespace

TEST(NnMoe, KDistinctExpertsPerTokenAndNormalisedScaledWeights) {
  auto c = moe_config(8, 3);
  c.score_function = ScoreFunction::sigmoid;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  TopKRouter router(c);
  router.materialize(1);
  Tensor x = random_f64({2, 5, 8}, 2);
  Routing r = router.route(x);
  ASSERT_EQ(r.indices.shape(), Shape({10, 3}));
  std::vector<int64_t> idx = r.indices.to_int_vector();
  std::vector<double> w = r.weights.to_double_vector();
  std::vector<double> s = scores_of(x, router.weight().tensor, ScoreFunction::sigmoid);
  for (int64_t t = 0; t < 10; ++t) {
    std::set<int64_t> chosen(idx.begin() + t * 3, idx.begin() + t * 3 + 3);
    EXPECT_EQ(chosen.size(), 3u);
    double sum = 0, chosen_sum = 0;
    for (int k = 0; k < 3; ++k) {
      sum += w[t * 3 + k];
      chosen_sum += s[t * 8 + idx[t * 3 + k]];
    }
    EXPECT_NEAR(sum, 2.5, 1e-12);  // normalised, then × routed_scaling_factor
    for (int k = 0; k < 3; ++k) EXPECT_NEAR(w[t * 3 + k], s[t * 8 + idx[t * 3 + k]] / chosen_sum * 2.5, 1e-12);
    // Top-k of the scores: every unchosen expert scores no higher than the weakest chosen one.
    double weakest = 1e9;
    for (int k = 0; k < 3; ++k) weakest = std::min(weakest, s[t * 8 + idx[t * 3 + k]]);
    for (int64_t e = 0; e < 8; ++e)
      if (!chosen.count(e)) {
        EXPECT_LE(s[t * 8 + e], weakest);
      }
  }
  // Softmax router without renormalisation (Qwen3-MoE norm_topk_prob false): w = softmax score.
  c.score_function = ScoreFunction::softmax;
  c.norm_topk_prob = false;
  c.routed_scaling_factor = 1.0;
  TopKRouter soft(c);
  soft.materialize(1);
  Routing rs = soft.route(x);
  std::vector<double> ss = scores_of(x, soft.weight().tensor, ScoreFunction::softmax);
  std::vector<int64_t> is = rs.indices.to_int_vector();
  EXPECT_NEAR(rs.weights.to_double_vector()[0], ss[is[0]], 1e-12);
}

TEST(NnMoe, GroupLimitedRoutingKeepsTheBestGroups) {
  auto c = moe_config(8, 2);
  c.score_function = ScoreFunction::sigmoid;
  c.moe_router_num_groups = 4;  // groups {0,1} {2,3} {4,5} {6,7}
  c.moe_router_group_topk = 2;
  TopKRouter router(c);
  router.materialize(3);
  Tensor x = random_f64({4, 8, 8}, 4, -2, 2);
  Routing r = router.route(x);
  std::vector<int64_t> idx = r.indices.to_int_vector();
  std::vector<double> s = scores_of(x, router.weight().tensor, ScoreFunction::sigmoid);
  int limited = 0;
  for (int64_t t = 0; t < 32; ++t) {
    // Group score = sum of its two experts' scores; the two best groups are allowed.
    std::vector<std::pair<double, int>> g;
    for (int gi = 0; gi < 4; ++gi) g.push_back({-(s[t * 8 + 2 * gi] + s[t * 8 + 2 * gi + 1]), gi});
    std::sort(g.begin(), g.end());
    std::set<int> allowed{g[0].second, g[1].second};
    std::vector<std::pair<double, int64_t>> cand;
    for (int64_t e = 0; e < 8; ++e)
      if (allowed.count(static_cast<int>(e / 2))) cand.push_back({-s[t * 8 + e], e});
    std::sort(cand.begin(), cand.end());
    std::set<int64_t> expect{cand[0].second, cand[1].second};
    std::set<int64_t> got{idx[t * 2], idx[t * 2 + 1]};
    EXPECT_EQ(got, expect) << "token " << t;
    // Count tokens where the unrestricted top-2 would have left the allowed groups.
    std::vector<std::pair<double, int64_t>> all;
    for (int64_t e = 0; e < 8; ++e) all.push_back({-s[t * 8 + e], e});
    std::sort(all.begin(), all.end());
    if (!allowed.count(static_cast<int>(all[0].second / 2)) || !allowed.count(static_cast<int>(all[1].second / 2)))
      ++limited;
  }
  EXPECT_GT(limited, 0) << "the data should exercise the group limit";
}

// Where transformers and DeepSeek's reference disagree (docs/models.md): dropped groups are
// masked with −inf, so with every biased choice negative (a 0 mask would pick the dropped groups'
// experts) the choice still stays inside the kept groups.
TEST(NnMoe, DroppedGroupsStayDroppedWhenBiasedChoicesAreNegative) {
  auto c = moe_config(8, 2);
  c.score_function = ScoreFunction::sigmoid;
  c.moe_router_num_groups = 4;  // groups {0,1} {2,3} {4,5} {6,7}
  c.moe_router_group_topk = 2;
  c.moe_router_enable_expert_bias = true;
  TopKRouter router(c);
  router.materialize(3);
  router.expert_bias().copy_(Tensor::from_vector(std::vector<float>(8, -3.0f), {8}));  // choices in (-3, -2)
  Tensor x = random_f64({2, 8, 8}, 4, -2, 2);
  std::vector<int64_t> idx = router.route(x).indices.to_int_vector();
  std::vector<double> s = scores_of(x, router.weight().tensor, ScoreFunction::sigmoid);
  for (int64_t t = 0; t < 16; ++t) {
    std::vector<std::pair<double, int>> g;  // group score: the sum of its two biased choices
    for (int gi = 0; gi < 4; ++gi) g.push_back({-(s[t * 8 + 2 * gi] + s[t * 8 + 2 * gi + 1] - 6.0), gi});
    std::sort(g.begin(), g.end());
    const std::set<int> kept{g[0].second, g[1].second};
    for (int k = 0; k < 2; ++k)
      EXPECT_TRUE(kept.count(static_cast<int>(idx[t * 2 + k] / 2))) << "token " << t << " chose expert "
                                                                     << idx[t * 2 + k] << " of a dropped group";
  }
}

// Top-1 with norm_topk_prob renormalises too (transformers): the one weight is 1 · routed_scaling_factor.
TEST(NnMoe, TopOneWithNormTopkProbRenormalises) {
  auto c = moe_config(4, 1);
  c.score_function = ScoreFunction::sigmoid;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  TopKRouter router(c);
  router.materialize(1);
  Tensor x = random_f64({1, 5, 8}, 2);
  for (double w : router.route(x).weights.to_double_vector()) EXPECT_NEAR(w, 2.5, 1e-12);
  c.norm_topk_prob = false;  // without it: the score itself
  TopKRouter plain(c);
  plain.materialize(1);
  Routing r = plain.route(x);
  std::vector<double> s = scores_of(x, plain.weight().tensor, ScoreFunction::sigmoid);
  std::vector<int64_t> idx = r.indices.to_int_vector();
  std::vector<double> w = r.weights.to_double_vector();
  for (int64_t t = 0; t < 5; ++t) EXPECT_NEAR(w[t], 2.5 * s[t * 4 + idx[t]], 1e-12);
}

TEST(NnMoe, ExpertBiasSteersSelectionButNeverTheWeights) {
  auto c = moe_config(4, 2);
  c.score_function = ScoreFunction::sigmoid;
  c.moe_router_enable_expert_bias = true;
  c.norm_topk_prob = false;
  TopKRouter router(c);
  router.materialize(5);
  EXPECT_EQ(router.expert_bias().shape(), Shape({4}));
  EXPECT_EQ(router.expert_bias().to_double_vector(), std::vector<double>(4, 0.0));
  Tensor x = random_f64({1, 6, 8}, 6);
  std::vector<double> s = scores_of(x, router.weight().tensor, ScoreFunction::sigmoid);
  router.expert_bias().copy_(Tensor::from_vector(std::vector<float>{0, 0, 0, 10}, {4}));
  Routing r = router.route(x);
  std::vector<int64_t> idx = r.indices.to_int_vector();
  std::vector<double> w = r.weights.to_double_vector();
  for (int64_t t = 0; t < 6; ++t) {
    EXPECT_EQ(idx[t * 2], 3);  // the bias makes expert 3 everyone's first choice
    EXPECT_NEAR(w[t * 2], s[t * 4 + 3], 1e-12);  // ... but its weight is the unbiased score
    EXPECT_NEAR(w[t * 2 + 1], s[t * 4 + idx[t * 2 + 1]], 1e-12);
  }
  // Aux-loss-free update: b_i += u·sign(mean(c) − c_i), u = moe_router_bias_update_rate.
  router.expert_bias().zero_();
  router.update_expert_bias(Tensor::from_vector(std::vector<int64_t>{5, 1, 3, 3}, {4}));
  std::vector<double> b = router.expert_bias().to_double_vector();
  EXPECT_NEAR(b[0], -1e-3, 1e-9);
  EXPECT_NEAR(b[1], 1e-3, 1e-9);
  EXPECT_EQ(b[2], 0.0);
  EXPECT_EQ(b[3], 0.0);
  // Counts of this process: 6 tokens × 2 slots, expert 3 in every token.
  EXPECT_EQ(router.tokens_per_expert().to_int_vector()[3], 6);
  int64_t total = 0;
  for (int64_t v : router.tokens_per_expert().to_int_vector()) total += v;
  EXPECT_EQ(total, 12);
}

TEST(NnMoe, BalanceLossValuesOnAHandComputedCase) {
  // Uniform router (zero weight): p = 1/E and ties pick experts 0 and 1 for every token, so
  // c = [T, T, 0, 0] and aux = α·E/(K·T²)·Σ_i c_i·Σ_t p_ti = α·4/(2·T²)·2·T·T/4 = α.
  auto c = moe_config(4, 2);
  c.moe_load_balancing_types = {"aux_loss"};
  c.moe_aux_loss_coeffs = {0.01};
  TopKRouter router(c);
  router.materialize(7);
  router.weight().tensor.zero_();
  Tensor x = random_f64({2, 3, 8}, 8);
  EXPECT_NEAR(router.route(x).aux_loss.item(), 0.01, 1e-15);
  c.moe_load_balancing_types = {"seq_aux_loss"};
  TopKRouter seq_router(c);
  seq_router.materialize(7);
  seq_router.weight().tensor.zero_();
  EXPECT_NEAR(seq_router.route(x).aux_loss.item(), 0.01, 1e-15);

  // A non-uniform case against the formulas written out here.
  c.moe_load_balancing_types = {"aux_loss", "seq_aux_loss"};
  c.moe_aux_loss_coeffs = {0.1, 0.3};
  c.score_function = ScoreFunction::sigmoid;
  TopKRouter both(c);
  both.materialize(9);
  Tensor x2 = random_f64({2, 3, 8}, 10, -2, 2);
  Routing r = both.route(x2);
  std::vector<double> s = scores_of(x2, both.weight().tensor, ScoreFunction::sigmoid);
  std::vector<int64_t> idx = r.indices.to_int_vector();
  for (int64_t t = 0; t < 6; ++t) {  // sigmoid scores are normalised per token for the loss
    double z = 0;
    for (int e = 0; e < 4; ++e) z += s[t * 4 + e];
    for (int e = 0; e < 4; ++e) s[t * 4 + e] /= z;
  }
  double aux = 0;
  for (int e = 0; e < 4; ++e) {
    double ce = 0, pe = 0;
    for (int64_t t = 0; t < 6; ++t) {
      pe += s[t * 4 + e];
      ce += (idx[t * 2] == e) + (idx[t * 2 + 1] == e);
    }
    aux += ce * pe;
  }
  aux *= 0.1 * 4 / (2.0 * 36);
  double seq = 0;
  for (int b = 0; b < 2; ++b)
    for (int e = 0; e < 4; ++e) {
      double ce = 0, pe = 0;
      for (int64_t t = b * 3; t < b * 3 + 3; ++t) {
        pe += s[t * 4 + e];
        ce += (idx[t * 2] == e) + (idx[t * 2 + 1] == e);
      }
      seq += ce * pe * 4 / (2.0 * 9) / 2;
    }
  EXPECT_NEAR(r.aux_loss.item(), aux + 0.3 * seq, 1e-14);
}

TEST(NnMoe, GbsAuxLossUsesTheStepMeanCounts) {
  auto c = moe_config(4, 1);
  c.moe_load_balancing_types = {"gbs_aux_loss"};
  c.moe_aux_loss_coeffs = {1.0};
  TopKRouter router(c);
  router.materialize(11);
  router.weight().tensor.zero_();  // uniform p, ties → expert 0 for every token
  Tensor x = random_f64({1, 4, 8}, 12);
  // Micro-batch 1: c = [4,0,0,0]; aux = E/(K·T²)·4·(T/E) = 1.
  EXPECT_NEAR(router.route(x).aux_loss.item(), 1.0, 1e-15);
  // Micro-batch 2: still all on expert 0, mean counts [4,0,0,0] → 1 again.
  EXPECT_NEAR(router.route(x).aux_loss.item(), 1.0, 1e-15);
  router.reset_tokens_per_expert();
  EXPECT_EQ(router.tokens_per_expert().to_int_vector(), (std::vector<int64_t>{0, 0, 0, 0}));
}

TEST(NnMoe, LayerGradchecksWithSharedExpertsAndGroups) {
  auto c = moe_config(4, 2);
  c.score_function = ScoreFunction::sigmoid;
  c.moe_router_num_groups = 2;
  c.moe_router_group_topk = 1;
  c.routed_scaling_factor = 1.5;
  c.moe_router_enable_expert_bias = true;
  c.shared_expert_intermediate_size = 4;
  MoELayer moe(c);
  std::vector<std::string> names;
  for (auto& [n, p] : moe.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"router.weight", "experts.weight1", "experts.weight2",
                                             "shared_experts.linear_fc1.weight", "shared_experts.linear_fc2.weight"}));
  EXPECT_EQ(moe.find_parameter("experts.weight1")->global_shape, Shape({4, 8, 6}));
  EXPECT_EQ(moe.find_parameter("experts.weight2")->global_shape, Shape({4, 3, 8}));
  moe.materialize(13);
  std::vector<Tensor> inputs{leaf({2, 3, 8}, 14)};
  for (const Tensor& p : parameters_of(moe)) inputs.push_back(p);
  EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{moe.forward(in[0])}; }, inputs,
                      1e-5),
            1e-5);  // |L| ≈ 10 here: roundoff alone is ~1e-9 absolute at the 1e-3 denominator floor
}

TEST(NnMoe, BalanceLossGradientIsInjectedNotAddedToTheOutput) {
  auto c = moe_config(4, 2);
  c.moe_load_balancing_types = {"seq_aux_loss"};
  c.moe_aux_loss_coeffs = {0.5};
  MoELayer moe(c);
  moe.materialize(15);
  const double scale = 0.75;
  moe.router().set_aux_loss_grad_scale(scale);
  Tensor x = random_f64({2, 3, 8}, 16);
  Tensor R = random_f64({2, 3, 8}, 17);
  auto objective = [&]() {  // Σ y·R + scale·aux, the quantity backward(Σ y·R) differentiates
    autograd::NoGradGuard ng;
    Tensor y = moe.forward(x);
    double v = 0;
    std::vector<double> yv = y.to_double_vector(), rv = R.to_double_vector();
    for (size_t i = 0; i < yv.size(); ++i) v += yv[i] * rv[i];
    return v + scale * moe.last_aux_loss().item();
  };
  Tensor w = moe.router().weight().tensor;
  w.set_grad(Tensor());
  Tensor y = moe.forward(x);
  // The output itself carries no aux term: same values as a forward with coefficient 0.
  MoELayer plain(moe_config(4, 2));
  plain.load_state_dict(moe.state_dict());
  EXPECT_EQ(plain.forward(x).to_double_vector(), y.to_double_vector());
  autograd::backward(ops::sum(ops::mul(y, R)));
  std::vector<double> analytic = w.grad().to_double_vector();
  double* pw = w.data<double>();
  for (int64_t i = 0; i < w.numel(); ++i) {
    const double orig = pw[i];
    pw[i] = orig + 1e-6;
    const double lp = objective();
    pw[i] = orig - 1e-6;
    const double lm = objective();
    pw[i] = orig;
    EXPECT_NEAR(analytic[i], (lp - lm) / 2e-6, 1e-6 * std::max(1.0, std::abs(analytic[i]))) << i;
  }
}

TEST(NnMoe, RecomputedForwardDoesNotCountTokensTwice) {
  auto c = moe_config(4, 2);
  MoELayer moe(c);
  moe.materialize(19);
  Tensor x = leaf({1, 4, 8}, 20);
  auto out = autograd::checkpoint([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{moe.forward(in[0])}; },
                                  {x});
  autograd::backward(ops::sum(out[0]));
  int64_t total = 0;
  for (int64_t v : moe.router().tokens_per_expert().to_int_vector()) total += v;
  EXPECT_EQ(total, 4 * 2);
  EXPECT_TRUE(x.grad().defined());
}

TEST(NnMoe, ForwardIsRouteDispatchComputeCombineBitForBit) {
  auto c = moe_config(4, 2);
  c.shared_expert_intermediate_size = 4;
  MoELayer moe(c);
  Module* dispatcher = moe.find_module("token_dispatcher");
  ASSERT_EQ(dispatcher, &moe.token_dispatcher());
  EXPECT_EQ(dispatcher->type_name(), "MoETokenDispatcher");
  EXPECT_TRUE(dispatcher->named_parameters().empty());
  EXPECT_EQ(dispatcher->operation_names(), (std::vector<std::string>{"dispatch", "combine"}));
  moe.materialize(81);
  Tensor x = random_f64({2, 3, 8}, 82);
  autograd::NoGradGuard ng;
  const std::vector<double> got = moe.forward(x).to_double_vector();
  // The same four steps spelled out with the ops.
  Routing r = moe.router().route(x);
  Tensor xt = x.reshape({6, 8});
  ops::MoePermutation p = ops::moe_permute(xt, r.indices, 4);
  Tensor h = ops::grouped_gemm(p.permuted, moe.experts().weight1().tensor, p.tokens_per_expert);
  Tensor e = ops::grouped_gemm(mlp_activation(h, c.activation, true), moe.experts().weight2().tensor,
                               p.tokens_per_expert);
  Tensor shared = static_cast<MLP*>(moe.find_module("shared_experts"))->forward(xt);
  EXPECT_EQ(got, ops::add(ops::moe_unpermute(e, p.row_map, r.weights), shared).to_double_vector());
}

namespace {

// Makes `moe` what expert-parallel rank `rank` of `ranks` would run, in one process: `experts`
// holds only its E/ranks experts' weights, dispatch keeps the rows of those experts (the
// all-to-all would bring the other ranks' rows for them too) and carries where they sit in the
// combine state, combine puts zero rows back for the other experts (whose outputs would come back
// from the ranks that own them). The MoE layer itself is unchanged.
void attach_local_experts(MoELayer& moe, MoELayer& full, int64_t rank, int64_t ranks) {
  const int64_t local = full.experts().weight1().global_shape[0] / ranks, first = rank * local;
  for (Parameter* p : {&moe.experts().weight1(), &moe.experts().weight2()}) {
    const Parameter* f = p == &moe.experts().weight1() ? &full.experts().weight1() : &full.experts().weight2();
    p->tensor = f->tensor.detach().narrow(0, first, local).clone();
    p->tensor.set_requires_grad(true);
  }
  moe.token_dispatcher().add_operation_wrapper(
      "dispatch", [first, local](const TensorFn& inner, const std::vector<Tensor>& in) {
        std::vector<Tensor> out = inner(in);
        const std::vector<int64_t> counts = out[1].to_int_vector();
        int64_t begin = 0, rows = 0;
        for (int64_t e = 0; e < first; ++e) begin += counts[e];
        for (int64_t e = first; e < first + local; ++e) rows += counts[e];
        std::vector<Tensor> mine{ops::narrow(out[0], 0, begin, rows), out[1].narrow(0, first, local).contiguous()};
        mine.insert(mine.end(), out.begin() + 2, out.end());
        mine.push_back(Tensor::from_vector(std::vector<int64_t>{begin, rows, out[0].size(0)}, {3}));
        return mine;
      });
  moe.token_dispatcher().add_operation_wrapper("combine", [](const TensorFn& inner, const std::vector<Tensor>& in) {
    const std::vector<int64_t> where = in.back().to_int_vector();  // begin, rows, all rows
    const Tensor& y = in[0];
    std::vector<Tensor> pieces;
    if (where[0] > 0) pieces.push_back(Tensor::zeros({where[0], y.size(1)}, y.dtype()));
    pieces.push_back(y);
    if (where[2] > where[0] + where[1])
      pieces.push_back(Tensor::zeros({where[2] - where[0] - where[1], y.size(1)}, y.dtype()));
    std::vector<Tensor> args{ops::cat(pieces, 0)};
    args.insert(args.end(), in.begin() + 1, in.end() - 1);
    return inner(args);
  });
}

}  // namespace

TEST(NnMoe, ExpertParallelAttachesByWrappingDispatchAndCombine) {
  // dist/expert_parallel.h: EP wraps dispatch/combine, expert compute runs on the local experts
  // only. Two simulated ranks holding experts {0,1} and {2,3}: their outputs add up to the full
  // layer's and their grads are the full layer's (expert weights: the local slice; router, input:
  // summed).
  auto c = moe_config(4, 2);
  MoELayer full(c);
  full.materialize(91);
  Tensor x = random_f64({2, 4, 8}, 92), R = random_f64({2, 4, 8}, 93);
  {
    autograd::NoGradGuard ng;
    std::vector<int64_t> idx = full.router().route(x).indices.to_int_vector();
    const auto low = std::count_if(idx.begin(), idx.end(), [](int64_t e) { return e < 2; });
    ASSERT_GT(low, 0);  // both simulated ranks get rows
    ASSERT_LT(low, static_cast<int64_t>(idx.size()));
  }
  auto run = [&](MoELayer& m, Tensor* input_grad) {
    Tensor xi = x.clone();
    xi.set_requires_grad(true);
    Tensor y = m.forward(xi);
    autograd::backward(ops::sum(ops::mul(y, R)));
    *input_grad = xi.grad();
    return y.detach();
  };
  Tensor full_dx;
  const std::vector<double> want = run(full, &full_dx).to_double_vector();
  std::vector<double> sum(want.size(), 0.0), router_grad(full.router().weight().tensor.numel(), 0.0),
      dx(full_dx.numel(), 0.0);
  for (int64_t rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    MoELayer shard(c);
    shard.load_state_dict(full.state_dict());
    attach_local_experts(shard, full, rank, 2);
    Tensor shard_dx;
    std::vector<double> part = run(shard, &shard_dx).to_double_vector();
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
    std::vector<double> g = shard.router().weight().tensor.grad().to_double_vector(), gx = shard_dx.to_double_vector();
    for (size_t i = 0; i < g.size(); ++i) router_grad[i] += g[i];
    for (size_t i = 0; i < gx.size(); ++i) dx[i] += gx[i];
    for (const char* w : {"weight1", "weight2"}) {
      std::vector<double> local = shard.experts().find_parameter(w)->tensor.grad().to_double_vector();
      std::vector<double> slice =
          full.experts().find_parameter(w)->tensor.grad().narrow(0, 2 * rank, 2).contiguous().to_double_vector();
      ASSERT_EQ(local.size(), slice.size());
      for (size_t i = 0; i < local.size(); ++i) EXPECT_NEAR(local[i], slice[i], 1e-12) << w << " " << i;
    }
  }
  for (size_t i = 0; i < sum.size(); ++i) EXPECT_NEAR(sum[i], want[i], 1e-12) << i;
  std::vector<double> full_router = full.router().weight().tensor.grad().to_double_vector(), full_x = full_dx.to_double_vector();
  for (size_t i = 0; i < full_router.size(); ++i) EXPECT_NEAR(router_grad[i], full_router[i], 1e-12) << i;
  for (size_t i = 0; i < full_x.size(); ++i) EXPECT_NEAR(dx[i], full_x[i], 1e-12) << i;

  // Experts holding two experts cannot take counts for four (a dispatch that forgot to localise).
  MoELayer unwrapped(c);
  unwrapped.load_state_dict(full.state_dict());
  for (const char* w : {"weight1", "weight2"}) {
    Parameter* p = unwrapped.experts().find_parameter(w);
    p->tensor = full.experts().find_parameter(w)->tensor.detach().narrow(0, 0, 2).clone();
  }
  autograd::NoGradGuard ng;
  try {
    unwrapped.forward(x);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("must have one count per expert"), std::string::npos) << e.what();
  }
}
