#include "loom/ops/softmax.h"

#include "loom/core/trace.h"
#include "loom/autograd/function.h"
#include "loom/kernels/kernel_table.h"

namespace loom::ops {

using autograd::BackwardContext;
using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

Tensor softmax_impl(const Tensor& x, int dim, bool log) {
  LOOM_TRACE("op", log ? "log_softmax" : "softmax");
  const int d = normalize_dim(dim, x.dim(), log ? "log_softmax" : "softmax");
  const int last = x.dim() - 1;
  // Kernels work on the last dim; other dims are moved there and back.
  Tensor xl = d == last ? x : x.transpose(d, last);
  Tensor out = kernels::for_tensor(x, log ? "log_softmax" : "softmax").softmax_last(xl, log);
  if (d != last) out = out.transpose(d, last);
  record(log ? "log_softmax" : "softmax", {&x}, {&out}, {out},
         [d, last, log](const Grads& g, const BackwardContext& ctx) -> Grads {
           Tensor y = ctx.saved(0);
           Tensor gl = d == last ? g[0] : g[0].transpose(d, last);
           Tensor yl = d == last ? y : y.transpose(d, last);
           Tensor dx = kernels::for_tensor(gl, log ? "log_softmax" : "softmax").softmax_last_backward(gl, yl, log);
           return {d == last ? dx : dx.transpose(d, last)};
         });
  return out;
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int dim) { return softmax_impl(x, dim, true); }

}  // namespace loom::ops
