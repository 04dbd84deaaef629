// The optimizer kernels' decision passes (kernels/cpu/optimizer.h): adamw_update_is_finite,
// muon_momentum and muon_apply_is_finite read the state without writing it, and their verdict is
// exactly whether the write pass would store inf or nan (the model copy's dtype included).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/kernels/cpu/optimizer.h"
#include "loom/optim/optimizer.h"

using namespace loom;
namespace k = loom::kernels::cpu;

namespace {

std::vector<uint32_t> bits(const Tensor& t) {
  std::vector<uint32_t> out;
  for (float f : t.to_float_vector()) out.push_back(std::bit_cast<uint32_t>(f));
  return out;
}

bool all_finite(const Tensor& t) {
  for (float f : t.to_float_vector())
    if (!std::isfinite(f)) return false;
  return true;
}

Tensor vec(std::vector<float> v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }

struct AdamCase {
  const char* what;
  std::vector<float> p, g, m, v;
  double lr;
  DType param_dtype;
};

// The verdict against the write pass itself, run on copies: every case where it says "finite"
// leaves p, m, v and the rounded model copy finite, and every other case does not.
TEST(OptimizerKernels, AdamWDecisionMatchesTheWritePass) {
  const float big = 3.4e38f, max = std::numeric_limits<float>::max();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<AdamCase> cases = {
      {"ordinary", {0.5f, -1.f, 2.f}, {1e-3f, -2e-3f, 0.f}, {0.f, 0.f, 0.f}, {0.f, 0.f, 0.f}, 1e-3, DType::f32},
      {"lr overflows the step", {0.5f, -1.f, 2.f}, {1e-3f, -2e-3f, 1e-3f}, {0, 0, 0}, {0, 0, 0}, 1e39, DType::f32},
      {"decay overflows p", {3e38f, -1.f, 2.f}, {1e-3f, -2e-3f, 1e-3f}, {0, 0, 0}, {0, 0, 0}, 1e35, DType::f32},
      {"g squared overflows v", {0.5f, -1.f, 2.f}, {1e-3f, 1e20f, 1e-3f}, {0, 0, 0}, {0, 0, 0}, 1e-3, DType::f32},
      {"m and v overflow", {0.5f}, {max}, {max}, {0}, 1e-3, DType::f32},
      {"nan grad", {0.5f, 1.f}, {nan, 0.f}, {0, 0}, {0, 0}, 1e-3, DType::f32},
      {"finite fp32, inf as bf16", {big}, {0.f}, {0}, {0}, 0.0, DType::bf16},
      {"finite fp32 and bf16", {3.38e38f}, {0.f}, {0}, {0}, 0.0, DType::bf16},
      {"finite fp32, inf as f16", {65520.f}, {0.f}, {0}, {0}, 0.0, DType::f16},
      {"finite f16", {65519.f}, {0.f}, {0}, {0}, 0.0, DType::f16},
  };
  const std::vector<bool> finite = {true, false, false, false, false, false, false, true, false, true};
  for (size_t c = 0; c < cases.size(); ++c) {
    const AdamCase& x = cases[c];
    const kernels::AdamWScalars s = optim::adamw_scalars(x.lr, 0.1, 0.9, 0.95, 1e-8, 1);
    Tensor p = vec(x.p), g = vec(x.g), m = vec(x.m), v = vec(x.v);
    const auto p0 = bits(p), m0 = bits(m), v0 = bits(v);
    const bool verdict = k::adamw_update_is_finite(p, g, m, v, x.param_dtype, s);
    EXPECT_EQ(verdict, finite[c]) << x.what;
    EXPECT_EQ(bits(p), p0) << x.what << ": the decision pass wrote the master";
    EXPECT_EQ(bits(m), m0) << x.what;
    EXPECT_EQ(bits(v), v0) << x.what;
    Tensor copy = Tensor::zeros({static_cast<int64_t>(x.p.size())}, x.param_dtype == DType::f32 ? DType::bf16
                                                                                                 : x.param_dtype);
    k::adamw_update(p, g, m, v, x.param_dtype == DType::f32 ? nullptr : &copy, s);
    const bool written_finite =
        all_finite(p) && all_finite(m) && all_finite(v) && (x.param_dtype == DType::f32 || all_finite(copy));
    EXPECT_EQ(verdict, written_finite) << x.what;
  }
}

// Work is split over threads in chunks: a single bad element anywhere in a large buffer is found.
TEST(OptimizerKernels, AdamWDecisionFindsOneElementInAnyChunk) {
  const int64_t n = 200000;
  const kernels::AdamWScalars s = optim::adamw_scalars(1e-3, 0.0, 0.9, 0.95, 1e-8, 3);
  Tensor p = Tensor::full({n}, 0.5), m = Tensor::zeros({n}), v = Tensor::zeros({n});
  for (int64_t at : {int64_t{0}, int64_t{40000}, n - 1}) {
    std::vector<float> g(static_cast<size_t>(n), 1e-3f);
    g[static_cast<size_t>(at)] = 1e30f;  // its square overflows v
    EXPECT_FALSE(k::adamw_update_is_finite(p, vec(g), m, v, DType::f32, s)) << at;
    g[static_cast<size_t>(at)] = 1e-3f;
    EXPECT_TRUE(k::adamw_update_is_finite(p, vec(g), m, v, DType::f32, s)) << at;
  }
}

// muon_momentum only reads the momentum; muon_apply stores exactly the M' it used, and the
// decision on W·decay − U agrees with the written values.
TEST(OptimizerKernels, MuonMomentumReadsAndApplyWritesTheSameValues) {
  Tensor m = vec({0.25f, -0.5f, 1.f, 2.f});
  const Tensor g = vec({0.1f, 0.2f, -0.3f, 0.4f});
  const auto m0 = bits(m);
  Tensor u = Tensor::zeros({4});
  EXPECT_TRUE(k::muon_momentum(m, g, 0.95f, false, u));
  EXPECT_EQ(bits(m), m0);
  Tensor w = vec({1.f, 2.f, 3.f, 4.f});
  EXPECT_TRUE(k::muon_apply_is_finite(w, u, 0.9f, DType::f32));
  k::muon_apply(w, m, g, 0.95f, u, 0.9f);
  // Without Nesterov, U = bf16(M'): the stored momentum rounds to exactly U.
  const std::vector<float> stored = m.to_float_vector(), update = u.to_float_vector();
  for (size_t i = 0; i < stored.size(); ++i) EXPECT_EQ(k::round_bf16_rne(stored[i]), update[i]) << i;
  // W = W·decay − U, element by element.
  EXPECT_EQ(w.to_float_vector()[2], 3.f * 0.9f - update[2]);

  // M' overflowing is reported; the momentum is still untouched.
  const float max = std::numeric_limits<float>::max();
  Tensor big = vec({max, 0.f});
  const auto big0 = bits(big);
  Tensor u2 = Tensor::zeros({2});
  EXPECT_FALSE(k::muon_momentum(big, vec({max, 0.f}), 0.95f, true, u2));
  EXPECT_EQ(bits(big), big0);
  // A finite fp32 result that overflows the bf16 model copy, and a decay that overflows W.
  EXPECT_TRUE(k::muon_apply_is_finite(vec({3.4e38f}), vec({0.f}), 1.f, DType::f32));
  EXPECT_FALSE(k::muon_apply_is_finite(vec({3.4e38f}), vec({0.f}), 1.f, DType::bf16));
  EXPECT_FALSE(k::muon_apply_is_finite(vec({1.f, 1e30f}), vec({0.f, 0.f}), -1e10f, DType::f32));
  EXPECT_FALSE(k::muon_apply_is_finite(vec({1.f}), vec({std::numeric_limits<float>::infinity()}), 1.f, DType::f32));
}

}  // namespace
