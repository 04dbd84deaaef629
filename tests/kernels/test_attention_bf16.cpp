// The flash kernel's bf16 tile products (kernels/cpu/attention_bf16.h) and the attention kernel on
// the bf16 matrix path: the packing and the vdpbf16ps micro-kernel against an f64 product, then
// forward and backward against the f64 kernel in every mask mode (causal, documents, q offsets,
// rows that see no key, caller-given key ranges, non-causal), GQA, Dv != D, sizes and tiles that
// are no multiple of each other, the same bits for any thread count, and the fp32 path unchanged
// for bf16 inputs. Both paths run in one process (attention_forward_on / _backward_on); where the
// CPU has no AVX512-BF16 the matrix-path tests skip and say so. CTest runs the dispatch test
// again under each LOOM_MAX_CPU_ISA cap.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/attention.h"
#include "loom/kernels/cpu/attention_bf16.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "attention_test_util.h"
#include "testing/gradcheck.h"

using namespace loom;
namespace kc = loom::kernels::cpu;
namespace bt = loom::kernels::cpu::bf16_tiles;
using loom::testing::random_f64;

namespace {

bool has_units() { return kc::matrix_dispatch().features.avx512_bf16; }
#define SKIP_WITHOUT_UNITS()                                                                  \
  if (!has_units()) GTEST_SKIP() << "this CPU has no AVX512-BF16 (matrix path: "             \
                                 << kc::describe_matrix_path() << "): the bf16 tile products cannot run"

constexpr kc::MatrixPath kUnits = kc::MatrixPath::avx512_bf16;

// Values exactly representable in bf16, as fp32 (the kernel's operands are such copies).
std::vector<float> bf16_values(int64_t n, uint64_t seed) {
  return random_f64({n}, seed, -2, 2).to(DType::bf16).to_float_vector();
}

float bf16_round(float x) { return Tensor::from_vector(std::vector<float>{x}, {1}).to(DType::bf16).to_float_vector()[0]; }

// ---- The micro-kernel -------------------------------------------------------------------------

// c = alpha·op(a)·op(b) + beta·c through the packers, for a [m,k] or aᵀ stored [k,m] and b [k,n] or
// bᵀ stored [n,k], against the f64 product of the same (bf16-exact) values.
void check_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, float beta) {
  const int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5;  // row pitches wider than the rows
  const std::vector<float> a = bf16_values((ta ? k : m) * lda, 1), b = bf16_values((tb ? n : k) * ldb, 2);
  std::vector<float> c = bf16_values(m * n, 3), c0 = c;
  auto A = [&](int64_t i, int64_t p) { return double(ta ? a[p * lda + i] : a[i * lda + p]); };
  auto B = [&](int64_t p, int64_t j) { return double(tb ? b[j * ldb + p] : b[p * ldb + j]); };
  const int64_t pairs = (k + 1) / 2;
  std::vector<uint32_t> aw(static_cast<size_t>(m * pairs)), bw(static_cast<size_t>(pairs * n));
  int64_t a_row = pairs, a_inner = 1;
  if (ta) {
    bt::pack_pairs(a.data(), lda, k, m, aw.data(), m);
    a_row = 1;
    a_inner = m;
  } else {
    bt::pack_rows(a.data(), lda, m, k, aw.data());
  }
  if (tb) bt::pack_cols(b.data(), ldb, n, k, bw.data(), n);
  else bt::pack_pairs(b.data(), ldb, k, n, bw.data(), n);
  bt::gemm(m, n, pairs, alpha, aw.data(), a_row, a_inner, bw.data(), n, beta, c.data(), n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double want = beta * c0[i * n + j], magnitude = std::abs(want);
      for (int64_t p = 0; p < k; ++p) {
        want += alpha * A(i, p) * B(p, j);
        magnitude += std::abs(alpha * A(i, p) * B(p, j));
      }
      // bf16 products are exact in fp32; only the fp32 accumulation rounds (k + 2 roundings).
      ASSERT_NEAR(c[i * n + j], want, (k + 2) * std::ldexp(1.0, -24) * magnitude + 1e-30)
          << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k << " at " << i << "," << j;
    }
}

}  // namespace

TEST(AttentionBf16Tiles, ProductsOfEveryLayoutMatchF64) {
  SKIP_WITHOUT_UNITS();
  // Sizes around the 8-row, 16/32-column blocks and an odd inner size (a zero-padded last pair).
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (auto [m, n, k] : {std::tuple{1, 1, 1}, std::tuple{13, 37, 23}, std::tuple{8, 32, 64}, std::tuple{17, 16, 2},
                             std::tuple{9, 70, 31}})
        for (auto [alpha, beta] : {std::pair{1.f, 0.f}, std::pair{0.125f, 1.f}, std::pair{-2.f, 0.5f}})
          check_product(ta, tb, m, n, k, alpha, beta);
}

