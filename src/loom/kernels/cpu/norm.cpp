#include "loom/kernels/cpu/norm.h"

#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "loom/core/parallel.h"
#include "loom/kernels/cpu/row_helpers.h"

namespace loom::kernels::cpu {

namespace {

DType grad_dtype_for(const Tensor& w) {
  return (w.dtype() == DType::bf16 || w.dtype() == DType::f16) ? DType::f32 : w.dtype();
}

// Contiguous compute-dtype copy of an optional [D] parameter (tiny; keeps the kernels to one
// weight type).
Tensor param_as(const Tensor& p, DType compute) {
  return p.defined() ? p.to(compute).contiguous() : Tensor();
}

void check_norm_inputs(const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_floating(x, op, "x");
  check_device_supported(x.device(), op);
  LOOM_CHECK(x.dim() >= 1, ShapeError, op, ": x must have at least one dim (the normalised one), got a scalar");
  const int64_t d = x.shape()[x.dim() - 1];
  for (const auto& [p, name] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!p->defined()) continue;
    check_floating(*p, op, name);
    LOOM_CHECK(p->dim() == 1 && p->shape()[0] == d, ShapeError, op, ": ", name, " has shape ",
               p->shape().str(), " but x ", x.shape().str(), " normalises a last dim of ", d,
               "; the ", name, " must be [", d, "]");
  }
}

DType resolve_compute(const char* op, const Tensor& x, DType compute) {
  if (x.dtype() == DType::f64) return DType::f64;
  LOOM_CHECK(compute == DType::f32 || compute == DType::f64, DTypeError, op,
             ": kernel compute dtype must be float32 or float64, got ", dtype_name(compute),
             " (reduced-precision compute is emulated by casting around the op)");
  return compute;
}

// Calls fn.template operator()<T, C>() for x's storage type T and compute type C.
template <typename Fn>
void dispatch_norm(DType x_dtype, DType compute, const char* op, Fn&& fn) {
  LOOM_DISPATCH_FLOATING(x_dtype, op, [&] {
    using T = scalar_t;
    if constexpr (std::is_same_v<T, double>) {
      fn.template operator()<T, double>();
    } else {
      if (compute == DType::f64) fn.template operator()<T, double>();
      else fn.template operator()<T, float>();
    }
  });
}

int64_t row_grain(int64_t d) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)); }

// Sums chunk partials [chunks, D] in chunk order into a [D] tensor of `out_dtype`.
template <typename C>
Tensor reduce_partials(const std::vector<C>& partial, int64_t chunks, int64_t d, DType out_dtype) {
  Tensor acc = Tensor::empty({d}, DType::f64);
  double* pa = acc.data<double>();
  parallel_for(0, d, 1024, [&](int64_t b, int64_t e) {
    for (int64_t j = b; j < e; ++j) {
      double s = 0;
      for (int64_t c = 0; c < chunks; ++c) s += static_cast<double>(partial[c * d + j]);
      pa[j] = s;
    }
  });
  return acc.to(out_dtype);
}

}  // namespace

int64_t norm_grad_rows_per_chunk(int64_t rows) {
  // At most ~64 partial rows to add up, at least 16 rows of work per chunk.
  return std::max<int64_t>(16, (rows + 63) / 64);
}

// ---- RMSNorm ------------------------------------------------------------------------------------

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, DType compute, Tensor& rstd) {
  check_norm_inputs("rms_norm", x, weight, Tensor());
  compute = resolve_compute("rms_norm", x, compute);
  const int64_t d = x.shape()[x.dim() - 1];
  const int64_t rows = d ? x.numel() / d : 0;
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  rstd = Tensor::empty({rows}, compute);
  Tensor wc = param_as(weight, compute);
  dispatch_norm(x.dtype(), compute, "rms_norm", [&]<typename T, typename C>() {
    const T* px = xc.data<T>();
    T* py = y.data<T>();
    C* pr = rstd.data<C>();
    const C* pw = wc.defined() ? wc.data<C>() : nullptr;
    const C ceps = static_cast<C>(eps);
    parallel_for(0, rows, row_grain(d), [&](int64_t b, int64_t e) {
      std::vector<C> xbuf(static_cast<size_t>(d)), obuf(static_cast<size_t>(d));
      for (int64_t r = b; r < e; ++r) {
        const C* xr = row_as(px + r * d, xbuf.data(), d);
        const C ss = row_dot(xr, xr, d);
        const C rs = C(1) / std::sqrt(ss / static_cast<C>(d) + ceps);
        pr[r] = rs;
        C* out = out_row(py + r * d, obuf.data());
        if (pw) {
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) out[i] = pw[i] * (xr[i] * rs);
        } else {
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) out[i] = xr[i] * rs;
        }
        finish_row(out, py + r * d, d);
      }
    });
  });
  return y;
}

void rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                       const Tensor& rstd, Tensor* dx, Tensor* dweight) {
  LOOM_CHECK(grad.shape() == x.shape(), ShapeError, "rms_norm_backward: grad ", grad.shape().str(),
             " must match x ", x.shape().str());
  const DType compute = rstd.dtype();
  const int64_t d = x.shape()[x.dim() - 1];
  const int64_t rows = d ? x.numel() / d : 0;
  const bool want_dw = dweight && weight.defined();
  Tensor xc = x.contiguous();
  Tensor gc = (grad.dtype() == x.dtype() ? grad : grad.to(x.dtype())).contiguous();
  Tensor rc = rstd.contiguous();
  Tensor wc = param_as(weight, compute);
  if (dx) *dx = Tensor::empty(x.shape(), x.dtype());
  const int64_t per_chunk = norm_grad_rows_per_chunk(rows);
  const int64_t chunks = (rows + per_chunk - 1) / per_chunk;
  dispatch_norm(x.dtype(), compute, "rms_norm_backward", [&]<typename T, typename C>() {
    const T* px = xc.data<T>();
    const T* pg = gc.data<T>();
    const C* pr = rc.data<C>();
    const C* pw = wc.defined() ? wc.data<C>() : nullptr;
    T* pdx = dx ? dx->data<T>() : nullptr;
    std::vector<C> partial(want_dw ? static_cast<size_t>(chunks * d) : 0);
    parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
      std::vector<C> xbuf(d), gbuf(d), gw(d), obuf(d);
      for (int64_t c = cb; c < ce; ++c) {
        C* part = want_dw ? partial.data() + c * d : nullptr;
        if (part) std::fill(part, part + d, C(0));
        const int64_t r_end = std::min(rows, (c + 1) * per_chunk);
        for (int64_t r = c * per_chunk; r < r_end; ++r) {
          const C* xr = row_as(px + r * d, xbuf.data(), d);
          const C* gr = row_as(pg + r * d, gbuf.data(), d);
          const C rs = pr[r];
          if (part) {
#pragma omp simd
            for (int64_t i = 0; i < d; ++i) part[i] += gr[i] * (xr[i] * rs);
          }
          if (!pdx) continue;
          // dx = rs·(g⊙w) − x · rs³ · Σ(g⊙w⊙x) / D
          if (pw) {
#pragma omp simd
            for (int64_t i = 0; i < d; ++i) gw[i] = gr[i] * pw[i];
          } else {
            std::copy(gr, gr + d, gw.data());
          }
          const C dot = row_dot(gw.data(), xr, d);
          const C k = rs * rs * rs * dot / static_cast<C>(d);
          C* out = out_row(pdx + r * d, obuf.data());
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) out[i] = rs * gw[i] - xr[i] * k;
          finish_row(out, pdx + r * d, d);
        }
      }
    });
    if (want_dw) *dweight = reduce_partials(partial, chunks, d, grad_dtype_for(weight));
  });
}

// ---- LayerNorm ----------------------------------------------------------------------------------

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  DType compute, Tensor& mean, Tensor& rstd) {
  check_norm_inputs("layer_norm", x, weight, bias);
  compute = resolve_compute("layer_norm", x, compute);
  const int64_t d = x.shape()[x.dim() - 1];
  const int64_t rows = d ? x.numel() / d : 0;
  Tensor xc = x.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype());
  mean = Tensor::empty({rows}, compute);
  rstd = Tensor::empty({rows}, compute);
  Tensor wc = param_as(weight, compute), bc = param_as(bias, compute);
  dispatch_norm(x.dtype(), compute, "layer_norm", [&]<typename T, typename C>() {
    const T* px = xc.data<T>();
    T* py = y.data<T>();
    C* pm = mean.data<C>();
    C* pr = rstd.data<C>();
    const C* pw = wc.defined() ? wc.data<C>() : nullptr;
    const C* pb = bc.defined() ? bc.data<C>() : nullptr;
    const C ceps = static_cast<C>(eps);
    const C inv_d = C(1) / static_cast<C>(d);
    parallel_for(0, rows, row_grain(d), [&](int64_t b, int64_t e) {
      std::vector<C> xbuf(d), obuf(d);
      for (int64_t r = b; r < e; ++r) {
        const C* xr = row_as(px + r * d, xbuf.data(), d);
        const C mu = row_sum(xr, d) * inv_d;
        // Two passes: the variance of (x − mean) does not cancel catastrophically.
        const C v = row_centered_sum_squares(xr, mu, d);
        const C rs = C(1) / std::sqrt(v * inv_d + ceps);
        pm[r] = mu;
        pr[r] = rs;
        C* out = out_row(py + r * d, obuf.data());
#pragma omp simd
        for (int64_t i = 0; i < d; ++i) {
          C h = (xr[i] - mu) * rs;
          if (pw) h *= pw[i];
          if (pb) h += pb[i];
          out[i] = h;
        }
        finish_row(out, py + r * d, d);
      }
    });
  });
  return y;
}

