#include "loom/kernels/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "loom/core/parallel.h"
#include "loom/core/scalar_cast.h"

namespace loom::kernels::cpu {

namespace {

// x viewed as contiguous [rows, cols]; sums each row.
template <typename T>
void row_sums(const T* x, int64_t rows, int64_t cols, T* out) {
  parallel_for(0, rows, std::max<int64_t>(1, 65536 / std::max<int64_t>(cols, 1)), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const T* p = x + r * cols;
      double acc = 0;
      for (int64_t c = 0; c < cols; ++c) acc += cast_scalar<double>(p[c]);
      out[r] = cast_scalar<T>(acc);
    }
  });
}

// x viewed as contiguous [rows, cols]; sums each column.
template <typename T>
void col_sums(const T* x, int64_t rows, int64_t cols, T* out) {
  parallel_for(0, cols, 256, [&](int64_t b, int64_t e) {
    std::vector<double> acc(static_cast<size_t>(e - b), 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      const T* p = x + r * cols;
      for (int64_t c = b; c < e; ++c) acc[c - b] += cast_scalar<double>(p[c]);
    }
    for (int64_t c = b; c < e; ++c) out[c] = cast_scalar<T>(acc[c - b]);
  });
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& dims_in, bool keepdim) {
  check_device_supported(x.device(), "sum");
  const int nd = x.dim();
  std::vector<bool> reduce(nd, dims_in.empty());
  for (int d : dims_in) reduce[normalize_dim(d, nd, "sum")] = true;
  Shape kept_shape, out_shape;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < nd; ++i) {
    if (reduce[i]) {
      inner *= x.shape()[i];
      if (keepdim) out_shape.push_back(1);
    } else {
      outer *= x.shape()[i];
      out_shape.push_back(x.shape()[i]);
    }
  }
  // Reduced dims first or last → direct; otherwise permute them to the end.
  int first_reduced = nd, last_kept = -1, first_kept = nd, last_reduced = -1;
  for (int i = 0; i < nd; ++i) {
    if (reduce[i]) { first_reduced = std::min(first_reduced, i); last_reduced = i; }
    else { last_kept = i; first_kept = std::min(first_kept, i); }
  }
  const bool suffix = last_kept < first_reduced;   // kept..., reduced...
  const bool prefix = last_reduced < first_kept;   // reduced..., kept...
  Tensor out = Tensor::empty(out_shape, x.dtype());
  LOOM_DISPATCH_ALL(x.dtype(), "sum", [&] {
    if constexpr (std::is_same_v<scalar_t, bool>) {
      LOOM_THROW(DTypeError, "sum: bool tensors cannot be summed; cast to int64 first");
    } else {
      scalar_t* po = out.data<scalar_t>();
      if (suffix || prefix) {
        Tensor xc = x.contiguous();
        const scalar_t* px = xc.data<scalar_t>();
        if (suffix) row_sums(px, outer, inner, po);
        else col_sums(px, inner, outer, po);
      } else {
        std::vector<int> order;
        for (int i = 0; i < nd; ++i) if (!reduce[i]) order.push_back(i);
        for (int i = 0; i < nd; ++i) if (reduce[i]) order.push_back(i);
        Tensor xc = x.permute(order).contiguous();
        row_sums(xc.data<scalar_t>(), outer, inner, po);
      }
    }
  });
  return out;
}

Tensor sum_to_shape(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int lead = x.dim() - shape.ndim();
  LOOM_CHECK(lead >= 0, ShapeError, "sum_to_shape: cannot reduce ", x.shape().str(), " to ",
             shape.str());
  std::vector<int> dims;
  for (int i = 0; i < x.dim(); ++i) {
    if (i < lead) { dims.push_back(i); continue; }
    int64_t want = shape[i - lead];
    if (want == 1 && x.shape()[i] != 1) dims.push_back(i);
    else LOOM_CHECK(want == x.shape()[i], ShapeError, "sum_to_shape: cannot reduce ",
                    x.shape().str(), " to ", shape.str());
  }
  Tensor s = dims.empty() ? x : sum(x, dims, true);
  // drop the leading dims that were summed (keepdim left them as 1)
  return s.reshape(shape);
}

double max_value(const Tensor& x) {
  LOOM_CHECK(x.numel() > 0, ShapeError, "max_value: the tensor ", x.shape().str(), " is empty");
  Tensor c = x.contiguous();
  const int64_t n = c.numel();
  switch (c.dtype()) {
    case DType::i32: return static_cast<double>(*std::max_element(c.data<int32_t>(), c.data<int32_t>() + n));
    case DType::i64: return static_cast<double>(*std::max_element(c.data<int64_t>(), c.data<int64_t>() + n));
    default: break;
  }
  double best = -std::numeric_limits<double>::infinity();
  LOOM_DISPATCH_FLOATING(c.dtype(), "max_value", [&] {
    const scalar_t* p = c.data<scalar_t>();
    for (int64_t i = 0; i < n; ++i) {
      const double v = cast_scalar<double>(p[i]);
      if (std::isnan(v)) {
        best = v;  // NaN wins, as in a reduction that propagates it
        break;
      }
      best = std::max(best, v);
    }
  });
  return best;
}

}  // namespace loom::kernels::cpu
