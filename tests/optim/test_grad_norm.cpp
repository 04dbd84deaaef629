// Global grad norm and clipping (MindFormers' _calculate_global_grad_norm; spec
// other_training_features.md §2).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "loom/core/error.h"
#include "loom/core/parallel.h"
#include "loom/optim/grad_norm.h"
#include "optim_test_util.h"

using namespace loom;
using namespace loom::optim;
using namespace loom::optim::testing;

TEST(GradNorm, NormOverAllGradsSkipsMissing) {
  Tensor a = make_param({0, 0, 0}, {3});
  Tensor b = make_param({0, 0, 0, 0}, {2, 2});
  Tensor c = make_param({0}, {1});
  set_grad(a, {3.f, 0.f, 0.f});
  set_grad(b, {0.f, 4.f, 0.f, 12.f});
  EXPECT_DOUBLE_EQ(global_grad_norm({{"a", a}, {"b", b}, {"c", c}}), 13.0);
}

// Clipping scales every grad by max_norm/(norm+1e-6) when that is < 1; the pre-clip norm is
// returned.
TEST(GradNorm, ClipsWhenAboveMaxNorm) {
  Tensor a = make_param({0, 0}, {2});
  set_grad(a, {3.f, 4.f});
  NamedParams ps{{"a", a}};
  EXPECT_DOUBLE_EQ(clip_grad_norm(ps, 1.0), 5.0);
  const double coef = 1.0 / (5.0 + 1e-6);
  std::vector<float> g = a.grad().to_float_vector();
  EXPECT_FLOAT_EQ(g[0], static_cast<float>(3.0 * coef));
  EXPECT_FLOAT_EQ(g[1], static_cast<float>(4.0 * coef));
  EXPECT_NEAR(global_grad_norm(ps), 1.0, 1e-6);
}

TEST(GradNorm, NoClipBelowMaxNorm) {
  Tensor a = make_param({0, 0}, {2});
  set_grad(a, {0.3f, 0.4f});
  EXPECT_NEAR(clip_grad_norm({{"a", a}}, 1.0), 0.5, 1e-7);
  EXPECT_EQ(a.grad().to_float_vector(), (std::vector<float>{0.3f, 0.4f}));
}

// Replica factors divide each tensor's sum of squares; the all-reduce hook sees the local total.
TEST(GradNorm, ReplicaFactorAndAllReduceHook) {
  Tensor a = make_param({0}, {1});
  Tensor b = make_param({0}, {1});
  set_grad(a, {2.f});
  set_grad(b, {4.f});
  double seen = -1;
  auto factor = [](const NamedParam& p) { return p.name == "b" ? 4.0 : 1.0; };
  auto reduce = [&](double local) {
    seen = local;
    return local * 2;  // as if a second rank held the same total
  };
  const double norm = global_grad_norm({{"a", a}, {"b", b}}, factor, reduce);
  EXPECT_DOUBLE_EQ(seen, 4.0 + 16.0 / 4.0);
  EXPECT_DOUBLE_EQ(norm, std::sqrt(16.0));
}

// bf16 grads are accumulated through fp32 values and scaled with rounding.
TEST(GradNorm, Bf16GradsScaleWithRounding) {
  Tensor a = make_param({0, 0}, {2});
  a.set_grad(Tensor::from_vector(std::vector<float>{6.f, 8.f}, {2}, DType::bf16));
  EXPECT_DOUBLE_EQ(clip_grad_norm({{"a", a}}, 5.0), 10.0);
  std::vector<float> g = a.grad().to_float_vector();
  EXPECT_EQ(g[0], round_to_bf16(static_cast<float>(6.0 * 5.0 / (10.0 + 1e-6))));
  EXPECT_EQ(a.grad().dtype(), DType::bf16);
}

// A non-finite norm is reported as is and leaves the grads untouched.
TEST(GradNorm, NonFiniteNormReturnedWithoutClipping) {
  Tensor a = make_param({0, 0}, {2});
  set_grad(a, {std::numeric_limits<float>::infinity(), 1.f});
  EXPECT_TRUE(std::isinf(clip_grad_norm({{"a", a}}, 1.0)));
  EXPECT_EQ(a.grad().to_float_vector()[1], 1.f);
  set_grad(a, {std::numeric_limits<float>::quiet_NaN(), 1.f});
  EXPECT_TRUE(std::isnan(clip_grad_norm({{"a", a}}, 1.0)));
  EXPECT_EQ(a.grad().to_float_vector()[1], 1.f);
}

// spec other_training_features.md §2: max_norm must be positive.
TEST(GradNorm, RejectsNonPositiveMaxNorm) {
  Tensor a = make_param({0}, {1});
  set_grad(a, {1.f});
  try {
    clip_grad_norm({{"a", a}}, 0.0);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("max_norm must be > 0, got 0"), std::string::npos);
  }
  EXPECT_THROW(clip_grad_norm({{"a", a}}, -1.0), ValueError);
}

// The sum is a fixed-order reduction: identical bits for any thread count.
TEST(GradNorm, DeterministicAcrossThreadCounts) {
  const int64_t n = 300001;
  Tensor a = make_param(std::vector<float>(n, 0.f), {n});
  set_grad(a, random_values(n, 11, 0.01f));
  const int before = num_threads();
  set_num_threads(1);
  const double one = global_grad_norm({{"a", a}});
  set_num_threads(3);
  const double three = global_grad_norm({{"a", a}});
  set_num_threads(before);
  EXPECT_EQ(one, three);
  double ref = 0;
  for (float g : a.grad().to_float_vector()) ref += double(g) * g;
  EXPECT_NEAR(one, std::sqrt(ref), 1e-12 * std::sqrt(ref));
}
