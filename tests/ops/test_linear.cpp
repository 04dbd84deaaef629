// linear / matmul / bmm against naive triple loops, grads against finite differences; bf16 within
// tolerance.
#include <gtest/gtest.h>

#include "loom/ops/linear.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::leaf;
using loom::testing::random_f64;

namespace {
// y[m][n] = Σ_k x[m][k] w[n][k] + b[n]
std::vector<double> naive_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t K = w.shape()[1], N = w.shape()[0], M = x.numel() / K;
  auto xv = x.to_double_vector(), wv = w.to_double_vector();
  std::vector<double> bv = b.defined() ? b.to_double_vector() : std::vector<double>(N, 0.0);
  std::vector<double> y(M * N);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = bv[n];
      for (int64_t k = 0; k < K; ++k) acc += xv[m * K + k] * wv[n * K + k];
      y[m * N + n] = acc;
    }
  return y;
}
}  // namespace

TEST(OpsLinear, ForwardMatchesNaive) {
  Tensor x = random_f64({2, 3, 5}, 1), w = random_f64({4, 5}, 2), b = random_f64({4}, 3);
  Tensor y = ops::linear(x, w, b);
  EXPECT_EQ(y.shape(), Shape({2, 3, 4}));
  auto want = naive_linear(x, w, b);
  auto got = y.to_double_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12);
  // a transposed (non-contiguous) input gives the same answer
  Tensor xt = random_f64({5, 6}, 4).transpose(0, 1);
  auto got_t = ops::linear(xt, w).to_double_vector();
  auto want_t = naive_linear(xt.contiguous(), w, Tensor());
  for (size_t i = 0; i < want_t.size(); ++i) EXPECT_NEAR(got_t[i], want_t[i], 1e-12);
}

TEST(OpsLinear, Gradcheck) {
  Tensor x = leaf({2, 3, 5}, 5), w = leaf({4, 5}, 6), b = leaf({4}, 7);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::linear(in[0], in[1], in[2])}; }, {x, w, b}), 1e-6);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::linear(in[0], in[1])}; }, {x, w}), 1e-6);
}

TEST(OpsLinear, MatmulAndBmmGradcheck) {
  Tensor a = leaf({2, 3, 4}, 8), b2 = leaf({4, 5}, 9), b3 = leaf({2, 4, 5}, 10);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::matmul(in[0], in[1])}; }, {a, b2}), 1e-6);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::matmul(in[0], in[1])}; }, {a, b3}), 1e-6);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor x = leaf(ta ? Shape{2, 4, 3} : Shape{2, 3, 4}, 11), y = leaf(tb ? Shape{2, 5, 4} : Shape{2, 4, 5}, 12);
      EXPECT_LT(gradcheck([ta, tb](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::bmm(in[0], in[1], ta, tb)}; }, {x, y}), 1e-6)
          << "trans_a=" << ta << " trans_b=" << tb;
    }
}

TEST(OpsLinear, Bf16WithinTolerance) {
  // bf16 operands are widened, multiplied in fp32 and rounded once: |err| <= 2^-8 |y| + K·eps.
  Tensor x = random_f64({8, 64}, 13).to(DType::bf16), w = random_f64({16, 64}, 14).to(DType::bf16);
  Tensor y = ops::linear(x, w);
  EXPECT_EQ(y.dtype(), DType::bf16);
  auto want = naive_linear(x.to(DType::f64), w.to(DType::f64), Tensor());
  auto got = y.to_double_vector();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], std::abs(want[i]) * 0.004 + 1e-4);
}

TEST(OpsLinear, ShapeErrorsSayWhichDimension) {
  try {
    ops::linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 5}));
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("input [2, 3] has last dim 3 but weight [4, 5] expects 5"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::bmm(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})), ShapeError);
  EXPECT_THROW(ops::linear(Tensor::zeros({2, 3}), Tensor::zeros({4, 3}, DType::f64)), DTypeError);
}
