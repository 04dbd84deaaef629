#include "loom/kernels/cpu/moe.h"

#include <omp.h>

#include <cstring>
#include <numeric>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/gemm.h"
#include "loom/kernels/cpu/index.h"
#include "loom/kernels/cpu/row_helpers.h"

namespace loom::kernels::cpu {

namespace {

std::vector<int64_t> int_values(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<int64_t> v(static_cast<size_t>(c.numel()));
  for (int64_t i = 0; i < c.numel(); ++i) v[i] = index_at(c, i);
  return v;
}

// row_map must send every (t, k) to a distinct row of [0, rows): then no two threads write one
// row and every scatter has a single writer.
std::vector<int64_t> checked_row_map(const Tensor& row_map, int64_t rows, const char* op) {
  LOOM_CHECK(row_map.dtype() == DType::i64 || row_map.dtype() == DType::i32, DTypeError, op,
             ": row_map must be int32 or int64 (the one moe_permute returned), got ",
             dtype_name(row_map.dtype()));
  LOOM_CHECK(row_map.dim() == 2, ShapeError, op, ": row_map must be [tokens, top_k], got ",
             row_map.shape().str());
  std::vector<int64_t> map = int_values(row_map);
  std::vector<uint8_t> seen(static_cast<size_t>(rows), 0);
  const int64_t k = row_map.shape()[1];
  for (size_t i = 0; i < map.size(); ++i) {
    const int64_t r = map[i];
    LOOM_CHECK(r >= 0 && r < rows, ValueError, op, ": row_map[", static_cast<int64_t>(i) / k, ", ",
               static_cast<int64_t>(i) % k, "] = ", r, " is outside the ", rows,
               " permuted rows; pass the row_map moe_permute returned for these rows");
    LOOM_CHECK(!seen[r], ValueError, op, ": row_map sends two (token, slot) pairs to permuted row ", r,
               "; pass the row_map moe_permute returned");
    seen[r] = 1;
  }
  return map;
}

// Calls fn.template operator()<T, C>() for storage type T and compute type C.
template <typename Fn>
void dispatch_moe(DType dtype, const char* op, Fn&& fn) {
  LOOM_DISPATCH_FLOATING(dtype, op, [&] { fn.template operator()<scalar_t, compute_t<scalar_t>>(); });
}

int64_t token_grain(int64_t d, int64_t k) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(d * k, 1)); }

}  // namespace

MoeRouting moe_routing(const Tensor& expert_ids, int64_t num_experts) {
  LOOM_CHECK(expert_ids.dtype() == DType::i64 || expert_ids.dtype() == DType::i32, DTypeError,
             "moe_permute: expert_ids must be int32 or int64, got ", dtype_name(expert_ids.dtype()));
  LOOM_CHECK(expert_ids.dim() == 2, ShapeError, "moe_permute: expert_ids must be [tokens, top_k], got ",
             expert_ids.shape().str());
  LOOM_CHECK(num_experts > 0, ValueError, "moe_permute: num_experts = ", num_experts, " must be positive");
  const int64_t T = expert_ids.shape()[0], K = expert_ids.shape()[1];
  std::vector<int64_t> ids = int_values(expert_ids);
  MoeRouting r;
  r.tokens_per_expert = Tensor::zeros({num_experts}, DType::i64);
  int64_t* counts = r.tokens_per_expert.data<int64_t>();
  for (int64_t i = 0; i < T * K; ++i) {
    const int64_t e = ids[i];
    LOOM_CHECK(e >= 0 && e < num_experts, ValueError, "moe_permute: expert_ids[", i / K, ", ", i % K,
               "] = ", e, " is outside [0, ", num_experts, "); the router must pick experts below num_experts");
    ++counts[e];
  }
  std::vector<int64_t> next(static_cast<size_t>(num_experts), 0);
  std::exclusive_scan(counts, counts + num_experts, next.begin(), int64_t{0});
  r.row_map = Tensor::empty({T, K}, DType::i64);
  int64_t* map = r.row_map.data<int64_t>();
  for (int64_t i = 0; i < T * K; ++i) map[i] = next[ids[i]]++;  // flat (t, k) order: stable
  return r;
}

Tensor moe_permute_rows(const Tensor& x, const Tensor& row_map) {
  LOOM_CHECK(x.dim() == 2, ShapeError, "moe_permute: x must be [tokens, hidden], got ", x.shape().str());
  LOOM_CHECK(row_map.dim() == 2 && row_map.shape()[0] == x.shape()[0], ShapeError, "moe_permute: row_map ",
             row_map.shape().str(), " must have one row per token of x ", x.shape().str());
  const int64_t T = x.shape()[0], D = x.shape()[1], K = row_map.shape()[1];
  std::vector<int64_t> map = checked_row_map(row_map, T * K, "moe_permute");
  Tensor xc = x.contiguous();
  Tensor out = Tensor::empty({T * K, D}, x.dtype());
  const size_t row_bytes = static_cast<size_t>(D) * x.element_size();
  const char* src = static_cast<const char*>(xc.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  parallel_for(0, T, token_grain(D, K), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t)
      for (int64_t k = 0; k < K; ++k)
        std::memcpy(dst + map[t * K + k] * row_bytes, src + t * row_bytes, row_bytes);
  });
  return out;
}

