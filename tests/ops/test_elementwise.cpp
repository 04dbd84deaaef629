// Elementwise ops: forward against scalar references, backward against finite differences (f64),
// bf16 within a stated tolerance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/autograd/grad_mode.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/shape.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::leaf;
using loom::testing::random_f64;

TEST(OpsElementwise, BroadcastForwardValues) {
  Tensor a = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::from_vector(std::vector<float>{10, 20, 30}, {3});
  EXPECT_EQ(ops::add(a, b).to_float_vector(), (std::vector<float>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(ops::sub(a, b).to_float_vector(), (std::vector<float>{-9, -18, -27, -6, -15, -24}));
  EXPECT_EQ(ops::mul(a, b).to_float_vector(), (std::vector<float>{10, 40, 90, 40, 100, 180}));
  Tensor col = Tensor::from_vector(std::vector<float>{2, 4}, {2, 1});
  EXPECT_EQ(ops::div(a, col).to_float_vector(), (std::vector<float>{0.5f, 1, 1.5f, 1, 1.25f, 1.5f}));
}

TEST(OpsElementwise, BroadcastMismatchNamesShapes) {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  try {
    ops::add(a, b);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("add: shapes [2, 3] and [4] cannot be broadcast"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::add(Tensor::zeros({2}), Tensor::zeros({2}, DType::f64)), DTypeError);
}

TEST(OpsElementwise, GradcheckBinaryWithBroadcast) {
  for (auto op : {ops::add, ops::sub, ops::mul}) {
    Tensor a = leaf({2, 3, 4}, 1), b = leaf({3, 1}, 2);
    EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{op(in[0], in[1])}; }, {a, b}), 1e-6);
  }
  Tensor a = leaf({2, 3}, 3), b = leaf({2, 3}, 4, 0.5, 2.0);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::div(in[0], in[1])}; }, {a, b}), 1e-6);
}

TEST(OpsElementwise, GradcheckUnaryAndActivations) {
  using F = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, F>> fns = {
      {"exp", ops::exp}, {"sigmoid", ops::sigmoid}, {"silu", ops::silu}, {"tanh", ops::tanh},
      {"square", ops::square}, {"neg", ops::neg}};
  for (auto& [name, fn] : fns) {
    Tensor x = leaf({3, 5}, 11);
    EXPECT_LT(gradcheck([fn = fn](const std::vector<Tensor>& in) { return std::vector<Tensor>{fn(in[0])}; }, {x}, 1e-6, 1e-6, name), 1e-6) << name;
  }
  Tensor pos = leaf({4, 4}, 12, 0.5, 3.0);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::log(in[0])}; }, {pos}), 1e-6);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::sqrt(in[0])}; }, {pos}), 1e-6);
  for (bool approx : {false, true}) {
    Tensor x = leaf({3, 7}, 13, -3, 3);
    EXPECT_LT(gradcheck([approx](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::gelu(in[0], approx)}; }, {x}), 1e-6);
  }
  Tensor g = leaf({2, 6}, 14, -3, 3), u = leaf({2, 6}, 15);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::swiglu(in[0], in[1])}; }, {g, u}), 1e-6);
}

TEST(OpsElementwise, ActivationForwardReference) {
  Tensor x = Tensor::from_vector(std::vector<double>{-2.0, -0.5, 0.0, 0.7, 3.0}, {5});
  auto gelu = ops::gelu(x, false).to_double_vector();
  auto gelu_t = ops::gelu(x, true).to_double_vector();
  auto silu = ops::silu(x).to_double_vector();
  for (int i = 0; i < 5; ++i) {
    double v = x.at({i});
    EXPECT_NEAR(gelu[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-12);
    EXPECT_NEAR(gelu_t[i], 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v))), 1e-12);
    EXPECT_NEAR(silu[i], v / (1 + std::exp(-v)), 1e-12);
  }
}

TEST(OpsElementwise, Bf16ComputesInFp32AndRoundsOnce) {
  // bf16 inputs: the result equals the fp32 result rounded to bf16 (relative error <= 2^-8).
  Tensor a32 = random_f64({64}, 21).to(DType::f32), b32 = random_f64({64}, 22).to(DType::f32);
  Tensor a = a32.to(DType::bf16), b = b32.to(DType::bf16);
  auto got = ops::mul(a, b).to_float_vector();
  auto af = a.to_float_vector(), bf = b.to_float_vector();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(got[i], round_to_bf16(af[i] * bf[i]));
  auto s = ops::silu(a).to_float_vector();
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(s[i], af[i] / (1 + std::exp(-af[i])), std::abs(s[i]) * 0.0079 + 1e-6);
}

TEST(OpsElementwise, CastRoundTripsGradToInputDtype) {
  Tensor x = Tensor::from_vector(std::vector<float>{1.5f, -2.25f}, {2});
  x.set_requires_grad(true);
  Tensor y = ops::cast(x, DType::f64);
  EXPECT_EQ(y.dtype(), DType::f64);
  autograd::backward(ops::sum(ops::scale(y, 3.0)));
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(x.grad().to_float_vector(), (std::vector<float>{3.f, 3.f}));
}

