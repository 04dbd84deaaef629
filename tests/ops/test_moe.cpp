// MoE dispatch: moe_permute (grouping by expert, stable, counts), moe_unpermute (weighted
// combine) and grouped_gemm against naive references, f64 gradcheck, bf16, determinism and
// errors. (DeepSeek-V3's MoE: y = Σ_k w_k · Expert_idx_k(x).)
#include <gtest/gtest.h>

#include "loom/autograd/engine.h"
#include "loom/core/parallel.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/moe.h"
#include "testing/error_message.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::message_of;
using loom::testing::leaf;
using loom::testing::random_f64;

namespace {


Tensor ids_of(const std::vector<int64_t>& v, int64_t t, int64_t k) { return Tensor::from_vector(v, {t, k}); }

}  // namespace

TEST(OpsMoe, PermuteGroupsByExpertStablyAndCounts) {
  // 4 tokens, top-2 over 4 experts (expert 3 gets nothing).
  Tensor x = Tensor::from_vector(std::vector<float>{0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f}, {4, 2});
  Tensor ids = ids_of({2, 0, 0, 1, 2, 1, 0, 2}, 4, 2);
  ops::MoePermutation p = ops::moe_permute(x, ids, 4);
  EXPECT_EQ(p.tokens_per_expert.to_int_vector(), (std::vector<int64_t>{3, 2, 3, 0}));
  EXPECT_EQ(p.tokens_per_expert.dtype(), DType::i64);
  // expert 0: tokens 0, 1, 3; expert 1: tokens 1, 2; expert 2: tokens 0, 2, 3.
  EXPECT_EQ(p.row_map.to_int_vector(), (std::vector<int64_t>{5, 0, 1, 3, 6, 4, 2, 7}));
  EXPECT_EQ(p.permuted.shape(), (Shape{8, 2}));
  std::vector<float> token_of_row = {0, 1, 3, 1, 2, 0, 2, 3};
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(p.permuted.at({r, 0}), token_of_row[r]);
    EXPECT_EQ(p.permuted.at({r, 1}), token_of_row[r] + 0.5f);
  }
}

TEST(OpsMoe, UnpermuteInvertsPermuteWithRoutingWeights) {
  Tensor x = random_f64({6, 5}, 1);
  Tensor ids = ids_of({0, 3, 1, 0, 3, 2, 2, 1, 0, 1, 3, 0}, 6, 2);
  ops::MoePermutation p = ops::moe_permute(x, ids, 4);
  // Weights 1/K: the exact round trip.
  Tensor half = Tensor::full({6, 2}, 0.5, DType::f64);
  std::vector<double> back = ops::moe_unpermute(p.permuted, p.row_map, half).to_double_vector();
  std::vector<double> xv = x.to_double_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_DOUBLE_EQ(back[i], xv[i]);
  // General weights: Σ_k w_k · x[t]; fp32 weights with f64 rows are read as given.
  Tensor w = random_f64({6, 2}, 2, 0, 1);
  std::vector<double> wv = w.to_double_vector(), out = ops::moe_unpermute(p.permuted, p.row_map, w).to_double_vector();
  for (int64_t t = 0; t < 6; ++t)
    for (int64_t d = 0; d < 5; ++d) EXPECT_NEAR(out[t * 5 + d], (wv[t * 2] + wv[t * 2 + 1]) * xv[t * 5 + d], 1e-15);
  // No weights: plain sum.
  std::vector<double> sum = ops::moe_unpermute(p.permuted, p.row_map).to_double_vector();
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_DOUBLE_EQ(sum[i], 2 * xv[i]);
}

TEST(OpsMoe, PipelineMatchesNaiveExperts) {
  // y_t = Σ_k w_tk · x_t · W[e_tk] with W [E, D_in, D_out] (MindFormers experts.weight1 layout).
  const int64_t T = 7, K = 2, E = 3, Din = 4, Dout = 5;
  Tensor x = random_f64({T, Din}, 3), W = random_f64({E, Din, Dout}, 4), w = random_f64({T, K}, 5, 0, 1);
  std::vector<int64_t> idv = {0, 2, 1, 2, 2, 0, 1, 0, 0, 2, 1, 2, 2, 1};
  ops::MoePermutation p = ops::moe_permute(x, ids_of(idv, T, K), E);
  Tensor y = ops::moe_unpermute(ops::grouped_gemm(p.permuted, W, p.tokens_per_expert), p.row_map, w);
  Tensor Wt = W.transpose(1, 2).contiguous();  // [E, Dout, Din]
  Tensor yt = ops::moe_unpermute(ops::grouped_gemm(p.permuted, Wt, p.tokens_per_expert, true), p.row_map, w);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < Dout; ++o) {
      double ref = 0;
      for (int64_t k = 0; k < K; ++k) {
        double dot = 0;
        for (int64_t i = 0; i < Din; ++i) dot += x.at({t, i}) * W.at({idv[t * K + k], i, o});
        ref += w.at({t, k}) * dot;
      }
      EXPECT_NEAR(y.at({t, o}), ref, 1e-13);
      EXPECT_NEAR(yt.at({t, o}), ref, 1e-13);
    }
}