Tensor moe_permute_backward(const Tensor& grad, const Tensor& row_map) {
  const int64_t T = row_map.shape()[0], K = row_map.shape()[1], D = grad.shape()[1];
  std::vector<int64_t> map = checked_row_map(row_map, grad.shape()[0], "moe_permute_backward");
  Tensor gc = grad.contiguous();
  Tensor dx = Tensor::empty({T, D}, grad.dtype());
  dispatch_moe(grad.dtype(), "moe_permute_backward", [&]<typename T_, typename C>() {
    const T_* pg = gc.data<T_>();
    T_* pd = dx.data<T_>();
    parallel_for(0, T, token_grain(D, K), [&](int64_t b, int64_t e) {
      std::vector<C> acc(D), row(D);
      for (int64_t t = b; t < e; ++t) {
        std::fill(acc.begin(), acc.end(), C(0));
        for (int64_t k = 0; k < K; ++k) {
          const C* g = row_as(pg + map[t * K + k] * D, row.data(), D);
#pragma omp simd
          for (int64_t i = 0; i < D; ++i) acc[i] += g[i];
        }
        narrow_row(acc.data(), pd + t * D, D);
      }
    });
  });
  return dx;
}

Tensor moe_unpermute(const Tensor& y, const Tensor& row_map, const Tensor& weights) {
  LOOM_CHECK(y.dim() == 2, ShapeError, "moe_unpermute: y must be [rows, hidden], got ", y.shape().str());
  const int64_t T = row_map.dim() == 2 ? row_map.shape()[0] : 0, K = row_map.dim() == 2 ? row_map.shape()[1] : 0;
  const int64_t D = y.shape()[1];
  std::vector<int64_t> map = checked_row_map(row_map, y.shape()[0], "moe_unpermute");
  if (weights.defined())
    LOOM_CHECK(weights.shape() == row_map.shape(), ShapeError, "moe_unpermute: weights ",
               weights.shape().str(), " must match row_map ", row_map.shape().str(), " ([tokens, top_k])");
  std::vector<double> w = weights.defined() ? weights.to_double_vector() : std::vector<double>(T * K, 1.0);
  Tensor yc = y.contiguous();
  Tensor out = Tensor::empty({T, D}, y.dtype());
  dispatch_moe(y.dtype(), "moe_unpermute", [&]<typename T_, typename C>() {
    const T_* py = yc.data<T_>();
    T_* po = out.data<T_>();
    parallel_for(0, T, token_grain(D, K), [&](int64_t b, int64_t e) {
      std::vector<C> acc(D), row(D);
      for (int64_t t = b; t < e; ++t) {
        std::fill(acc.begin(), acc.end(), C(0));
        for (int64_t k = 0; k < K; ++k) {
          const C wk = static_cast<C>(w[t * K + k]);
          const C* yr = row_as(py + map[t * K + k] * D, row.data(), D);
#pragma omp simd
          for (int64_t i = 0; i < D; ++i) acc[i] += wk * yr[i];
        }
        narrow_row(acc.data(), po + t * D, D);
      }
    });
  });
  return out;
}

void moe_unpermute_backward(const Tensor& grad, const Tensor& y, const Tensor& row_map,
                            const Tensor& weights, Tensor* dy, Tensor* dweights) {
  const int64_t T = row_map.shape()[0], K = row_map.shape()[1], D = y.shape()[1];
  std::vector<int64_t> map = checked_row_map(row_map, y.shape()[0], "moe_unpermute_backward");
  std::vector<double> w = weights.defined() ? weights.to_double_vector() : std::vector<double>(T * K, 1.0);
  std::vector<double> dw(dweights ? static_cast<size_t>(T * K) : 0);
  Tensor gc = (grad.dtype() == y.dtype() ? grad : grad.to(y.dtype())).contiguous();
  Tensor yc = y.contiguous();
  if (dy) *dy = Tensor::zeros(y.shape(), y.dtype());  // rows no pair maps to get no grad
  dispatch_moe(y.dtype(), "moe_unpermute_backward", [&]<typename T_, typename C>() {
    const T_* pg = gc.data<T_>();
    const T_* py = yc.data<T_>();
    T_* pdy = dy ? dy->data<T_>() : nullptr;
    parallel_for(0, T, token_grain(D, K), [&](int64_t b, int64_t e) {
      std::vector<C> gbuf(D), ybuf(D), out(D);
      for (int64_t t = b; t < e; ++t) {
        const C* g = row_as(pg + t * D, gbuf.data(), D);
        for (int64_t k = 0; k < K; ++k) {
          const int64_t r = map[t * K + k];
          if (pdy) {
            const C wk = static_cast<C>(w[t * K + k]);
#pragma omp simd
            for (int64_t i = 0; i < D; ++i) out[i] = wk * g[i];
            narrow_row(out.data(), pdy + r * D, D);
          }
          if (dweights) {
            const C* yr = row_as(py + r * D, ybuf.data(), D);
            dw[t * K + k] = static_cast<double>(row_dot(g, yr, D));
          }
        }
      }
    });
  });
  if (dweights) *dweights = Tensor::from_vector(dw, row_map.shape(), DType::f64).to(weights.defined() ? weights.dtype() : y.dtype());
}

