// kernels/cpu/onednn_gemm.h against an f64 reference: transposes and strided views read in place,
// alpha and beta (output scale, sum post-op), one cached primitive per shape. fp32 operands run on
// every CPU, so the wrapper is exercised everywhere; bf16 operands where oneDNN has a bf16 matmul
// (AVX-512 and up) — elsewhere those tests skip and say so. GemmPaths.* run the public gemm() on
// whatever path the dispatch took (CTest runs them again under each LOOM_MAX_CPU_ISA cap).
#include <gtest/gtest.h>

#include <cmath>

#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/kernels/cpu/gemm.h"
#include "loom/kernels/cpu/onednn_gemm.h"
#include "testing/gradcheck.h"

using namespace loom;
using namespace loom::kernels::cpu;
using loom::testing::random_f64;

namespace {

struct Reference {
  std::vector<double> value;      // alpha · op(a)·op(b) + beta · c0, in f64 from the stored values
  std::vector<double> magnitude;  // the same with every term's absolute value (the error's scale)
};

Reference reference(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c0, double alpha,
                    double beta) {
  Tensor A = (ta ? a.transpose(0, 1) : a).to(DType::f64).contiguous();
  Tensor B = (tb ? b.transpose(0, 1) : b).to(DType::f64).contiguous();
  const int64_t m = A.size(0), k = A.size(1), n = B.size(1);
  auto av = A.to_double_vector(), bv = B.to_double_vector(), cv = c0.to(DType::f64).contiguous().to_double_vector();
  Reference r;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, s_abs = 0;
      for (int64_t p = 0; p < k; ++p) {
        s += av[i * k + p] * bv[p * n + j];
        s_abs += std::abs(av[i * k + p] * bv[p * n + j]);
      }
      r.value.push_back(alpha * s + beta * cv[i * n + j]);
      r.magnitude.push_back(std::abs(alpha) * s_abs + std::abs(beta * cv[i * n + j]));
    }
  return r;
}

// Every element within rel · magnitude (+ the output dtype's rounding of the value).
void expect_close(const Tensor& c, const Reference& r, double rel, const std::string& what) {
  auto got = c.to(DType::f64).contiguous().to_double_vector();
  ASSERT_EQ(got.size(), r.value.size());
  const double out_ulp = c.dtype() == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -24);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], r.value[i], rel * r.magnitude[i] + out_ulp * std::abs(r.value[i]) + 1e-30)
        << what << " at " << i;
}

Tensor operand(const Shape& s, uint64_t seed, DType d) { return random_f64(s, seed).to(d); }

// op(a)·op(b) for every transpose combination and a strided (narrowed) a, with alpha and beta.
void check_products(DType operands, DType out, double rel) {
  const int64_t m = 7, n = 12, k = 33;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = operand(ta ? Shape{k, m} : Shape{m, k}, 1, operands);
      Tensor b = operand(tb ? Shape{n, k} : Shape{k, n}, 2, operands);
      for (auto [alpha, beta] : {std::pair{1.0, 0.0}, std::pair{0.5, 1.0}, std::pair{-2.0, 0.25}}) {
        Tensor c = operand({m, n}, 3, out), c0 = c.clone();
        onednn_gemm(a, ta, b, tb, c, alpha, beta);
        expect_close(c, reference(a, ta, b, tb, c0, alpha, beta), rel,
                     "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) + " alpha=" + std::to_string(alpha));
      }
    }
  // A view with a row pitch wider than its rows (columns 3..3+k of a wider matrix), and an output
  // that is itself a column block of a wider one: both read and written in place.
  Tensor wide = operand({m, k + 9}, 4, operands);
  Tensor a = wide.narrow(1, 3, k), b = operand({k, n}, 5, operands);
  Tensor c_wide = Tensor::zeros({m, n + 4}, out), c = c_wide.narrow(1, 2, n);
  onednn_gemm(a, false, b, false, c, 1.0, 0.0);
  expect_close(c, reference(a, false, b, false, c.clone(), 1.0, 0.0), rel, "strided");
  auto outside = c_wide.narrow(1, 0, 2).to(DType::f64).contiguous().to_double_vector();
  for (double v : outside) EXPECT_EQ(v, 0.0) << "wrote outside the output view";
}

}  // namespace

