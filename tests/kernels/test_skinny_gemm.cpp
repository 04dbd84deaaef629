// kernels/cpu/skinny_gemm.h against an f64 reference from the same bf16 values: every kernel the
// CPU has (AVX512-BF16, AVX2+FMA), 1 to 4 rows, row counts of b and inner sizes off the kernels'
// blocks (remainder rows, masked and scalar tails), alpha and beta, fp32 and bf16 outputs, a
// strided b; the same bits whatever the thread count; and gemm() takes it for a decode's rows only.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/gemm.h"
#include "loom/kernels/cpu/skinny_gemm.h"
#include "testing/gradcheck.h"

using namespace loom;
using namespace loom::kernels::cpu;
using loom::testing::random_f64;

namespace {

std::vector<SkinnyKernel> kernels_here() {
  std::vector<SkinnyKernel> out;
  for (SkinnyKernel k : {SkinnyKernel::avx512_bf16, SkinnyKernel::avx2_fma})
    if (skinny_kernel_supported(k)) out.push_back(k);
  return out;
}

// c = alpha · a · bᵀ + beta · c0 in f64 from the stored (bf16) values; the error's scale per entry.
void check(const Tensor& a, const Tensor& b, const Tensor& c0, const Tensor& c, double alpha, double beta,
           const std::string& what) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  const auto av = a.to(DType::f64).contiguous().to_double_vector();
  const auto bv = b.to(DType::f64).contiguous().to_double_vector();
  const auto cv = c0.to(DType::f64).contiguous().to_double_vector();
  const auto got = c.to(DType::f64).contiguous().to_double_vector();
  // fp32 accumulation over k terms, then (bf16 output) one rounding to 8 bits.
  const double out_eps = c.dtype() == DType::bf16 ? std::ldexp(1.0, -8) : 0.0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, scale = 0;
      for (int64_t p = 0; p < k; ++p) {
        s += av[i * k + p] * bv[j * k + p];
        scale += std::abs(av[i * k + p] * bv[j * k + p]);
      }
      const double want = alpha * s + beta * cv[i * n + j];
      const double tol = 1e-5 * std::abs(alpha) * scale + out_eps * std::abs(want) + 1e-12;
      ASSERT_NEAR(got[i * n + j], want, tol) << what << " at (" << i << ", " << j << ")";
    }
}

TEST(SkinnyGemm, MatchesAnF64ReferenceOnEveryKernelOfThisCpu) {
  const auto kernels = kernels_here();
  if (kernels.empty()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AVX2+FMA";
  for (SkinnyKernel kernel : kernels)
    for (int64_t m : {1, 2, 3, 4})
      for (int64_t n : {1, 5, 37})
        for (int64_t k : {7, 32, 45, 200})
          for (DType out : {DType::f32, DType::bf16})
            for (double beta : {0.0, 0.5}) {
              const Tensor a = random_f64({m, k}, 1).to(DType::bf16);
              const Tensor b = random_f64({n, k}, 2).to(DType::bf16);
              const Tensor c0 = random_f64({m, n}, 3).to(out);
              Tensor c = c0.clone();
              skinny_gemm(a, b, c, 1.5, beta, kernel);
              check(a, b, c0, c, 1.5, beta,
                    std::string(skinny_kernel_name(kernel)) + " m " + std::to_string(m) + " n " + std::to_string(n) +
                        " k " + std::to_string(k) + " " + dtype_name(out) + " beta " + std::to_string(beta));
            }
}

TEST(SkinnyGemm, ReadsAStridedWeightInPlace) {
  const auto kernels = kernels_here();
  if (kernels.empty()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AVX2+FMA";
  // The first 40 columns of a [9, 64] weight: rows 64 apart.
  const Tensor whole = random_f64({9, 64}, 4).to(DType::bf16);
  const Tensor b = whole.narrow(1, 0, 40);
  const Tensor a = random_f64({2, 40}, 5).to(DType::bf16);
  ASSERT_TRUE(skinny_gemm_applies(a, false, b, true, Tensor::empty({2, 9}, DType::f32)));
  for (SkinnyKernel kernel : kernels) {
    Tensor c = Tensor::zeros({2, 9}, DType::f32);
    skinny_gemm(a, b, c, 1.0, 0.0, kernel);
    check(a, b.contiguous(), Tensor::zeros({2, 9}, DType::f32), c, 1.0, 0.0, skinny_kernel_name(kernel));
  }
}

TEST(SkinnyGemm, TheSameBitsOnOneThreadAndOnTwo) {
  const auto kernels = kernels_here();
  if (kernels.empty()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AVX2+FMA";
  const Tensor a = random_f64({3, 256}, 6).to(DType::bf16);
  const Tensor b = random_f64({1000, 256}, 7).to(DType::bf16);
  const int threads = num_threads();
  for (SkinnyKernel kernel : kernels) {
    Tensor one = Tensor::zeros({3, 1000}, DType::f32), two = one.clone();
    set_num_threads(1);
    skinny_gemm(a, b, one, 1.0, 0.0, kernel);
    set_num_threads(2);
    skinny_gemm(a, b, two, 1.0, 0.0, kernel);
    EXPECT_EQ(one.to_float_vector(), two.to_float_vector()) << skinny_kernel_name(kernel);
  }
  set_num_threads(threads);
}

TEST(SkinnyGemm, GemmTakesItForAFewRowsOfBf16TimesATransposedWeight) {
  if (!skinny_kernel()) GTEST_SKIP() << "this CPU has neither AVX512-BF16 nor AVX2+FMA";
  const Tensor w = random_f64({6, 32}, 8).to(DType::bf16);
  for (int64_t m : {1, 4, 5}) {
    const Tensor x = random_f64({m, 32}, 9).to(DType::bf16);
    Tensor c = Tensor::zeros({m, 6}, DType::bf16);
    EXPECT_EQ(skinny_gemm_applies(x, false, w, true, c), m <= kSkinnyMaxRows) << m << " rows";
    gemm(x, false, w, true, c, 1.0, 0.0);
    check(x, w, Tensor::zeros({m, 6}, DType::bf16), c, 1.0, 0.0, std::to_string(m) + " rows through gemm");
  }
  const Tensor x = random_f64({2, 32}, 9).to(DType::bf16);
  EXPECT_FALSE(skinny_gemm_applies(x, false, w.transpose(0, 1).contiguous(), false, Tensor::empty({2, 6}, DType::bf16)))
      << "b not transposed: the weight's rows are not the product's columns";
  EXPECT_FALSE(skinny_gemm_applies(x.to(DType::f32), false, w.to(DType::f32), true, Tensor::empty({2, 6})))
      << "fp32 operands stay on the GEMM libraries";
}

}  // namespace