TEST(AttentionBf16Tiles, PackingRoundsToNearestEven) {
  SKIP_WITHOUT_UNITS();
  // Values between bf16 neighbours (P and dS are rounded when packed): the same as Tensor::to.
  const std::vector<double> raw = random_f64({3 * 21}, 7, -3, 3).to_double_vector();
  std::vector<float> x(raw.begin(), raw.end());
  std::vector<uint32_t> w(3 * 11);
  bt::pack_rows(x.data(), 21, 3, 21, w.data());
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t p = 0; p < 11; ++p) {
      const uint32_t word = w[r * 11 + p];
      for (int half = 0; half < 2; ++half) {
        const int64_t col = 2 * p + half;
        const uint32_t bits = (half ? word >> 16 : word & 0xFFFF) << 16;
        float got;
        std::memcpy(&got, &bits, 4);
        EXPECT_EQ(got, col < 21 ? bf16_round(x[r * 21 + col]) : 0.f) << r << "," << col;
      }
    }
}

// ---- The attention kernel on the matrix path ------------------------------------------------------

namespace {

struct Case {
  std::string name;
  int64_t B, Sq, Sk, H, KV, D, Dv;
  bool causal;
  int64_t q_offset;
  std::vector<int64_t> doc_ends;  // [B, K] flattened; empty = none
  int64_t docs_per_row;
  bool as_key_ranges;  // hand the mask over as explicit per-row ranges
};

std::vector<Case> cases() {
  return {
      {"full", 2, 37, 37, 2, 2, 16, 16, false, 0, {}, 0, false},
      {"causal_gqa_dv", 1, 77, 77, 6, 2, 64, 40, true, 0, {}, 0, false},
      {"documents", 2, 70, 70, 4, 1, 32, 32, true, 0, {13, 50, 70, 31, 31, 70}, 3, false},
      {"documents_tail_unowned", 1, 45, 45, 2, 2, 24, 17, true, 0, {9, 30, 30}, 3, false},
      {"documents_noncausal", 1, 40, 40, 2, 1, 20, 20, false, 0, {7, 33, 40}, 3, false},
      {"q_offset", 1, 21, 60, 4, 2, 32, 32, true, 39, {}, 0, false},
      {"q_offset_negative_empty_rows", 1, 30, 30, 2, 2, 16, 16, true, -5, {}, 0, false},
      {"documents_q_offset", 1, 25, 64, 2, 1, 16, 8, true, 30, {11, 47, 64}, 3, false},
      {"key_ranges", 2, 33, 41, 4, 2, 16, 24, true, 8, {5, 22, 41, 19, 20, 41}, 3, true},
  };
}

// The mask of a case; as_key_ranges turns it into explicit ranges through the f64 kernel's own
// reading (the key-range test of test_attention.cpp shows the two mean the same).
kernels::AttentionMask mask_of(const Case& c) {
  kernels::AttentionMask m;
  m.causal = c.causal;
  m.q_offset = c.q_offset;
  if (!c.doc_ends.empty()) m.doc_ends = Tensor::from_vector(c.doc_ends, {c.B, c.docs_per_row});
  if (!c.as_key_ranges) return m;
  std::vector<std::vector<int64_t>> ends;
  for (int64_t b = 0; b < c.B; ++b)
    ends.emplace_back(c.doc_ends.begin() + b * c.docs_per_row, c.doc_ends.begin() + (b + 1) * c.docs_per_row);
  kernels::AttentionMask given;
  given.key_ranges = loom::testing::ranges_of(c.B, c.Sq, c.Sk, c.q_offset, ends);
  return given;
}

struct Inputs {
  Tensor q, k, v, dout;  // bf16
};

Inputs inputs_of(const Case& c, uint64_t seed) {
  return {random_f64({c.B, c.Sq, c.H, c.D}, seed, -2, 2).to(DType::bf16),
          random_f64({c.B, c.Sk, c.KV, c.D}, seed + 1, -2, 2).to(DType::bf16),
          random_f64({c.B, c.Sk, c.KV, c.Dv}, seed + 2).to(DType::bf16),
          random_f64({c.B, c.Sq, c.H, c.Dv}, seed + 3).to(DType::bf16)};
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

// max |got - want| / max |want| (0 when want is all zeros and got matches).
double relative_error(const Tensor& got, const Tensor& want) {
  const auto g = got.to_double_vector(), w = want.to_double_vector();
  EXPECT_EQ(g.size(), w.size());
  double err = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
    if (std::isinf(w[i])) {
      EXPECT_EQ(g[i], w[i]) << i;  // lse of a row that sees no key
      continue;
    }
    EXPECT_TRUE(std::isfinite(g[i])) << i;
    err = std::max(err, std::abs(g[i] - w[i]));
  }
  return err / std::max(max_abs(w), 1e-300);
}

std::vector<uint16_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const size_t bytes = static_cast<size_t>(c.numel()) * dtype_size(c.dtype());
  std::vector<uint16_t> b(bytes / 2);
  std::memcpy(b.data(), c.raw_data(), bytes);
  return b;
}

}  // namespace

