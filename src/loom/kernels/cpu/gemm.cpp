#include "loom/kernels/cpu/gemm.h"

#include <cblas.h>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/kernels/cpu/onednn_gemm.h"
#include "loom/kernels/cpu/skinny_gemm.h"
#include "loom/kernels/cpu/vec.h"

namespace loom::kernels::cpu {

namespace {

// A 2-D operand as BLAS sees it: pointer, leading dim, and whether memory is transposed relative
// to the logical row-major matrix.
struct BlasMatrix {
  Tensor holder;  // keeps a converted/contiguous copy alive
  const void* data;
  int64_t ld;
  bool transposed;
};

// Rows of a bf16 matrix with unit inner stride, widened into a contiguous fp32 one; vectorised
// and spread over the threads (a bf16 GEMM on the fp32 path widens both operands on every call,
// so this runs as often as the GEMM). The same values as Tensor::to, which converts element by
// element.
Tensor widen_bf16_rows(const Tensor& t) {
  const int64_t rows = t.shape()[0], cols = t.shape()[1], ld = t.strides()[0];
  Tensor out = Tensor::empty({rows, cols}, DType::f32);
  const bf16* src = static_cast<const bf16*>(t.raw_data());
  float* dst = static_cast<float*>(out.raw_data());
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) vec::widen_row(src + r * ld, dst + r * cols, cols);
  });
  return out;
}

// Rounds a contiguous fp32 [rows, cols] into bf16 c (unit inner stride), like widen_bf16_rows.
void narrow_rows_to_bf16(const Tensor& src32, Tensor& c) {
  const int64_t rows = c.shape()[0], cols = c.shape()[1], ld = c.strides()[0];
  const float* src = static_cast<const float*>(src32.raw_data());
  bf16* dst = static_cast<bf16*>(c.raw_data());
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) vec::narrow_row(src + r * cols, dst + r * ld, cols);
  });
}

bool unit_inner_stride(const Tensor& t) { return t.strides()[1] == 1 || t.shape()[1] <= 1; }

BlasMatrix as_blas(const Tensor& t, DType compute) {
  Tensor x = t.dtype() == compute ? t
             : t.dtype() == DType::bf16 && compute == DType::f32 && unit_inner_stride(t) ? widen_bf16_rows(t)
                                                                                         : t.to(compute);
  const int64_t rows = x.shape()[0], cols = x.shape()[1];
  if (x.strides()[1] == 1 && (x.strides()[0] >= std::max<int64_t>(cols, 1) || rows <= 1))
    return {x, x.raw_data(), std::max<int64_t>(rows <= 1 ? cols : x.strides()[0], 1), false};
  if (x.strides()[0] == 1 && (x.strides()[1] >= std::max<int64_t>(rows, 1) || cols <= 1))
    return {x, x.raw_data(), std::max<int64_t>(cols <= 1 ? rows : x.strides()[1], 1), true};
  Tensor c = x.contiguous();
  return {c, c.raw_data(), std::max<int64_t>(cols, 1), false};
}

void blas_gemm(DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
               const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c,
               int64_t ldc) {
  auto TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  if (dt == DType::f64) {
    cblas_dgemm(CblasRowMajor, TA, TB, m, n, k, alpha, static_cast<const double*>(a), lda,
                static_cast<const double*>(b), ldb, beta, static_cast<double*>(c), ldc);
  } else {
    cblas_sgemm(CblasRowMajor, TA, TB, m, n, k, static_cast<float>(alpha),
                static_cast<const float*>(a), lda, static_cast<const float*>(b), ldb,
                static_cast<float>(beta), static_cast<float*>(c), ldc);
  }
}

void check_gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, int64_t& m, int64_t& n,
                int64_t& k, const char* op) {
  LOOM_CHECK(a.dim() == 2 && b.dim() == 2, ShapeError, op, ": operands must be 2-D, got ",
             a.shape().str(), " and ", b.shape().str());
  check_same_dtype(a, b, op);
  check_floating(a, op, "a");
  check_device_supported(a.device(), op);
  m = ta ? a.shape()[1] : a.shape()[0];
  k = ta ? a.shape()[0] : a.shape()[1];
  int64_t kb = tb ? b.shape()[1] : b.shape()[0];
  n = tb ? b.shape()[0] : b.shape()[1];
  LOOM_CHECK(k == kb, ShapeError, op, ": inner dimensions differ: ", a.shape().str(),
             ta ? "ᵀ" : "", " · ", b.shape().str(), tb ? "ᵀ" : "", " (", k, " vs ", kb, ")");
}

bool positive_strides(const Tensor& t) { return t.strides()[0] > 0 && t.strides()[1] > 0; }

