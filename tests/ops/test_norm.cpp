// rms_norm / layer_norm: forward against a naive f64 reference, backward against finite
// differences (f64), bf16 rounding, the deterministic weight-grad reduction, compute_dtype and
// error messages. (spec other_training_features.md §3–4; HF Qwen3's per-head qk-norm.)
#include <gtest/gtest.h>

#include <cmath>

#include "loom/autograd/engine.h"
#include "loom/core/parallel.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/norm.h"
#include "loom/ops/reduce.h"
#include "loom/ops/shape.h"
#include "testing/error_message.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::message_of;
using loom::testing::leaf;
using loom::testing::random_f64;

namespace {

using Vec = std::vector<double>;

// Naive reference over rows of length d.
Vec ref_rms(const Vec& x, const Vec& w, int64_t d, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < d; ++i) ss += x[r * d + i] * x[r * d + i];
    const double rs = 1.0 / std::sqrt(ss / d + eps);
    for (int64_t i = 0; i < d; ++i) y[r * d + i] = w[i] * x[r * d + i] * rs;
  }
  return y;
}

Vec ref_ln(const Vec& x, const Vec& w, const Vec& b, int64_t d, double eps) {
  Vec y(x.size());
  for (size_t r = 0; r < x.size() / d; ++r) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < d; ++i) m += x[r * d + i];
    m /= d;
    for (int64_t i = 0; i < d; ++i) v += (x[r * d + i] - m) * (x[r * d + i] - m);
    v /= d;
    for (int64_t i = 0; i < d; ++i)
      y[r * d + i] = (x[r * d + i] - m) / std::sqrt(v + eps) * w[i] + b[i];
  }
  return y;
}

double max_abs_diff(const Vec& a, const Vec& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}


}  // namespace

TEST(OpsNorm, RmsNormForwardMatchesReferenceF64AndF32) {
  Tensor x = random_f64({3, 5, 16}, 1, -2, 2), w = random_f64({16}, 2, 0.5, 1.5);
  Vec ref = ref_rms(x.to_double_vector(), w.to_double_vector(), 16, 1e-6);
  EXPECT_LT(max_abs_diff(ops::rms_norm(x, w, 1e-6).to_double_vector(), ref), 1e-14);
  // fp32 compute on f32 data: within a few ulps of the exact value.
  Tensor y32 = ops::rms_norm(x.to(DType::f32), w.to(DType::f32), 1e-6);
  EXPECT_EQ(y32.dtype(), DType::f32);
  EXPECT_LT(max_abs_diff(y32.to_double_vector(), ref), 2e-6);
}

TEST(OpsNorm, RmsNormPerHeadQkNormOnViews) {
  // HF Qwen3: q = RMSNorm_hd(q.view(..., H, hd)) with weight [hd]; also on a strided view.
  Tensor q = random_f64({2, 3, 4, 8}, 3), w = random_f64({8}, 4);
  Vec ref = ref_rms(q.to_double_vector(), w.to_double_vector(), 8, 1e-6);
  EXPECT_LT(max_abs_diff(ops::rms_norm(q, w, 1e-6).to_double_vector(), ref), 1e-14);
  Tensor qt = q.transpose(1, 2);  // [2, 4, 3, 8], not contiguous
  Tensor yt = ops::rms_norm(qt, w, 1e-6);
  EXPECT_EQ(yt.shape(), (Shape{2, 4, 3, 8}));
  EXPECT_LT(max_abs_diff(yt.transpose(1, 2).contiguous().to_double_vector(), ref), 1e-14);
}

TEST(OpsNorm, LayerNormForwardMatchesReference) {
  Tensor x = random_f64({7, 12}, 5, -3, 3), w = random_f64({12}, 6), b = random_f64({12}, 7);
  Vec ref = ref_ln(x.to_double_vector(), w.to_double_vector(), b.to_double_vector(), 12, 1e-5);
  EXPECT_LT(max_abs_diff(ops::layer_norm(x, w, b, 1e-5).to_double_vector(), ref), 1e-13);
  Vec ones(12, 1.0), zeros(12, 0.0);
  Vec ref_plain = ref_ln(x.to_double_vector(), ones, zeros, 12, 1e-5);
  EXPECT_LT(max_abs_diff(ops::layer_norm(x, Tensor(), Tensor(), 1e-5).to_double_vector(), ref_plain), 1e-13);
}

