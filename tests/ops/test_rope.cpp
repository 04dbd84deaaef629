// RoPE: table builder (none / linear / YaRN with HF's mscale handling), the rope op in
// rotate-half and interleaved forms, partial rotary, position ids, backward = rotation by −θ.
// (DeepSeek-V3's YaRN and MLA softmax scale, HF Qwen3's rotate-half.)
#include <gtest/gtest.h>

#include <cmath>

#include "loom/ops/rope.h"
#include "loom/ops/shape.h"
#include "testing/error_message.h"
#include "testing/gradcheck.h"

using namespace loom;
using loom::testing::gradcheck;
using loom::testing::message_of;
using loom::testing::leaf;
using loom::testing::random_f64;

namespace {


ops::RopeScaling deepseek_v3_yarn() {
  // DeepSeek-V3's config.json: rope_scaling {type yarn, factor 40, original 4096, beta_fast 32,
  // beta_slow 1, mscale 1.0, mscale_all_dim 1.0}
  ops::RopeScaling sc;
  sc.kind = ops::RopeScaling::Kind::yarn;
  sc.factor = 40;
  sc.original_max_position_embeddings = 4096;
  sc.beta_fast = 32;
  sc.beta_slow = 1;
  sc.mscale = 1.0;
  sc.mscale_all_dim = 1.0;
  return sc;
}

// Naive f64 rope of one [B, S, H, D] tensor with angles pos·inv_freq.
std::vector<double> ref_rope(const Tensor& x, const std::vector<double>& inv_freq,
                             const std::vector<int64_t>& pos, bool interleaved, double scale = 1.0) {
  const int64_t B = x.size(0), S = x.size(1), H = x.size(2), D = x.size(3);
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  std::vector<double> v = x.contiguous().to_double_vector(), out = v;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = ((b * S + s) * H + h) * D;
        for (int64_t i = 0; i < half; ++i) {
          const double th = static_cast<double>(pos[b * S + s]) * inv_freq[i];
          const int64_t i1 = interleaved ? 2 * i : i, i2 = interleaved ? 2 * i + 1 : i + half;
          out[base + i1] = scale * (v[base + i1] * std::cos(th) - v[base + i2] * std::sin(th));
          out[base + i2] = scale * (v[base + i2] * std::cos(th) + v[base + i1] * std::sin(th));
        }
      }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

}  // namespace

TEST(OpsRope, YarnFrequenciesMatchHfForDeepSeekV3) {
  // Reference values from HF `_compute_yarn_parameters` (dim 64, θ 10000): correction range
  // [10, 23]; below 10 the original frequencies, above 23 divided by the factor, a ramp between.
  ops::RopeTable t = ops::make_rope_table(64, 8, 10000.0, deepseek_v3_yarn(), DType::f64);
  std::vector<double> f = t.inv_freq.to_double_vector();
  EXPECT_DOUBLE_EQ(f[0], 1.0);
  EXPECT_NEAR(f[9], 0.07498942093324558, 1e-15);
  EXPECT_NEAR(f[11], 0.03900692656714386, 1e-15);
  EXPECT_NEAR(f[16], 0.0055, 1e-15);
  EXPECT_NEAR(f[22], 0.0001778279410038922, 1e-17);
  EXPECT_NEAR(f[23], 3.33380358040831e-05, 1e-18);
  EXPECT_NEAR(f[31], 3.33380358040831e-06, 1e-19);
  // mscale(40, 1) / mscale(40, 1) = 1 for V3: cos/sin unscaled.
  EXPECT_DOUBLE_EQ(t.attention_factor, 1.0);
  ops::RopeTable t2 = ops::make_rope_table(64, 1001, 10000.0, deepseek_v3_yarn(), DType::f64);
  EXPECT_NEAR(t2.cos.at({1000, 16}), 0.70866977429126, 1e-12);
  EXPECT_NEAR(t2.sin.at({1000, 16}), -0.7055403255703919, 1e-12);
}