TEST(OpsElementwise, SwigluPackedEqualsSplitAndPassesGradcheck) {
  // [.., 2F] = [gate | up] read in place; its grad is the fused [.., 2F] grad.
  Tensor h = leaf({3, 2, 10}, 31, -3, 3);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::swiglu_packed(in[0])}; }, {h}), 1e-6);
  Tensor h32 = random_f64({5, 40}, 32, -4, 4).to(DType::f32);  // 20 = 2 vectors of 8 + a tail of 4
  auto halves = ops::split(h32, {20, 20}, 1);
  auto packed = ops::swiglu_packed(h32).to_float_vector();
  auto split = ops::swiglu(halves[0], halves[1]).to_float_vector();
  ASSERT_EQ(packed.size(), split.size());
  auto hv = h32.to_double_vector();
  for (size_t i = 0; i < packed.size(); ++i) {
    EXPECT_EQ(packed[i], split[i]);
    const size_t r = i / 20, c = i % 20;
    const double g = hv[r * 40 + c], u = hv[r * 40 + 20 + c];
    EXPECT_NEAR(packed[i], g / (1 + std::exp(-g)) * u, 1e-5 * (1 + std::abs(packed[i])));
  }
  Tensor hb = h32.to(DType::bf16);
  auto pb = ops::swiglu_packed(hb).to_float_vector();
  auto hbv = hb.to_double_vector();
  for (size_t i = 0; i < pb.size(); ++i) {
    const size_t r = i / 20, c = i % 20;
    const double g = hbv[r * 40 + c], u = hbv[r * 40 + 20 + c];
    EXPECT_NEAR(pb[i], g / (1 + std::exp(-g)) * u, 0.0079 * std::abs(pb[i]) + 1e-6);
  }
  EXPECT_THROW(ops::swiglu_packed(Tensor::zeros({2, 3})), ShapeError);
}

TEST(OpsElementwise, MaximumIsElementwiseBroadcastsKeepsNanAndHasNoBackward) {
  const float inf = INFINITY, nan = NAN;
  Tensor a = Tensor::from_vector(std::vector<float>{1, -inf, 3, nan, -2, 0}, {2, 3});
  Tensor b = Tensor::from_vector(std::vector<float>{2, -inf, 1}, {3});
  auto m = ops::maximum(a, b).to_float_vector();
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0], 2.f);
  EXPECT_EQ(m[1], -inf);  // a head that saw no key stays -inf
  EXPECT_EQ(m[2], 3.f);
  EXPECT_TRUE(std::isnan(m[3]));  // a NaN is never hidden by the running maximum
  EXPECT_EQ(m[4], -2.f);
  EXPECT_EQ(m[5], 1.f);
  // bf16 picks one of its inputs, so it is exact.
  Tensor x = random_f64({32}, 41).to(DType::bf16), y = random_f64({32}, 42).to(DType::bf16);
  auto mb = ops::maximum(x, y).to_float_vector(), xv = x.to_float_vector(), yv = y.to_float_vector();
  for (int i = 0; i < 32; ++i) EXPECT_EQ(mb[i], std::max(xv[i], yv[i]));
  Tensor g = leaf({3}, 43);
  try {
    ops::maximum(g, Tensor::zeros({3}, DType::f64));
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("maximum has no backward"), std::string::npos) << e.what();
  }
  autograd::NoGradGuard no_grad;
  EXPECT_EQ(ops::maximum(g, g).to_double_vector(), g.to_double_vector());
}

TEST(OpsElementwise, Bf16BinaryOpsOnContiguousTensorsRoundLikeTheScalarPath) {
  // Long enough for several vector blocks and several threads' ranges, with a ragged tail;
  // specials and values whose sums round both ways.
  const int64_t n = 70000 + 13;
  Tensor a = random_f64({n}, 21).to(DType::bf16), b = random_f64({n}, 22).to(DType::bf16);
  a.narrow(0, 0, 1).fill_(std::numeric_limits<double>::infinity());
  b.narrow(0, 1, 1).fill_(std::nan(""));
  a.narrow(0, 2, 1).fill_(1e-39);  // a bf16 denormal
  for (auto op : {ops::add, ops::sub, ops::mul, ops::div}) {
    const std::vector<double> got = op(a, b).to_double_vector();
    // fp32 arithmetic on the widened values, rounded once by Tensor::to (the scalar conversion).
    const std::vector<double> want = op(a.to(DType::f32), b.to(DType::f32)).to(DType::bf16).to_double_vector();
    ASSERT_EQ(got.size(), want.size());
    for (int64_t i = 0; i < n; ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
      } else {
        ASSERT_EQ(got[i], want[i]) << "element " << i;
      }
    }
  }
}