TEST(OpsNorm, GradcheckRmsNorm) {
  Tensor x = leaf({4, 3, 6}, 11, -2, 2), w = leaf({6}, 12, 0.5, 1.5);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::rms_norm(in[0], in[1], 1e-6)}; }, {x, w}), 1e-6);
  Tensor x2 = leaf({5, 4}, 13);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::rms_norm(in[0], Tensor(), 1e-6)}; }, {x2}), 1e-6);
}

TEST(OpsNorm, GradcheckLayerNorm) {
  Tensor x = leaf({5, 7}, 21, -2, 2), w = leaf({7}, 22), b = leaf({7}, 23);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::layer_norm(in[0], in[1], in[2], 1e-5)}; }, {x, w, b}), 1e-6);
  Tensor x2 = leaf({3, 9}, 24, -2, 2);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::layer_norm(in[0], Tensor(), Tensor(), 1e-5)}; }, {x2}), 1e-6);
}

TEST(OpsNorm, GradcheckManyRowsCrossesWeightGradChunks) {
  // 70 rows > one 16-row chunk: the chunked dweight reduction must still be the exact sum.
  Tensor x = leaf({70, 3}, 31), w = leaf({3}, 32);
  EXPECT_LT(gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::rms_norm(in[0], in[1], 1e-6)}; }, {x, w}), 1e-6);
}

TEST(OpsNorm, Bf16ComputesInFp32AndRoundsOnce) {
  // other_training_features.md §3: cast to compute_dtype (fp32), compute, cast back once.
  Tensor x = random_f64({6, 40}, 41, -3, 3).to(DType::bf16), w = random_f64({40}, 42).to(DType::bf16);
  Tensor y = ops::rms_norm(x, w, 1e-6);
  EXPECT_EQ(y.dtype(), DType::bf16);
  std::vector<float> expect = ops::rms_norm(x.to(DType::f32), w.to(DType::f32), 1e-6).to_float_vector();
  std::vector<float> got = y.to_float_vector();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], round_to_bf16(expect[i])) << i;
  // And within bf16 resolution (2^-8 relative) of the exact value.
  Vec ref = ref_rms(x.to_double_vector(), w.to_double_vector(), 40, 1e-6);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref[i], std::abs(ref[i]) * 0.0040 + 1e-6) << i;
  Tensor b = random_f64({40}, 43).to(DType::bf16);
  std::vector<float> ln = ops::layer_norm(x, w, b, 1e-5).to_float_vector();
  std::vector<float> ln32 = ops::layer_norm(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32), 1e-5).to_float_vector();
  for (size_t i = 0; i < ln.size(); ++i) ASSERT_EQ(ln[i], round_to_bf16(ln32[i])) << i;
}

TEST(OpsNorm, Bf16BackwardWithinTolerance) {
  // bf16 x and weight: dx in bf16 within 1% of the f64 grads; dweight is an fp32 main grad.
  Tensor x64 = random_f64({32, 24}, 51, -2, 2), w64 = random_f64({24}, 52, 0.5, 1.5);
  Tensor g64 = random_f64({32, 24}, 53);
  Tensor xb = x64.to(DType::bf16), wb = w64.to(DType::bf16);
  Tensor xr = xb.to(DType::f64), wr = wb.to(DType::f64);  // the same values, exact compute
  xr.set_requires_grad(true);
  wr.set_requires_grad(true);
  autograd::backward(ops::rms_norm(xr, wr, 1e-6), g64);
  xb.set_requires_grad(true);
  wb.set_requires_grad(true);
  autograd::backward(ops::rms_norm(xb, wb, 1e-6), g64.to(DType::bf16));
  EXPECT_EQ(wb.grad().dtype(), DType::f32);
  Vec dx = xb.grad().to_double_vector(), dx_ref = xr.grad().to_double_vector();
  Vec dw = wb.grad().to_double_vector(), dw_ref = wr.grad().to_double_vector();
  double scale_x = 0, scale_w = 0;
  for (double v : dx_ref) scale_x = std::max(scale_x, std::abs(v));
  for (double v : dw_ref) scale_w = std::max(scale_w, std::abs(v));
  EXPECT_LT(max_abs_diff(dx, dx_ref), 0.01 * scale_x);
  EXPECT_LT(max_abs_diff(dw, dw_ref), 0.01 * scale_w);
}