TEST(OpsRope, YarnMscaleAndSoftmaxScaleFactor) {
  // HF DeepSeek-V3: m = 0.1·mscale_all_dim·ln(factor) + 1 = 1.36889 → m² = 1.87386 for factor 40.
  ops::RopeScaling sc = deepseek_v3_yarn();
  EXPECT_NEAR(ops::yarn_softmax_scale_factor(sc), 1.8738542070926265, 1e-12);
  EXPECT_NEAR(ops::yarn_get_mscale(40, 1), 1.3688879454113936, 1e-12);
  EXPECT_DOUBLE_EQ(ops::yarn_get_mscale(1.0, 1.0), 1.0);
  sc.mscale_all_dim = 0;  // absent: no softmax correction, HF uses mscale(factor) for cos/sin
  EXPECT_DOUBLE_EQ(ops::yarn_softmax_scale_factor(sc), 1.0);
  ops::RopeTable t = ops::make_rope_table(8, 4, 10000.0, sc, DType::f64);
  EXPECT_NEAR(t.attention_factor, 0.1 * std::log(40.0) + 1.0, 1e-15);
  EXPECT_NEAR(t.cos.at({0, 0}), t.attention_factor, 1e-15);  // cos(0)·attention_factor
  sc.mscale = 0.707;
  sc.mscale_all_dim = 1.0;
  t = ops::make_rope_table(8, 4, 10000.0, sc, DType::f64);
  EXPECT_NEAR(t.attention_factor, ops::yarn_get_mscale(40, 0.707) / ops::yarn_get_mscale(40, 1.0), 1e-15);
  sc.attention_factor = 0.5;
  EXPECT_DOUBLE_EQ(ops::make_rope_table(8, 4, 10000.0, sc).attention_factor, 0.5);
  EXPECT_DOUBLE_EQ(ops::yarn_softmax_scale_factor(ops::RopeScaling{}), 1.0);
}

TEST(OpsRope, PlainAndLinearFrequencies) {
  ops::RopeTable t = ops::make_rope_table(8, 3, 1e6, {}, DType::f64);
  std::vector<double> f = t.inv_freq.to_double_vector();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(f[i], std::pow(1e6, -2.0 * i / 8), 1e-15);
  ops::RopeScaling lin;
  lin.kind = ops::RopeScaling::Kind::linear;
  lin.factor = 4;
  std::vector<double> fl = ops::make_rope_table(8, 3, 1e6, lin, DType::f64).inv_freq.to_double_vector();
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(fl[i], f[i] / 4, 1e-16);
  EXPECT_NEAR(t.sin.at({2, 1}), std::sin(2 * f[1]), 1e-15);
  EXPECT_EQ(ops::make_rope_table(8, 3, 1e6).cos.dtype(), DType::f32);
}

TEST(OpsRope, ForwardMatchesReferenceBothLayoutsWithPositions) {
  Tensor x = random_f64({2, 3, 2, 8}, 1);
  ops::RopeTable t = ops::make_rope_table(8, 50, 10000.0, {}, DType::f64);
  std::vector<double> inv = t.inv_freq.to_double_vector();
  std::vector<int64_t> pos = {0, 7, 49, 3, 3, 11};
  Tensor pid = Tensor::from_vector(pos, {2, 3});
  for (bool inter : {false, true}) {
    std::vector<double> got = ops::rope(x, t, pid, inter).to_double_vector();
    EXPECT_LT(max_abs_diff(got, ref_rope(x, inv, pos, inter)), 1e-14) << inter;
  }
  // Default positions are 0..S-1 for every batch row; [S] ids are shared by the batch.
  std::vector<int64_t> arange = {0, 1, 2, 0, 1, 2};
  EXPECT_LT(max_abs_diff(ops::rope(x, t).to_double_vector(), ref_rope(x, inv, arange, false)), 1e-14);
  Tensor shared = Tensor::from_vector(std::vector<int32_t>{5, 6, 7}, {3}, DType::i32);
  EXPECT_LT(max_abs_diff(ops::rope(x, t, shared).to_double_vector(), ref_rope(x, inv, {5, 6, 7, 5, 6, 7}, false)), 1e-14);
}