TEST(OnednnGemm, Fp32MatchesF64Reference) {
  // fp32 products summed in fp32: k·2^-24 of the magnitude, with room for blocking.
  check_products(DType::f32, DType::f32, 64 * std::ldexp(1.0, -24));
}

TEST(OnednnGemm, Bf16MatchesF64ReferenceWhereOnednnHasIt) {
  if (!onednn_has_matmul(DType::bf16))
    GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (it needs AVX-512; path "
                 << describe_matrix_path() << ")";
  // bf16 operands, exact products, fp32 sums: as tight as fp32; bf16 outputs one rounding more.
  check_products(DType::bf16, DType::f32, 64 * std::ldexp(1.0, -24));
  check_products(DType::bf16, DType::bf16, 64 * std::ldexp(1.0, -24));
}

TEST(OnednnGemm, OnePrimitivePerShape) {
  Tensor a = operand({5, 8}, 6, DType::f32), b = operand({8, 3}, 7, DType::f32);
  Tensor c = Tensor::empty({5, 3}, DType::f32);
  onednn_gemm(a, false, b, false, c, 1.0, 0.0);
  const size_t after_first = onednn_cached_primitives();
  for (int i = 0; i < 3; ++i) onednn_gemm(a, false, b, false, c, 1.0, 0.0);
  EXPECT_EQ(onednn_cached_primitives(), after_first) << "a repeated shape must reuse its primitive";
  Tensor c2 = Tensor::empty({5, 3}, DType::f32);
  onednn_gemm(a, false, b, false, c2, 1.0, 1.0);  // beta is part of the primitive
  EXPECT_EQ(onednn_cached_primitives(), after_first + 1);
}

TEST(OnednnGemm, RejectsWhatItCannotMultiply) {
  Tensor a = Tensor::zeros({4, 3}), b = Tensor::zeros({5, 2}), c = Tensor::zeros({4, 2});
  EXPECT_THROW(onednn_gemm(a, false, b, false, c, 1.0, 0.0), ShapeError);
  Tensor a64 = Tensor::zeros({4, 3}, DType::f64), b64 = Tensor::zeros({3, 2}, DType::f64);
  Tensor c64 = Tensor::zeros({4, 2}, DType::f64);
  EXPECT_THROW(onednn_gemm(a64, false, b64, false, c64, 1.0, 0.0), DTypeError);
  Tensor c16 = Tensor::zeros({4, 2}, DType::bf16);
  EXPECT_THROW(onednn_gemm(a, false, Tensor::zeros({3, 2}), false, c16, 1.0, 0.0), DTypeError)
      << "fp32 operands cannot round into bf16 here";
}

// The public gemm() on the path the dispatch chose (oneDNN on AMX / AVX512-BF16, OpenBLAS on the
// fp32 path): bf16 operands, fp32 sums, one rounding into a bf16 output; fp32 main-grad outputs
// unrounded; a transposed weight read in place.
TEST(GemmPaths, Bf16GemmWithinBf16ToleranceOnTheChosenPath) {
  const int64_t m = 9, n = 16, k = 40;
  Tensor x = operand({m, k}, 8, DType::bf16), w = operand({n, k}, 9, DType::bf16);
  Tensor y = Tensor::empty({m, n}, DType::bf16);
  gemm(x, false, w, true, y, 1.0, 0.0);  // forward: x · wᵀ
  expect_close(y, reference(x, false, w, true, y.clone(), 1.0, 0.0), 64 * std::ldexp(1.0, -24), "forward");
  Tensor g = operand({m, n}, 10, DType::bf16);
  Tensor dx = Tensor::empty({m, k}, DType::bf16);
  gemm(g, false, w, false, dx, 1.0, 0.0);  // input grad: g · w
  expect_close(dx, reference(g, false, w, false, dx.clone(), 1.0, 0.0), 64 * std::ldexp(1.0, -24), "dgrad");
  Tensor dw = operand({n, k}, 11, DType::f32), dw0 = dw.clone();
  gemm(g, true, x, false, dw, 1.0, 1.0);  // weight grad accumulated in fp32: dw += gᵀ · x
  expect_close(dw, reference(g, true, x, false, dw0, 1.0, 1.0), 64 * std::ldexp(1.0, -24), "wgrad");
  SCOPED_TRACE(describe_matrix_path());
}
