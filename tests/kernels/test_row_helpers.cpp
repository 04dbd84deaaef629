// Row helpers shared by the norm, RoPE, cross-entropy and MoE kernels: the vectorised bf16
// conversions must give exactly loom::bf16's bits (round to nearest even, quiet NaN), and the
// multi-accumulator reductions must equal the exact sums to fp32 accuracy for every length
// (vector body plus scalar tail). Also the cross-entropy kernel's exp across the range it sees.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "loom/kernels/cpu/cross_entropy.h"
#include "loom/kernels/cpu/row_helpers.h"

using namespace loom;
using namespace loom::kernels::cpu;

TEST(KernelsRowHelpers, Bf16NarrowMatchesScalarRoundingBitForBit) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159265f, 1e-40f, -1e-42f, 65504.0f, 3.3895e38f,
                          std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::max()};
  // Exact ties: 1 + 2^-8 (even stays), 1 + 3·2^-8 (odd rounds up), and their negatives.
  for (float t : {1.00390625f, 1.01171875f, -1.00390625f, -1.01171875f}) v.push_back(t);
  for (uint32_t bits = 0x3f800000u; bits < 0x3f800000u + 70000u; bits += 7u) {
    float f;
    std::memcpy(&f, &bits, 4);
    v.push_back(f);
  }
  std::vector<bf16> out(v.size());
  narrow_row(v.data(), out.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(out[i].bits, bf16::from_float(v[i])) << i << " " << v[i];
  std::vector<float> back(v.size());
  widen_row(out.data(), back.data(), static_cast<int64_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    const float expect = bf16::to_float(out[i].bits);
    if (std::isnan(expect)) ASSERT_TRUE(std::isnan(back[i]));
    else ASSERT_EQ(back[i], expect) << i;
  }
}

TEST(KernelsRowHelpers, ReductionsMatchDoubleSumsForEveryTailLength) {
  for (int64_t n : {0, 1, 7, 8, 9, 31, 32, 33, 63, 100, 768, 1000}) {
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; ++i) {
      a[i] = std::sin(0.37f * i) * 3.0f;
      b[i] = std::cos(0.11f * i) - 0.25f;
    }
    double dot = 0, sum = 0, css = 0, mx = -INFINITY;
    const float c = 0.3f;
    for (int64_t i = 0; i < n; ++i) {
      dot += double(a[i]) * b[i];
      sum += a[i];
      css += (double(a[i]) - c) * (double(a[i]) - c);
      mx = std::max(mx, double(a[i]));
    }
    const double tol = 1e-5 * (1.0 + n);
    EXPECT_NEAR(row_dot(a.data(), b.data(), n), dot, tol) << n;
    EXPECT_NEAR(row_sum(a.data(), n), sum, tol) << n;
    EXPECT_NEAR(row_centered_sum_squares(a.data(), c, n), css, tol) << n;
    EXPECT_EQ(static_cast<double>(row_max(a.data(), n)), mx) << n;
    EXPECT_NEAR(row_dot<double>(nullptr, nullptr, 0), 0.0, 0.0);
  }
}

TEST(KernelsRowHelpers, CrossEntropyExpIsAccurateOverTheSoftmaxRange) {
  // One row per offset: logits {0, x} with label 0 gives ce = log(1 + e^x); compares the fp32
  // kernel (vectorised exp) against double for x across the whole range softmax uses, including
  // arguments below the underflow threshold and the −inf of masked vocabulary.
  std::vector<float> xs;
  for (float x = -100.0f; x <= 0.0f; x += 0.173f) xs.push_back(x);
  xs.push_back(-std::numeric_limits<float>::infinity());
  const int64_t V = 24;  // > 8 so the vector body runs; the other entries are −inf
  const int64_t N = static_cast<int64_t>(xs.size());
  Tensor logits = Tensor::full({N, V}, -std::numeric_limits<double>::infinity(), DType::f32);
  float* p = logits.data<float>();
  for (int64_t r = 0; r < N; ++r) {
    p[r * V] = 0.0f;
    p[r * V + 9] = xs[r];
  }
  Tensor labels = Tensor::zeros({N}, DType::i64);
  Tensor weights = cross_entropy_row_weights(labels, Tensor(), -100, V, "test");
  Tensor lse;
  cross_entropy_forward(logits, labels, weights, lse);
  Tensor grad = cross_entropy_backward(logits, labels, weights, lse, 1.0);
  for (int64_t r = 0; r < N; ++r) {
    const double x = xs[r];
    const double ref_lse = std::log1p(std::exp(x));
    EXPECT_NEAR(lse.at({r}), ref_lse, 2e-7 * std::max(1.0, ref_lse) + 1e-38) << x;
    // d/dx of the loss: softmax of the x entry, e^x / (1 + e^x); −inf entries get exactly 0.
    // x − lse is rounded to fp32 first, which alone costs |x|·2^-24 relative in e^(x − lse).
    const double ref_p = std::exp(x) / (1.0 + std::exp(x));
    if (std::isinf(x)) EXPECT_EQ(grad.at({r, 9}), 0.0);
    else EXPECT_NEAR(grad.at({r, 9}), ref_p, (3e-7 + std::abs(x) * 6e-8) * ref_p + 1e-37) << x;
    EXPECT_EQ(grad.at({r, 5}), 0.0);
  }
}

TEST(KernelsRowHelpers, CrossEntropyPropagatesNaN) {
  Tensor logits = Tensor::zeros({2, 40}, DType::f32);
  logits.data<float>()[40 + 17] = std::numeric_limits<float>::quiet_NaN();
  Tensor labels = Tensor::zeros({2}, DType::i64);
  Tensor weights = cross_entropy_row_weights(labels, Tensor(), -100, 40, "test");
  Tensor lse;
  const double total = cross_entropy_forward(logits, labels, weights, lse);
  EXPECT_TRUE(std::isnan(total)) << "a NaN logit must make the loss NaN (NaN checks rely on it)";
  EXPECT_FALSE(std::isnan(lse.at({0})));
  EXPECT_TRUE(std::isnan(lse.at({1})));
}