TEST(OpsRope, PartialRotaryLeavesTailUntouched) {
  // rotary_dim 4 of head_dim 10: dims 4..9 pass through bit for bit.
  Tensor x = random_f64({1, 4, 3, 10}, 2).to(DType::f32);
  ops::RopeTable t = ops::make_rope_table(4, 16, 10000.0);
  for (bool inter : {false, true}) {
    Tensor y = ops::rope(x, t, Tensor(), inter);
    for (int64_t s = 0; s < 4; ++s)
      for (int64_t h = 0; h < 3; ++h)
        for (int64_t d = 4; d < 10; ++d) ASSERT_EQ(y.at({0, s, h, d}), x.at({0, s, h, d}));
    std::vector<double> ref = ref_rope(x, t.inv_freq.to_double_vector(), {0, 1, 2, 3}, inter);
    EXPECT_LT(max_abs_diff(y.to_double_vector(), ref), 1e-6);
  }
}

TEST(OpsRope, InterleavedEqualsRotateHalfUnderPermutation) {
  // HF rope_interleave: x.view(..., d/2, 2).transpose(-1, -2).reshape(..., d) maps DeepSeek's
  // adjacent pairs to rotate-half form, so rope_half(P x) == P rope_interleaved(x).
  Tensor x = random_f64({2, 5, 3, 8}, 3);
  ops::RopeTable t = ops::make_rope_table(8, 5, 10000.0, deepseek_v3_yarn(), DType::f64);
  auto perm = [](const Tensor& v) {
    return v.reshape({2, 5, 3, 4, 2}).transpose(3, 4).reshape({2, 5, 3, 8});
  };
  std::vector<double> a = ops::rope(perm(x), t, Tensor(), false).to_double_vector();
  std::vector<double> b = perm(ops::rope(x, t, Tensor(), true)).contiguous().to_double_vector();
  EXPECT_LT(max_abs_diff(a, b), 1e-15);
}

TEST(OpsRope, ScoresDependOnlyOnRelativePosition) {
  Tensor q = random_f64({1, 1, 1, 16}, 4), k = random_f64({1, 1, 1, 16}, 5);
  ops::RopeTable t = ops::make_rope_table(16, 64, 10000.0, {}, DType::f64);
  auto score = [&](int64_t pq, int64_t pk, bool inter) {
    std::vector<double> a = ops::rope(q, t, Tensor::from_vector(std::vector<int64_t>{pq}, {1, 1}), inter).to_double_vector();
    std::vector<double> b = ops::rope(k, t, Tensor::from_vector(std::vector<int64_t>{pk}, {1, 1}), inter).to_double_vector();
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  for (bool inter : {false, true}) {
    EXPECT_NEAR(score(10, 3, inter), score(40, 33, inter), 1e-12);
    EXPECT_NEAR(score(0, 0, inter), score(63, 63, inter), 1e-12);
  }
}

TEST(OpsRope, GradcheckBothLayoutsPartialAndScaled) {
  ops::RopeTable t = ops::make_rope_table(4, 20, 10000.0, deepseek_v3_yarn(), DType::f64);
  ops::RopeScaling sc = deepseek_v3_yarn();
  sc.mscale_all_dim = 0;  // attention_factor ≠ 1: the backward is the transpose, scale included
  ops::RopeTable ts = ops::make_rope_table(6, 20, 10000.0, sc, DType::f64);
  Tensor pid = Tensor::from_vector(std::vector<int64_t>{1, 19, 4, 0, 2, 2}, {2, 3});
  for (bool inter : {false, true}) {
    Tensor x = leaf({2, 3, 2, 6}, 6);
    EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::rope(in[0], t, pid, inter)}; }, {x}), 1e-6);
    EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{ops::rope(in[0], ts, pid, inter)}; }, {x}), 1e-6);
  }
}

