#include "loom/ops/reduce.h"

#include "loom/core/trace.h"
#include "loom/autograd/function.h"
#include "loom/kernels/kernel_table.h"

namespace loom::ops {

using autograd::BackwardContext;
using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

// Shape of the result with keepdim=true, used to broadcast the grad back.
Shape kept_shape(const Shape& in, const std::vector<int>& dims) {
  Shape s = in;
  if (dims.empty()) {
    for (int i = 0; i < s.ndim(); ++i) s[i] = 1;
  } else {
    for (int d : dims) s[normalize_dim(d, in.ndim(), "sum")] = 1;
  }
  return s;
}

Tensor reduce_op(const Tensor& x, const std::vector<int>& dims, bool keepdim, double factor,
                 const char* name) {
  check_floating(x, name, "input");
  const kernels::KernelTable& k = kernels::for_tensor(x, name);
  Tensor out = k.sum(x, dims, keepdim);
  if (factor != 1.0) out = k.affine(out, factor, 0.0);
  const Shape in = x.shape();
  const Shape kept = kept_shape(in, dims);
  record(name, {&x}, {&out}, {}, [in, kept, factor, name](const Grads& g, const BackwardContext&) -> Grads {
    Tensor gk = g[0].reshape(kept);
    if (factor != 1.0) gk = kernels::for_tensor(gk, name).affine(gk, factor, 0.0);
    return {gk.expand(in).contiguous()};
  });
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  LOOM_TRACE("op", "sum");
  return reduce_op(x, dims, keepdim, 1.0, "sum");
}

Tensor mean(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  LOOM_TRACE("op", "mean");
  int64_t count = 1;
  if (dims.empty()) count = x.numel();
  else for (int d : dims) count *= x.shape()[normalize_dim(d, x.dim(), "mean")];
  LOOM_CHECK(count > 0, ShapeError, "mean: reducing over zero elements of ", x.shape().str());
  return reduce_op(x, dims, keepdim, 1.0 / static_cast<double>(count), "mean");
}

}  // namespace loom::ops
