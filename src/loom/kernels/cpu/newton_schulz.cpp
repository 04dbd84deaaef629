#include "loom/kernels/cpu/newton_schulz.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/core/parallel.h"
#include "loom/kernels/cpu/optimizer.h"

namespace loom::kernels::cpu {

namespace {

// Below this many elements per piece, pieces run in parallel with single-threaded BLAS; above
// it, one piece at a time with multi-threaded BLAS.
constexpr int64_t kSmallPiece = 512 * 512;

// Symmetric fill of the lower triangle from the upper one (ssyrk writes only one triangle).
// Tiled: a plain column walk thrashes the cache on 4096-wide matrices.
void mirror_upper(float* a, int64_t n) {
  constexpr int64_t kTile = 64;
  for (int64_t i0 = 0; i0 < n; i0 += kTile)
    for (int64_t j0 = 0; j0 <= i0; j0 += kTile)
      for (int64_t i = i0; i < std::min(n, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(i, j0 + kTile); ++j) a[i * n + j] = a[j * n + i];
}

void transpose(const float* src, int64_t rows, int64_t cols, float* dst) {
  constexpr int64_t kTile = 32;
  for (int64_t i0 = 0; i0 < rows; i0 += kTile)
    for (int64_t j0 = 0; j0 < cols; j0 += kTile)
      for (int64_t i = i0; i < std::min(rows, i0 + kTile); ++i)
        for (int64_t j = j0; j < std::min(cols, j0 + kTile); ++j) dst[j * rows + i] = src[i * cols + j];
}

void round_to_bf16_inplace(float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16_rne(x[i]);
}

}  // namespace

void newton_schulz_bf16(float* x, int64_t rows, int64_t cols,
                        const std::vector<NsCoefficients>& schedule, float eps, NsWorkspace& ws) {
  const bool tall = rows > cols;
  const int64_t n = tall ? cols : rows;  // Gram side (small)
  const int64_t m = tall ? rows : cols;
  const int64_t size = n * m;
  ws.x.resize(static_cast<size_t>(size));
  ws.y.resize(static_cast<size_t>(size));
  ws.a.resize(static_cast<size_t>(n * n));
  ws.b.resize(static_cast<size_t>(n * n));
  float* X = ws.x.data();
  float* Y = ws.y.data();
  float* A = ws.a.data();
  float* B = ws.b.data();
  if (tall) transpose(x, rows, cols, X);
  else std::copy(x, x + size, X);

  double sum_sq = 0.0;
  for (int64_t i = 0; i < size; ++i) sum_sq += static_cast<double>(X[i]) * X[i];
  const float norm = round_bf16_rne(static_cast<float>(std::sqrt(sum_sq)));
  const float denom = round_bf16_rne(norm + eps);
  for (int64_t i = 0; i < size; ++i) X[i] = round_bf16_rne(X[i] / denom);

  const int ni = static_cast<int>(n), mi = static_cast<int>(m);
  for (const NsCoefficients& k : schedule) {
    // A = X Xᵀ
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, ni, mi, 1.f, X, mi, 0.f, A, ni);
    mirror_upper(A, n);
    round_to_bf16_inplace(A, n * n);
    // B = b·A + c·(A·A); A is symmetric, so A·A = A·Aᵀ.
    std::copy(A, A + n * n, B);
    cblas_ssyrk(CblasRowMajor, CblasUpper, CblasNoTrans, ni, ni, k.c, A, ni, k.b, B, ni);
    mirror_upper(B, n);
    round_to_bf16_inplace(B, n * n);
    // X = a·X + B·X
    std::copy(X, X + size, Y);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, ni, mi, ni, 1.f, B, ni, X, mi, k.a, Y, mi);
    round_to_bf16_inplace(Y, size);
    std::swap(X, Y);
  }
  if (tall) transpose(X, n, m, x);
  else std::copy(X, X + size, x);
}


void muon_orthogonalize(Tensor& update, const std::vector<MuonPiece>& pieces,
                        const std::vector<NsCoefficients>& schedule, float eps) {
  LOOM_ASSERT(update.dtype() == DType::f32 && update.is_contiguous() && update.dim() == 3,
              "muon_orthogonalize: update must be a contiguous float32 [matrices, rows, cols] "
              "tensor, got ", dtype_name(update.dtype()), " ", update.shape().str());
  const int64_t matrices = update.size(0), rows = update.size(1), cols = update.size(2);
  int64_t largest = 0;
  for (const MuonPiece& p : pieces) {
    LOOM_ASSERT(p.row0 >= 0 && p.col0 >= 0 && p.rows > 0 && p.cols > 0 && p.row0 + p.rows <= rows &&
                    p.col0 + p.cols <= cols,
                "muon_orthogonalize: piece at (", p.row0, ", ", p.col0, ") of ", p.rows, "x", p.cols,
                " does not fit a ", rows, "x", cols, " matrix");
    largest = std::max(largest, p.rows * p.cols);
  }
  struct Job {
    int64_t matrix;
    const MuonPiece* piece;
  };
  std::vector<Job> jobs;
  for (int64_t m = 0; m < matrices; ++m)
    for (const MuonPiece& p : pieces) jobs.push_back({m, &p});

  float* u = update.data<float>();
  auto run = [&](const Job& job, NsWorkspace& ws, std::vector<float>& piece) {
    const MuonPiece& p = *job.piece;
    float* mat = u + job.matrix * rows * cols;
    piece.resize(static_cast<size_t>(p.rows * p.cols));
    for (int64_t r = 0; r < p.rows; ++r)
      std::copy_n(mat + (p.row0 + r) * cols + p.col0, p.cols, piece.data() + r * p.cols);
    newton_schulz_bf16(piece.data(), p.rows, p.cols, schedule, eps, ws);
    for (int64_t r = 0; r < p.rows; ++r) {
      float* dst = mat + (p.row0 + r) * cols + p.col0;
      const float* src = piece.data() + r * p.cols;
      for (int64_t c = 0; c < p.cols; ++c) dst[c] = p.scale * src[c];
    }
  };
  const auto job_count = static_cast<int64_t>(jobs.size());
  if (job_count > 1 && largest <= kSmallPiece && num_threads() > 1) {
    parallel_for(0, job_count, 1, [&](int64_t b, int64_t e) {
      NsWorkspace ws;
      std::vector<float> piece;
      for (int64_t j = b; j < e; ++j) run(jobs[j], ws, piece);
    });
  } else {
    NsWorkspace ws;
    std::vector<float> piece;
    for (const Job& job : jobs) run(job, ws, piece);
  }
}

}  // namespace loom::kernels::cpu