TEST(OpsMoe, GradcheckPermuteUnpermuteAndGroupedGemm) {
  const int64_t T = 5, K = 2, E = 4, Din = 3, Dout = 2;
  Tensor ids = ids_of({1, 3, 0, 1, 3, 1, 0, 3, 1, 0}, T, K);  // expert 2 is empty
  Tensor x = leaf({T, Din}, 6), W = leaf({E, Din, Dout}, 7), Wt = leaf({E, Dout, Din}, 8), w = leaf({T, K}, 9, 0, 1);
  EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::moe_permute(in[0], ids, E).permuted}; }, {x}), 1e-6);
  ops::MoePermutation p = ops::moe_permute(x.detach(), ids, E);
  Tensor y = leaf({T * K, Dout}, 10);
  EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::moe_unpermute(in[0], p.row_map, in[1])}; }, {y, w}), 1e-6);
  Tensor xp = leaf({T * K, Din}, 11);
  EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::grouped_gemm(in[0], in[1], p.tokens_per_expert)}; }, {xp, W}), 1e-6);
  EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::grouped_gemm(in[0], in[1], p.tokens_per_expert, true)}; }, {xp, Wt}), 1e-6);
  // The whole routed expert layer: x → permute → W1 → silu → W2 → weighted combine.
  Tensor W2 = leaf({E, Dout, Din}, 12);
  EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) {
              ops::MoePermutation q = ops::moe_permute(in[0], ids, E);
              Tensor h = ops::silu(ops::grouped_gemm(q.permuted, in[1], q.tokens_per_expert));
              return std::vector<Tensor>{ops::moe_unpermute(ops::grouped_gemm(h, in[2], q.tokens_per_expert), q.row_map, in[3])};
            }, {x, W, W2, w}), 1e-6);
}

TEST(OpsMoe, EmptyExpertGetsZeroWeightGrad) {
  Tensor ids = ids_of({0, 0, 2, 2}, 4, 1);
  Tensor x = random_f64({4, 3}, 13), W = random_f64({3, 3, 2}, 14);
  W.set_requires_grad(true);
  ops::MoePermutation p = ops::moe_permute(x, ids, 3);
  EXPECT_EQ(p.tokens_per_expert.to_int_vector(), (std::vector<int64_t>{2, 0, 2}));
  autograd::backward(ops::grouped_gemm(p.permuted, W, p.tokens_per_expert), Tensor::ones({4, 2}, DType::f64));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t o = 0; o < 2; ++o) EXPECT_EQ(W.grad().at({1, i, o}), 0.0);
  EXPECT_NE(W.grad().at({0, 0, 0}), 0.0);
}

TEST(OpsMoe, Bf16ComputesInFp32AndRoundsOnce) {
  const int64_t T = 16, K = 2, E = 4, Din = 24, Dout = 8;
  Tensor x = random_f64({T, Din}, 15).to(DType::bf16), W = random_f64({E, Din, Dout}, 16).to(DType::bf16);
  std::vector<int64_t> idv(T * K);
  for (int64_t i = 0; i < T * K; ++i) idv[i] = (i * 7 + i / 3) % E;
  ops::MoePermutation p = ops::moe_permute(x, ids_of(idv, T, K), E);
  Tensor h = ops::grouped_gemm(p.permuted, W, p.tokens_per_expert);
  EXPECT_EQ(h.dtype(), DType::bf16);
  std::vector<float> h32 = ops::grouped_gemm(p.permuted.to(DType::f32), W.to(DType::f32), p.tokens_per_expert).to_float_vector();
  std::vector<float> hb = h.to_float_vector();
  for (size_t i = 0; i < hb.size(); ++i) ASSERT_EQ(hb[i], round_to_bf16(h32[i])) << i;
  // bf16 expert outputs with fp32 routing weights: fp32 sum, one rounding.
  Tensor w = random_f64({T, K}, 17, 0, 1).to(DType::f32);
  std::vector<float> y = ops::moe_unpermute(h, p.row_map, w).to_float_vector();
  std::vector<float> hv = h.to_float_vector(), wv = w.to_float_vector();
  std::vector<int64_t> map = p.row_map.to_int_vector();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t o = 0; o < Dout; ++o) {
      float ref = 0;
      for (int64_t k = 0; k < K; ++k) ref += wv[t * K + k] * hv[map[t * K + k] * Dout + o];
      ASSERT_EQ(y[t * Dout + o], round_to_bf16(ref));
    }
  // Weight grads of bf16 experts are fp32 main grads.
  Tensor Wl = W.clone();
  Wl.set_requires_grad(true);
  autograd::backward(ops::grouped_gemm(p.permuted, Wl, p.tokens_per_expert), Tensor::ones({T * K, Dout}, DType::bf16));
  EXPECT_EQ(Wl.grad().dtype(), DType::f32);
}

