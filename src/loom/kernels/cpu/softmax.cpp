#include "loom/kernels/cpu/softmax.h"

#include <cmath>
#include <limits>

#include "loom/core/parallel.h"
#include "loom/core/scalar_cast.h"

namespace loom::kernels::cpu {

Tensor softmax_last(const Tensor& x, bool log) {
  check_floating(x, log ? "log_softmax" : "softmax", "input");
  LOOM_CHECK(x.dim() >= 1, ShapeError, "softmax: input must have at least one dim");
  Tensor xc = x.contiguous();
  const int64_t n = x.shape()[x.dim() - 1];
  const int64_t rows = n ? x.numel() / n : 0;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  LOOM_DISPATCH_FLOATING(x.dtype(), "softmax", [&] {
    using C = compute_t<scalar_t>;
    const scalar_t* px = xc.data<scalar_t>();
    scalar_t* po = out.data<scalar_t>();
    parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      std::vector<C> buf(static_cast<size_t>(n));
      for (int64_t r = b; r < e; ++r) {
        const scalar_t* in = px + r * n;
        C mx = -std::numeric_limits<C>::infinity();
        for (int64_t i = 0; i < n; ++i) mx = std::max(mx, C(in[i]));
        if (std::isinf(mx) && mx < 0) mx = 0;  // all -inf row: avoid inf-inf
        C sum = 0;
        for (int64_t i = 0; i < n; ++i) {
          buf[i] = std::exp(C(in[i]) - mx);
          sum += buf[i];
        }
        scalar_t* o = po + r * n;
        if (log) {
          const C lse = std::log(sum);
          for (int64_t i = 0; i < n; ++i) o[i] = cast_scalar<scalar_t>(C(in[i]) - mx - lse);
        } else {
          const C inv = C(1) / sum;
          for (int64_t i = 0; i < n; ++i) o[i] = cast_scalar<scalar_t>(buf[i] * inv);
        }
      }
    });
  });
  return out;
}

Tensor softmax_last_backward(const Tensor& grad, const Tensor& y, bool log) {
  LOOM_CHECK(grad.shape() == y.shape(), ShapeError, "softmax_backward: grad ", grad.shape().str(),
             " vs output ", y.shape().str());
  Tensor gc = grad.contiguous(), yc = y.contiguous();
  const int64_t n = y.shape()[y.dim() - 1];
  const int64_t rows = n ? y.numel() / n : 0;
  Tensor out = Tensor::empty(y.shape(), y.dtype());
  LOOM_DISPATCH_FLOATING(y.dtype(), "softmax_backward", [&] {
    using C = compute_t<scalar_t>;
    const scalar_t* pg = gc.data<scalar_t>();
    const scalar_t* py = yc.data<scalar_t>();
    scalar_t* po = out.data<scalar_t>();
    parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(n, 1)), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const scalar_t* g = pg + r * n;
        const scalar_t* yy = py + r * n;
        scalar_t* o = po + r * n;
        C dot = 0;
        if (log) {
          for (int64_t i = 0; i < n; ++i) dot += C(g[i]);  // dx = g - softmax · Σg
          for (int64_t i = 0; i < n; ++i) o[i] = cast_scalar<scalar_t>(C(g[i]) - std::exp(C(yy[i])) * dot);
        } else {
          for (int64_t i = 0; i < n; ++i) dot += C(g[i]) * C(yy[i]);  // dx = y ⊙ (g - <g, y>)
          for (int64_t i = 0; i < n; ++i) o[i] = cast_scalar<scalar_t>(C(yy[i]) * (C(g[i]) - dot));
        }
      }
    });
  });
  return out;
}

}  // namespace loom::kernels::cpu