TEST(OpsRope, StridedViewInputAsMlaRopePart) {
  // MLA: q_pe = q[..., dn:] is a narrow view of the projection (DeepSeek-V3's MLA).
  Tensor q = random_f64({2, 3, 4, 12}, 7);
  Tensor q_pe = q.narrow(3, 8, 4);
  ops::RopeTable t = ops::make_rope_table(4, 8, 10000.0, {}, DType::f64);
  std::vector<double> a = ops::rope(q_pe, t, Tensor(), true).to_double_vector();
  std::vector<double> b = ops::rope(q_pe.contiguous(), t, Tensor(), true).to_double_vector();
  EXPECT_EQ(a, b);
  Tensor x = leaf({2, 3, 4, 4}, 8);
  EXPECT_LT(gradcheck([&](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{ops::rope(ops::transpose(in[0], 1, 2), t, Tensor(), false)};
            }, {x}), 1e-6);
}

TEST(OpsRope, Bf16RoundsTheFp32ResultOnce) {
  Tensor x = random_f64({2, 16, 4, 64}, 9, -4, 4).to(DType::bf16);
  ops::RopeTable t = ops::make_rope_table(64, 32, 10000.0);
  for (bool inter : {false, true}) {
    std::vector<float> got = ops::rope(x, t, Tensor(), inter).to_float_vector();
    std::vector<float> ref = ops::rope(x.to(DType::f32), t, Tensor(), inter).to_float_vector();
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], round_to_bf16(ref[i])) << i;
  }
  EXPECT_EQ(ops::rope(x, t).dtype(), DType::bf16);
}

TEST(OpsRope, ErrorsNamePositionAndTableSize) {
  ops::RopeTable t = ops::make_rope_table(8, 16, 10000.0);
  Tensor x = Tensor::zeros({1, 3, 2, 8});
  std::string m = message_of([&] { ops::rope(x, t, Tensor::from_vector(std::vector<int64_t>{0, 16, 2}, {1, 3})); });
  EXPECT_NE(m.find("rope: position_ids[0, 1] = 16 is outside the RoPE table of 16 positions [0, 16)"), std::string::npos) << m;
  EXPECT_THROW(ops::rope(x, t, Tensor::from_vector(std::vector<int64_t>{-1, 0, 0}, {1, 3})), ValueError);
  m = message_of([&] { ops::rope(Tensor::zeros({1, 20, 2, 8}), t); });  // default ids run past the table
  EXPECT_NE(m.find("position_ids[0, 16] = 16"), std::string::npos) << m;
  m = message_of([&] { ops::rope(Tensor::zeros({1, 3, 2, 6}), t); });
  EXPECT_NE(m.find("rope: the table rotates 8 dims but x [1, 3, 2, 6] has head_dim 6"), std::string::npos) << m;
  m = message_of([&] { ops::rope(Tensor::zeros({3, 2, 8}), t); });
  EXPECT_NE(m.find("rope: x must be [batch, seq, heads, head_dim], got [3, 2, 8]"), std::string::npos) << m;
  m = message_of([&] { ops::rope(x, t, Tensor::from_vector(std::vector<int64_t>{0, 1}, {2})); });
  EXPECT_NE(m.find("position_ids has shape [2] but x has batch 1 and sequence 3"), std::string::npos) << m;
  m = message_of([] { ops::make_rope_table(7, 4, 10000.0); });
  EXPECT_NE(m.find("rotary_dim = 7 must be a positive even number"), std::string::npos) << m;
  ops::RopeScaling sc;
  sc.kind = ops::RopeScaling::Kind::yarn;
  sc.factor = 4;
  m = message_of([&] { ops::make_rope_table(8, 4, 10000.0, sc); });
  EXPECT_NE(m.find("rope_scaling.original_max_position_embeddings = 0 must be positive for YaRN"), std::string::npos) << m;
}