// Tolerance: the inputs are bf16 values, so Q·Kᵀ and dO·Vᵀ multiply exactly and accumulate in
// fp32 as on the fp32 path; what the matrix path adds is P and dS rounded to bf16 (relative
// error 2^-9 each) as operands of PV, Pᵀ·dO, dS·K and dSᵀ·Q. Each result is a sum of such
// operands times bf16 values, so its error is at most 2^-9 of the sum of |terms|, which at these
// sizes is a few times max |result|; the bf16 output rounding adds 2^-9 relative. Measured: at most
// 5.6e-3 of max |result| (dk of documents_tail_unowned). Stated bound: 1e-2 · max |ref| (the bf16 bound the fp32 path is held to in
// tests/ops/test_attention.cpp), for out, lse and every grad.
TEST(AttentionBf16, MatrixPathWithinBf16ToleranceOfF64InEveryMaskMode) {
  SKIP_WITHOUT_UNITS();
  const kc::AttentionTiles odd{5, 7, 6, 9};  // every tile edge, odd tile starts, partial pairs
  for (const Case& c : cases())
    for (const kc::AttentionTiles& tiles : {kc::AttentionTiles(), odd}) {
      const Inputs in = inputs_of(c, 11);
      const kernels::AttentionMask m = mask_of(c);
      const double scale = 1.0 / std::sqrt(double(c.D));
      const auto ref = kc::attention_forward(in.q.to(DType::f64), in.k.to(DType::f64), in.v.to(DType::f64), scale, m, true);
      const auto rg = kc::attention_backward(in.dout.to(DType::f64), in.q.to(DType::f64), in.k.to(DType::f64),
                                             in.v.to(DType::f64), ref.out, ref.lse, scale, m);
      const auto got = kc::attention_forward_on(kUnits, in.q, in.k, in.v, scale, m, true, tiles);
      const auto gg = kc::attention_backward_on(kUnits, in.dout, in.q, in.k, in.v, got.out, got.lse, scale, m, tiles);
      ASSERT_EQ(got.out.dtype(), DType::bf16);
      ASSERT_EQ(gg.dk.dtype(), DType::bf16);
      const std::string what = c.name + (tiles.fwd_q_block == 5 ? " odd tiles" : " default tiles");
      const std::vector<std::pair<const char*, std::pair<Tensor, Tensor>>> pairs = {
          {"out", {got.out, ref.out}}, {"lse", {got.lse, ref.lse}}, {"max_logits", {got.max_logits, ref.max_logits}},
          {"dq", {gg.dq, rg.dq}},      {"dk", {gg.dk, rg.dk}},      {"dv", {gg.dv, rg.dv}}};
      for (const auto& [name, p] : pairs) EXPECT_LT(relative_error(p.first, p.second), 1e-2) << what << " " << name;
    }
}

TEST(AttentionBf16, RowsThatSeeNoKeyAreZeroOnTheMatrixPath) {
  SKIP_WITHOUT_UNITS();
  const Case c = cases()[6];  // q_offset -5: rows 0..4 precede every key
  const Inputs in = inputs_of(c, 21);
  const kernels::AttentionMask m = mask_of(c);
  const auto f = kc::attention_forward_on(kUnits, in.q, in.k, in.v, 0.25, m, false);
  const auto g = kc::attention_backward_on(kUnits, in.dout, in.q, in.k, in.v, f.out, f.lse, 0.25, m);
  const auto out = f.out.to_double_vector(), lse = f.lse.to_double_vector(), dq = g.dq.to_double_vector();
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t h = 0; h < c.H; ++h) {
      EXPECT_TRUE(std::isinf(lse[h * c.Sq + i]) && lse[h * c.Sq + i] < 0) << i;
      for (int64_t x = 0; x < c.Dv; ++x) EXPECT_EQ(out[(i * c.H + h) * c.Dv + x], 0.0) << i;
      for (int64_t x = 0; x < c.D; ++x) EXPECT_EQ(dq[(i * c.H + h) * c.D + x], 0.0) << i;
    }
}

