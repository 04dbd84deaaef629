#include "loom/optim/newton_schulz.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/core/parallel.h"
#include "loom/optim/adamw_kernel.h"

namespace loom::optim {

using json = nlohmann::ordered_json;

namespace {

NsCoefficients parse_triplet(const json& v, const std::string& path) {
  LOOM_CHECK(v.is_array() && v.size() == 3 && v[0].is_number() && v[1].is_number() &&
                 v[2].is_number(),
             ConfigError, path, " must hold triplets of 3 numbers [a, b, c], got ", v.dump(),
             "; e.g. ns_coefficients: [3.4445, -4.7750, 2.0315]");
  return {v[0].get<float>(), v[1].get<float>(), v[2].get<float>()};
}

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

}  // namespace

NsSchedule make_ns_schedule(const json& coefficients, int64_t ns_steps, const std::string& path) {
  if (coefficients.is_null()) {
    LOOM_CHECK(ns_steps > 0, ConfigError, "optimizer.ns_steps must be positive, got ", ns_steps);
    return NsSchedule(static_cast<size_t>(ns_steps), NsCoefficients{3.4445f, -4.7750f, 2.0315f});
  }
  LOOM_CHECK(coefficients.is_array() && !coefficients.empty(), ConfigError, path,
             " must be [a, b, c] or [[[a, b, c], count], ...], got ", coefficients.dump());
  const bool segmented = coefficients[0].is_array();
  NsSchedule out;
  if (!segmented) {
    LOOM_CHECK(ns_steps > 0, ConfigError, "optimizer.ns_steps must be positive, got ", ns_steps);
    const NsCoefficients t = parse_triplet(coefficients, path);
    out.assign(static_cast<size_t>(ns_steps), t);
    return out;
  }
  for (size_t i = 0; i < coefficients.size(); ++i) {
    const json& seg = coefficients[i];
    const std::string seg_path = path + "[" + std::to_string(i) + "]";
    LOOM_CHECK(seg.is_array() && seg.size() == 2 && seg[1].is_number_integer(), ConfigError,
               seg_path, " must be [[a, b, c], count], got ", seg.dump());
    const NsCoefficients t = parse_triplet(seg[0], seg_path + "[0]");
    const int64_t count = seg[1].get<int64_t>();
    LOOM_CHECK(count > 0, ConfigError, seg_path, "[1] (the repeat count) must be positive, got ",
               count);
    out.insert(out.end(), static_cast<size_t>(count), t);
  }
  return out;
}

void round_to_bf16_inplace(float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] = round_bf16_rne(x[i]);
}

void newton_schulz_bf16(float* x, int64_t rows, int64_t cols, const NsSchedule& schedule,
                        float eps, NsWorkspace& ws) {
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

}  // namespace loom::optim