TEST(OpsNorm, WeightGradIsIndependentOfThreadCount) {
  Tensor x = random_f64({1000, 96}, 61).to(DType::f32), w = random_f64({96}, 62).to(DType::f32);
  Tensor g = random_f64({1000, 96}, 63).to(DType::f32);
  auto run = [&](int threads) {
    set_num_threads(threads);
    Tensor xl = x.clone(), wl = w.clone();
    xl.set_requires_grad(true);
    wl.set_requires_grad(true);
    autograd::backward(ops::rms_norm(xl, wl, 1e-6), g);
    return std::make_pair(wl.grad().to_float_vector(), xl.grad().to_float_vector());
  };
  const int before = num_threads();
  auto one = run(1), two = run(2), three = run(3);
  set_num_threads(before);
  EXPECT_EQ(one.first, two.first);
  EXPECT_EQ(one.first, three.first);
  EXPECT_EQ(one.second, three.second);
}

TEST(OpsNorm, ComputeDtypeSelectsPrecision) {
  // model.layernorm_compute_dtype (other_training_features.md §4): float64 gives the exact
  // result for f32 data; bfloat16 rounds the inputs and the result through bf16.
  Tensor x = random_f64({4, 32}, 71, -2, 2).to(DType::f32), w = random_f64({32}, 72).to(DType::f32);
  Vec ref = ref_rms(x.to_double_vector(), w.to_double_vector(), 32, 1e-6);
  Vec y64 = ops::rms_norm(x, w, 1e-6, DType::f64).to_double_vector();
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_EQ(static_cast<float>(y64[i]), static_cast<float>(ref[i])) << i;
  Tensor yb = ops::rms_norm(x, w, 1e-6, DType::bf16);
  EXPECT_EQ(yb.dtype(), DType::f32);
  std::vector<float> expect =
      ops::rms_norm(x.to(DType::bf16).to(DType::f32), w.to(DType::bf16).to(DType::f32), 1e-6).to_float_vector();
  std::vector<float> got = yb.to_float_vector();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], round_to_bf16(expect[i])) << i;
  // Grads flow through the casts.
  Tensor xl = x.clone();
  xl.set_requires_grad(true);
  autograd::backward(ops::sum(ops::rms_norm(xl, w, 1e-6, DType::bf16)));
  EXPECT_EQ(xl.grad().dtype(), DType::f32);
  EXPECT_EQ(xl.grad().shape(), x.shape());
}

TEST(OpsNorm, ErrorsNameShapesAndDtypes) {
  Tensor x = Tensor::zeros({2, 4});
  std::string m = message_of([&] { ops::rms_norm(x, Tensor::ones({5})); });
  EXPECT_NE(m.find("rms_norm: weight has shape [5] but x [2, 4] normalises a last dim of 4; the weight must be [4]"), std::string::npos) << m;
  m = message_of([&] { ops::layer_norm(x, Tensor::ones({4}), Tensor::ones({2, 2})); });
  EXPECT_NE(m.find("layer_norm: bias has shape [2, 2]"), std::string::npos) << m;
  EXPECT_THROW(ops::rms_norm(Tensor::zeros({2, 4}, DType::i64), Tensor()), DTypeError);
  EXPECT_THROW(ops::rms_norm(x, Tensor::ones({4}), 1e-6, DType::i32), DTypeError);
}
