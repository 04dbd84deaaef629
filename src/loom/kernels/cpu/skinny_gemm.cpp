#include "loom/kernels/cpu/skinny_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/cpu_isa.h"

// Only these functions use AVX-512 or AVX2: the attribute, not a build flag, so the binary stays
// runnable on any x86-64 (the caller checks the dispatch first).
#define LOOM_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define LOOM_AVX2_FMA __attribute__((target("avx2,fma")))

namespace loom::kernels::cpu {

namespace {

// dots[i] = a row i · the b row, for M rows of a, over k. The b row is read once, front to back,
// into four accumulators per a row (independent dpbf16 chains), and the lines 2 KiB ahead are
// prefetched: a thread's weights are one contiguous stream (the rows of its blocks follow each
// other), and reading four rows side by side instead, or without the prefetch, reached 20 and
// 40 of the 53 GB/s two Zen 5 cores read.
constexpr int64_t kPrefetchBytes = 2048;

template <int M>
LOOM_AVX512_BF16 void dots_avx512(const uint16_t* a, int64_t lda, const uint16_t* b, int64_t k, float* dots) {
  __m512 acc[M][4];
  for (int i = 0; i < M; ++i)
    for (int u = 0; u < 4; ++u) acc[i][u] = _mm512_setzero_ps();
  int64_t kk = 0;
  for (; kk + 128 <= k; kk += 128) {
    const char* ahead = reinterpret_cast<const char*>(b + kk) + kPrefetchBytes;
    __m512i bv[4];
    for (int u = 0; u < 4; ++u) {
      _mm_prefetch(ahead + 64 * u, _MM_HINT_T0);
      bv[u] = _mm512_loadu_si512(b + kk + 32 * u);
    }
    for (int i = 0; i < M; ++i)
      for (int u = 0; u < 4; ++u) {
        const __m512i av = _mm512_loadu_si512(a + i * lda + kk + 32 * u);
        acc[i][u] = _mm512_dpbf16_ps(acc[i][u], reinterpret_cast<const __m512bh&>(av),
                                     reinterpret_cast<const __m512bh&>(bv[u]));
      }
  }
  for (; kk < k; kk += 32) {
    // The last word masked: zeros past k add nothing.
    const __mmask32 mask = k - kk >= 32 ? ~__mmask32(0) : static_cast<__mmask32>((uint64_t{1} << (k - kk)) - 1);
    const __m512i bv = _mm512_maskz_loadu_epi16(mask, b + kk);
    for (int i = 0; i < M; ++i) {
      const __m512i av = _mm512_maskz_loadu_epi16(mask, a + i * lda + kk);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], reinterpret_cast<const __m512bh&>(av),
                                   reinterpret_cast<const __m512bh&>(bv));
    }
  }
  for (int i = 0; i < M; ++i) {
    // Summed through memory: GCC 12 warns of an uninitialised operand inside _mm512_reduce_add_ps.
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]), _mm512_add_ps(acc[i][2], acc[i][3])));
    float sum = 0;
    for (float v : lanes) sum += v;
    dots[i] = sum;
  }
}

LOOM_AVX2_FMA inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// The same with a already widened to fp32 (a32: M rows of k) and b widened in registers.
template <int M, int R>
LOOM_AVX2_FMA void dots_avx2(const float* a32, const uint16_t* b, int64_t ldb, int64_t k, float* dots) {
  __m256 acc[M][R];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  int64_t kk = 0;
  for (; kk + 8 <= k; kk += 8) {
    __m256 bv[R];
    for (int r = 0; r < R; ++r) {
      const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + r * ldb + kk));
      bv[r] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
    }
    for (int i = 0; i < M; ++i) {
      const __m256 av = _mm256_loadu_ps(a32 + i * k + kk);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm256_fmadd_ps(av, bv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) {
      float tail = 0;
      for (int64_t t = kk; t < k; ++t) tail += a32[i * k + t] * bf16::to_float(b[r * ldb + t]);
      dots[i * R + r] = horizontal_sum(acc[i][r]) + tail;
    }
}

struct Operands {
  const uint16_t* a;
  int64_t lda;
  std::vector<float> a32;  // a widened (AVX2 path)
  const uint16_t* b;
  int64_t ldb, m, n, k;
};

// dots of rows [j, j + rows) of b with every row of a, through the CPU's kernel.
template <int M>
void dots_block(const Operands& o, bool avx512, int64_t j, int64_t rows, float* dots) {
  const uint16_t* b = o.b + j * o.ldb;
  if (avx512) {
    for (int64_t r = 0; r < rows; ++r) {
      float one[M];
      dots_avx512<M>(o.a, o.lda, b + r * o.ldb, o.k, one);
      for (int i = 0; i < M; ++i) dots[i * rows + r] = one[i];
    }
    return;
  }
  if (rows == 2) return dots_avx2<M, 2>(o.a32.data(), b, o.ldb, o.k, dots);
  for (int64_t r = 0; r < rows; ++r) {
    float one[M];
    dots_avx2<M, 1>(o.a32.data(), b + r * o.ldb, o.ldb, o.k, one);
    for (int i = 0; i < M; ++i) dots[i * rows + r] = one[i];
  }
}