TEST(AttentionBf16, MatrixPathGivesTheSameBitsOnAnyThreadCount) {
  SKIP_WITHOUT_UNITS();
  const int before = num_threads();
  Case c{"docs", 2, 300, 300, 4, 2, 64, 64, true, 0, {100, 300, 300, 17, 290, 300}, 3, false};
  const Inputs in = inputs_of(c, 31);
  const kernels::AttentionMask m = mask_of(c);
  std::vector<std::vector<uint16_t>> runs[2];
  for (int t : {1, 2}) {
    set_num_threads(t);
    const auto f = kc::attention_forward_on(kUnits, in.q, in.k, in.v, 0.125, m, true);
    const auto g = kc::attention_backward_on(kUnits, in.dout, in.q, in.k, in.v, f.out, f.lse, 0.125, m);
    runs[t - 1] = {bits_of(f.out), bits_of(f.lse), bits_of(f.max_logits), bits_of(g.dq), bits_of(g.dk), bits_of(g.dv)};
  }
  set_num_threads(before);
  for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_EQ(runs[0][i], runs[1][i]) << "tensor " << i;
}

TEST(AttentionBf16, Fp32PathForBf16InputsIsTheFp32ComputationRoundedOnce) {
  // The fp32 path (an fp32-only CPU, or LOOM_MAX_CPU_ISA=fp32) widens bf16 once, computes as for
  // f32 inputs and rounds each result once: bit for bit the f32 kernel's result, rounded. On a CPU
  // with the units the matrix path must differ somewhere (P is rounded there), or it never ran.
  const Case c = cases()[2];
  const Inputs in = inputs_of(c, 41);
  const kernels::AttentionMask m = mask_of(c);
  const kc::AttentionTiles tiles{5, 7, 6, 9};
  const auto f32 = kc::attention_forward(in.q.to(DType::f32), in.k.to(DType::f32), in.v.to(DType::f32), 0.2, m, true, tiles);
  const auto g32 = kc::attention_backward(in.dout.to(DType::f32), in.q.to(DType::f32), in.k.to(DType::f32),
                                          in.v.to(DType::f32), f32.out.to(DType::bf16).to(DType::f32), f32.lse, 0.2, m, tiles);
  const auto f = kc::attention_forward_on(kc::MatrixPath::fp32, in.q, in.k, in.v, 0.2, m, true, tiles);
  const auto g = kc::attention_backward_on(kc::MatrixPath::fp32, in.dout, in.q, in.k, in.v, f.out, f.lse, 0.2, m, tiles);
  EXPECT_EQ(bits_of(f.out), bits_of(f32.out.to(DType::bf16)));
  EXPECT_EQ(bits_of(f.lse), bits_of(f32.lse));
  EXPECT_EQ(bits_of(g.dq), bits_of(g32.dq.to(DType::bf16)));
  EXPECT_EQ(bits_of(g.dk), bits_of(g32.dk.to(DType::bf16)));
  EXPECT_EQ(bits_of(g.dv), bits_of(g32.dv.to(DType::bf16)));
  if (!has_units()) return;
  const auto u = kc::attention_forward_on(kUnits, in.q, in.k, in.v, 0.2, m, true, tiles);
  EXPECT_NE(bits_of(u.out), bits_of(f.out)) << "the matrix path gave the fp32 path's bits: did it run?";
}

TEST(AttentionBf16, ProcessDispatchChoosesThePath) {
  // The entry points without a path take matrix_dispatch().path: under LOOM_MAX_CPU_ISA=fp32
  // (CTest's capped run) that is the fp32 path, which the test above holds to today's kernel.
  const Case c = cases()[1];
  const Inputs in = inputs_of(c, 51);
  const kernels::AttentionMask m = mask_of(c);
  const kc::MatrixPath path = kc::matrix_dispatch().path;
  const auto f = kc::attention_forward(in.q, in.k, in.v, 0.125, m, false);
  const auto want = kc::attention_forward_on(path, in.q, in.k, in.v, 0.125, m, false);
  EXPECT_EQ(bits_of(f.out), bits_of(want.out)) << kc::describe_matrix_path();
  const auto g = kc::attention_backward(in.dout, in.q, in.k, in.v, f.out, f.lse, 0.125, m);
  const auto gw = kc::attention_backward_on(path, in.dout, in.q, in.k, in.v, f.out, f.lse, 0.125, m);
  EXPECT_EQ(bits_of(g.dq), bits_of(gw.dq));
  EXPECT_EQ(bits_of(g.dk), bits_of(gw.dk));
  EXPECT_EQ(bits_of(g.dv), bits_of(gw.dv));
}
