#include "loom/nn/aux_loss.h"

#include "loom/autograd/function.h"

namespace loom::nn {

Tensor attach_auxiliary_loss(const Tensor& x, const Tensor& aux, double scale) {
  if (!aux.defined() || !aux.requires_grad()) return x;
  Tensor out = x.detach();
  const Shape aux_shape = aux.shape();
  const DType aux_dtype = aux.dtype();
  autograd::record("attach_auxiliary_loss", {&x, &aux}, {&out}, {},
                   [scale, aux_shape, aux_dtype](const std::vector<Tensor>& g,
                                                 const autograd::BackwardContext& ctx) {
                     std::vector<Tensor> r(2);
                     if (ctx.needs_input_grad(0)) r[0] = g[0];
                     if (ctx.needs_input_grad(1)) r[1] = Tensor::full(aux_shape, scale, aux_dtype);
                     return r;
                   });
  return out;
}

}  // namespace loom::nn