template <int M>
void run(const Operands& o, bool avx512, Tensor& c, float alpha, float beta) {
  // Rows of b per work item; the AVX2 kernel reads two side by side per load of a (16 registers).
  const int64_t block = avx512 ? 4 : 2;
  const int64_t blocks = (o.n + block - 1) / block;
  const int64_t ldc = c.strides()[0];
  const bool bf16_out = c.dtype() == DType::bf16;
  auto* c32 = bf16_out ? nullptr : static_cast<float*>(c.raw_data());
  auto* c16 = bf16_out ? static_cast<uint16_t*>(c.raw_data()) : nullptr;
  // At least 64 KiB of b per chunk: below, waking a thread costs more than its share.
  const int64_t grain = std::max<int64_t>(1, (int64_t{32} << 10) / std::max<int64_t>(o.k * block, 1));
  parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    float dots[M * 4];
    for (int64_t blk = b0; blk < b1; ++blk) {
      const int64_t j = blk * block, rows = std::min(block, o.n - j);
      dots_block<M>(o, avx512, j, rows, dots);
      for (int i = 0; i < M; ++i)
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t at = i * ldc + j + r;
          float v = alpha * dots[i * rows + r];
          if (beta != 0.0f) v += beta * (bf16_out ? bf16::to_float(c16[at]) : c32[at]);
          if (bf16_out) c16[at] = bf16::from_float(v);
          else c32[at] = v;
        }
    }
  });
}

}  // namespace

const char* skinny_kernel_name(SkinnyKernel kernel) {
  return kernel == SkinnyKernel::avx512_bf16 ? "avx512_bf16" : "avx2_fma";
}

bool skinny_kernel_supported(SkinnyKernel kernel) {
  const CpuFeatures& f = matrix_dispatch().features;
  return kernel == SkinnyKernel::avx512_bf16 ? f.avx512_bf16 : f.avx2_fma;
}

std::optional<SkinnyKernel> skinny_kernel() {
  // AVX512-BF16 only where the dispatch allows bf16 units: LOOM_MAX_CPU_ISA=fp32 caps it too.
  if (bf16_matrix_units() && skinny_kernel_supported(SkinnyKernel::avx512_bf16)) return SkinnyKernel::avx512_bf16;
  if (skinny_kernel_supported(SkinnyKernel::avx2_fma)) return SkinnyKernel::avx2_fma;
  return std::nullopt;
}

bool skinny_gemm_applies(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c) {
  if (trans_a || !trans_b || a.dtype() != DType::bf16 || b.dtype() != DType::bf16) return false;
  if (c.dtype() != DType::bf16 && c.dtype() != DType::f32) return false;
  const int64_t m = a.shape()[0];
  if (m < 1 || m > kSkinnyMaxRows) return false;
  const bool rows_contiguous = a.strides()[1] == 1 && b.strides()[1] == 1 && c.strides()[1] == 1 &&
                               b.strides()[0] >= b.shape()[1] && (m == 1 || (a.strides()[0] >= a.shape()[1] &&
                                                                             c.strides()[0] >= c.shape()[1]));
  return rows_contiguous && skinny_kernel().has_value();
}

void skinny_gemm(const Tensor& a, const Tensor& b, Tensor& c, double alpha, double beta, SkinnyKernel kernel) {
  LOOM_CHECK(skinny_kernel_supported(kernel), DeviceError, "skinny_gemm: this CPU cannot run the ",
             skinny_kernel_name(kernel), " kernel");
  Operands o;
  o.m = a.shape()[0];
  o.k = a.shape()[1];
  o.n = b.shape()[0];
  o.a = static_cast<const uint16_t*>(a.raw_data());
  o.lda = o.m == 1 ? o.k : a.strides()[0];
  o.b = static_cast<const uint16_t*>(b.raw_data());
  o.ldb = b.strides()[0];
  const bool avx512 = kernel == SkinnyKernel::avx512_bf16;
  if (!avx512) {
    o.a32.resize(static_cast<size_t>(o.m * o.k));
    for (int64_t i = 0; i < o.m; ++i)
      for (int64_t t = 0; t < o.k; ++t) o.a32[static_cast<size_t>(i * o.k + t)] = bf16::to_float(o.a[i * o.lda + t]);
  }
  const auto al = static_cast<float>(alpha), be = static_cast<float>(beta);
  switch (o.m) {
    case 1: return run<1>(o, avx512, c, al, be);
    case 2: return run<2>(o, avx512, c, al, be);
    case 3: return run<3>(o, avx512, c, al, be);
    default: return run<4>(o, avx512, c, al, be);
  }
}

}  // namespace loom::kernels::cpu