// Which library multiplies, by operand dtype and size. On a CPU with bf16 matrix units:
// - bf16: oneDNN, on the bf16 operands in place (no widening), accumulating in fp32.
// - fp32: oneDNN too, from kOnednnMinFlops up. Measured with bench_linear on the size-B shapes,
//   2 threads: on a Zen 5 (AVX512-BF16) oneDNN's brgemm avx512_core ran 200-217 GFLOP/s against
//   67-108 for OpenBLAS 0.3.21 (whose kernels predate the core); on a Xeon with AMX both reached
//   350-390. Below the threshold oneDNN's per-call cost (a cache lookup and three memory
//   descriptors, a few microseconds) outweighs it, and small GEMMs usually run inside a parallel
//   region, one per thread, where OpenBLAS is cheapest.
// On the fp32 path (neither AMX-BF16 nor AVX512-BF16) everything stays on OpenBLAS, bit for bit
// what it always computed.
constexpr double kOnednnMinFlops = 4e6;

bool on_onednn(DType operands, int64_t m, int64_t n, int64_t k) {
  if (!bf16_matrix_units()) return false;
  if (operands == DType::bf16) return true;
  return operands == DType::f32 && 2.0 * static_cast<double>(m) * n * k >= kOnednnMinFlops;
}

}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha,
          double beta) {
  int64_t m, n, k;
  check_gemm(a, trans_a, b, trans_b, m, n, k, "gemm");
  LOOM_CHECK(c.dim() == 2 && c.shape()[0] == m && c.shape()[1] == n, ShapeError,
             "gemm: output has shape ", c.shape().str(), ", expected [", m, ", ", n, "]");
  LOOM_CHECK(c.dtype() == a.dtype() || (c.dtype() == DType::f32 && a.dtype() != DType::f64),
             DTypeError, "gemm: output dtype ", dtype_name(c.dtype()), " cannot hold a product of ",
             dtype_name(a.dtype()), " operands (use the same dtype, or float32 for bf16/f16)");
  if (m == 0 || n == 0) return;
  if (k > 0 && skinny_gemm_applies(a, trans_a, b, trans_b, c)) {
    skinny_gemm(a, b, c, alpha, beta, *skinny_kernel());
    return;
  }
  if (k > 0 && on_onednn(a.dtype(), m, n, k) && positive_strides(a) && positive_strides(b) && positive_strides(c)) {
    onednn_gemm(a, trans_a, b, trans_b, c, alpha, beta);
    return;
  }
  const DType compute = a.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const bool direct = c.dtype() == compute && c.strides()[1] == 1 &&
                      (c.strides()[0] >= n || m == 1);
  Tensor cc = direct ? c : beta == 0.0 ? Tensor::empty({m, n}, compute) : c.to(compute).contiguous();
  BlasMatrix A = as_blas(a, compute), B = as_blas(b, compute);
  blas_gemm(compute, trans_a != A.transposed, trans_b != B.transposed, m, n, k, alpha, A.data,
            A.ld, B.data, B.ld, beta, cc.raw_data(), direct ? std::max<int64_t>(c.strides()[0], n) : n);
  if (direct) return;
  if (c.dtype() == DType::bf16 && unit_inner_stride(c)) narrow_rows_to_bf16(cc, c);
  else c.copy_(cc);
}

Tensor matmul_2d(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                 std::optional<DType> out_dtype) {
  int64_t m, n, k;
  check_gemm(a, trans_a, b, trans_b, m, n, k, "matmul");
  Tensor c = Tensor::empty({m, n}, out_dtype.value_or(a.dtype()));
  gemm(a, trans_a, b, trans_b, c, 1.0, 0.0);
  return c;
}

void bmm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c, double alpha,
         double beta) {
  LOOM_CHECK(a.dim() == 3 && b.dim() == 3 && c.dim() == 3, ShapeError,
             "bmm: operands must be 3-D, got ", a.shape().str(), ", ", b.shape().str(), " and ",
             c.shape().str());
  const int64_t batch = a.shape()[0];
  LOOM_CHECK(b.shape()[0] == batch && c.shape()[0] == batch, ShapeError,
             "bmm: batch sizes differ: ", a.shape().str(), ", ", b.shape().str(), ", ",
             c.shape().str());
  if (batch == 0) return;
  const int64_t m = c.shape()[1], n = c.shape()[2], k = trans_a ? a.shape()[1] : a.shape()[2];
  const double flops = 2.0 * static_cast<double>(m) * n * k;
  auto one = [&](int64_t i) {
    Tensor ci = c.select(0, i);
    gemm(a.select(0, i), trans_a, b.select(0, i), trans_b, ci, alpha, beta);
  };
  // Below ~4 MFLOP per matrix BLAS threading costs more than it gains: spread the batch instead.
  if (flops < 4e6 && batch > 1) {
    parallel_for(0, batch, 1, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) one(i);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i) one(i);
  }
}

}  // namespace loom::kernels::cpu