TEST(OpsMoe, ResultsIndependentOfThreadCount) {
  const int64_t T = 64, K = 4, E = 8, D = 32, F = 16;
  Tensor x = random_f64({T, D}, 18).to(DType::f32), W = random_f64({E, D, F}, 19).to(DType::f32);
  Tensor w = random_f64({T, K}, 20).to(DType::f32);
  std::vector<int64_t> idv(T * K);
  for (int64_t i = 0; i < T * K; ++i) idv[i] = (i * 5 + i / 7) % E;
  auto run = [&](int threads) {
    set_num_threads(threads);
    Tensor xl = x.clone(), Wl = W.clone(), wl = w.clone();
    for (Tensor* t : {&xl, &Wl, &wl}) t->set_requires_grad(true);
    ops::MoePermutation p = ops::moe_permute(xl, ids_of(idv, T, K), E);
    Tensor y = ops::moe_unpermute(ops::grouped_gemm(p.permuted, Wl, p.tokens_per_expert), p.row_map, wl);
    autograd::backward(y, Tensor::ones({T, F}));
    return std::vector<std::vector<float>>{y.to_float_vector(), xl.grad().to_float_vector(),
                                           Wl.grad().to_float_vector(), wl.grad().to_float_vector()};
  };
  const int before = num_threads();
  auto one = run(1), two = run(2);
  set_num_threads(before);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], two[i]) << i;
}

TEST(OpsMoe, ErrorsNamePositionsAndCounts) {
  Tensor x = Tensor::zeros({3, 4});
  std::string m = message_of([&] { ops::moe_permute(x, ids_of({0, 1, 2, 5, 1, 0}, 3, 2), 4); });
  EXPECT_NE(m.find("moe_permute: expert_ids[1, 1] = 5 is outside [0, 4)"), std::string::npos) << m;
  m = message_of([&] { ops::moe_permute(x, ids_of({0, 1}, 2, 1), 4); });
  EXPECT_NE(m.find("moe_permute: expert_ids [2, 1] must be [tokens, top_k] with the 3 tokens of x [3, 4]"), std::string::npos) << m;
  EXPECT_THROW(ops::moe_permute(x, Tensor::zeros({3, 1}), 2), DTypeError);
  Tensor W = Tensor::zeros({2, 4, 3});
  m = message_of([&] { ops::grouped_gemm(x, W, Tensor::from_vector(std::vector<int64_t>{1, 1}, {2})); });
  EXPECT_NE(m.find("grouped_gemm: tokens_per_expert sums to 2 but x has 3 rows"), std::string::npos) << m;
  m = message_of([&] { ops::grouped_gemm(x, Tensor::zeros({2, 5, 3}), Tensor::from_vector(std::vector<int64_t>{1, 2}, {2})); });
  EXPECT_NE(m.find("grouped_gemm: x [3, 4] has 4 input features but w [2, 5, 3] expects 5"), std::string::npos) << m;
  m = message_of([&] { ops::grouped_gemm(x, W, Tensor::from_vector(std::vector<int64_t>{1, 1, 1}, {3})); });
  EXPECT_NE(m.find("tokens_per_expert [3] must have one count per expert"), std::string::npos) << m;
  m = message_of([&] { ops::moe_unpermute(Tensor::zeros({4, 2}), ids_of({0, 1, 9, 3}, 2, 2)); });
  EXPECT_NE(m.find("moe_unpermute: row_map[1, 0] = 9 is outside the 4 permuted rows"), std::string::npos) << m;
  m = message_of([&] { ops::moe_unpermute(Tensor::zeros({4, 2}), ids_of({0, 1, 1, 3}, 2, 2)); });
  EXPECT_NE(m.find("row_map sends two (token, slot) pairs to permuted row 1"), std::string::npos) << m;
}