// ---- grouped GEMM ---------------------------------------------------------------------------

namespace {

// Runs fn(e) for every expert: spread over threads (one single-threaded GEMM each) when the
// experts are small, else one after another with BLAS threading inside each GEMM.
template <typename Fn>
void for_each_expert(const std::vector<int64_t>& counts, double flops_per_row, Fn&& fn) {
  const int64_t E = static_cast<int64_t>(counts.size());
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const double avg_flops = flops_per_row * static_cast<double>(rows) / std::max<int64_t>(E, 1);
  const int threads = num_threads();
  if (avg_flops < 4e6 && E > 1 && threads > 1 && !omp_in_parallel()) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int64_t e = 0; e < E; ++e) fn(e);
  } else {
    for (int64_t e = 0; e < E; ++e) fn(e);
  }
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  std::inclusive_scan(counts.begin(), counts.end(), off.begin() + 1);
  return off;
}

}  // namespace

Tensor grouped_gemm(const Tensor& x, const Tensor& w, const std::vector<int64_t>& counts, bool trans_w) {
  const int64_t M = x.shape()[0], Din = x.shape()[1];
  const int64_t Dout = trans_w ? w.shape()[1] : w.shape()[2];
  Tensor out = Tensor::empty({M, Dout}, x.dtype());
  const std::vector<int64_t> off = offsets_of(counts);
  for_each_expert(counts, 2.0 * static_cast<double>(Din * Dout), [&](int64_t e) {
    if (counts[e] == 0) return;
    Tensor oe = out.narrow(0, off[e], counts[e]);
    gemm(x.narrow(0, off[e], counts[e]), false, w.select(0, e), trans_w, oe, 1.0, 0.0);
  });
  return out;
}

void grouped_gemm_backward(const Tensor& grad, const Tensor& x, const Tensor& w,
                           const std::vector<int64_t>& counts, bool trans_w, Tensor* dx, Tensor* dw) {
  const int64_t Din = x.shape()[1];
  const int64_t Dout = trans_w ? w.shape()[1] : w.shape()[2];
  // Reduced precision: GEMMs in fp32 on widened copies, so dw is an fp32 sum (main grad) and dx is
  // rounded once.
  const DType compute = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor g = grad.to(compute), xc = x.to(compute), wc = w.to(compute);
  Tensor dxc = dx ? Tensor::empty(x.shape(), compute) : Tensor();
  Tensor dwc = dw ? Tensor::zeros(w.shape(), compute) : Tensor();
  const std::vector<int64_t> off = offsets_of(counts);
  for_each_expert(counts, 4.0 * static_cast<double>(Din * Dout), [&](int64_t e) {
    if (counts[e] == 0) return;
    Tensor ge = g.narrow(0, off[e], counts[e]), xe = xc.narrow(0, off[e], counts[e]);
    Tensor we = wc.select(0, e);
    if (dx) {
      Tensor dxe = dxc.narrow(0, off[e], counts[e]);
      gemm(ge, false, we, !trans_w, dxe, 1.0, 0.0);  // g·op(w)ᵀ
    }
    if (dw) {
      Tensor dwe = dwc.select(0, e);
      if (trans_w) gemm(ge, true, xe, false, dwe, 1.0, 0.0);  // [Dout, Din] = gᵀ·x
      else gemm(xe, true, ge, false, dwe, 1.0, 0.0);          // [Din, Dout] = xᵀ·g
    }
  });
  if (dx) *dx = dxc.to(x.dtype());
  if (dw) {
    const bool reduced = w.dtype() == DType::bf16 || w.dtype() == DType::f16;
    *dw = dwc.to(reduced ? DType::f32 : w.dtype());
  }
}

}  // namespace loom::kernels::cpu