void layer_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, Tensor* dx, Tensor* dweight,
                         Tensor* dbias) {
  LOOM_CHECK(grad.shape() == x.shape(), ShapeError, "layer_norm_backward: grad ",
             grad.shape().str(), " must match x ", x.shape().str());
  const DType compute = rstd.dtype();
  const int64_t d = x.shape()[x.dim() - 1];
  const int64_t rows = d ? x.numel() / d : 0;
  const bool want_dw = dweight != nullptr, want_db = dbias != nullptr;
  Tensor xc = x.contiguous();
  Tensor gc = (grad.dtype() == x.dtype() ? grad : grad.to(x.dtype())).contiguous();
  Tensor mc = mean.contiguous(), rc = rstd.contiguous();
  Tensor wc = param_as(weight, compute);
  if (dx) *dx = Tensor::empty(x.shape(), x.dtype());
  const int64_t per_chunk = norm_grad_rows_per_chunk(rows);
  const int64_t chunks = (rows + per_chunk - 1) / per_chunk;
  dispatch_norm(x.dtype(), compute, "layer_norm_backward", [&]<typename T, typename C>() {
    const T* px = xc.data<T>();
    const T* pg = gc.data<T>();
    const C* pm = mc.data<C>();
    const C* pr = rc.data<C>();
    const C* pw = wc.defined() ? wc.data<C>() : nullptr;
    T* pdx = dx ? dx->data<T>() : nullptr;
    std::vector<C> part_w(want_dw ? static_cast<size_t>(chunks * d) : 0);
    std::vector<C> part_b(want_db ? static_cast<size_t>(chunks * d) : 0);
    const C inv_d = C(1) / static_cast<C>(d);
    parallel_for(0, chunks, 1, [&](int64_t cb, int64_t ce) {
      std::vector<C> xbuf(d), gbuf(d), xhat(d), gw(d), obuf(d);
      for (int64_t c = cb; c < ce; ++c) {
        C* pw_part = want_dw ? part_w.data() + c * d : nullptr;
        C* pb_part = want_db ? part_b.data() + c * d : nullptr;
        if (pw_part) std::fill(pw_part, pw_part + d, C(0));
        if (pb_part) std::fill(pb_part, pb_part + d, C(0));
        const int64_t r_end = std::min(rows, (c + 1) * per_chunk);
        for (int64_t r = c * per_chunk; r < r_end; ++r) {
          const C* xr = row_as(px + r * d, xbuf.data(), d);
          const C* gr = row_as(pg + r * d, gbuf.data(), d);
          const C mu = pm[r], rs = pr[r];
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) {
            xhat[i] = (xr[i] - mu) * rs;
            gw[i] = pw ? gr[i] * pw[i] : gr[i];
          }
          const C sum_gw = row_sum(gw.data(), d);
          const C sum_gwx = row_dot(gw.data(), xhat.data(), d);
          if (pw_part) {
#pragma omp simd
            for (int64_t i = 0; i < d; ++i) pw_part[i] += gr[i] * xhat[i];
          }
          if (pb_part) {
#pragma omp simd
            for (int64_t i = 0; i < d; ++i) pb_part[i] += gr[i];
          }
          if (!pdx) continue;
          // dx = rs·(g⊙w − mean(g⊙w) − x̂·mean(g⊙w⊙x̂))
          const C a = sum_gw * inv_d, m = sum_gwx * inv_d;
          C* out = out_row(pdx + r * d, obuf.data());
#pragma omp simd
          for (int64_t i = 0; i < d; ++i) out[i] = rs * (gw[i] - a - xhat[i] * m);
          finish_row(out, pdx + r * d, d);
        }
      }
    });
    // Without a weight the "weight" of the formula is 1 and dweight has no tensor to match.
    const DType wd = weight.defined() ? grad_dtype_for(weight) : compute;
    if (want_dw) *dweight = reduce_partials(part_w, chunks, d, wd);
    if (want_db) *dbias = reduce_partials(part_b, chunks, d, wd);
  });
}

}  // namespace loom::kernels::cpu
