#include "loom/ops/index.h"

#include <optional>

#include "loom/core/trace.h"
#include "loom/autograd/function.h"
#include "loom/kernels/kernel_table.h"

namespace loom::ops {

using autograd::BackwardContext;
using autograd::record;
using kernels::KernelTable;
using Grads = std::vector<Tensor>;

Tensor embedding(const Tensor& ids, const Tensor& weight, const kernels::VocabShard* shard) {
  LOOM_TRACE("op", "embedding");
  Tensor out = kernels::for_tensor(weight, "embedding").embedding(ids, weight, shard);
  const int64_t V = weight.shape()[0];
  const DType grad_dtype = weight.dtype() == DType::f64 ? DType::f64 : DType::f32;
  std::optional<kernels::VocabShard> rows;
  if (shard) rows = kernels::VocabShard{shard->begin, shard->size, {}};
  record("embedding", {&weight}, {&out}, {ids}, [V, grad_dtype, rows](const Grads& g, const BackwardContext& ctx) -> Grads {
    return {kernels::for_tensor(g[0], "embedding")
                .embedding_backward(g[0], ctx.saved(0), V, grad_dtype, rows ? &*rows : nullptr)};
  });
  return out;
}

Tensor gather(const Tensor& x, int dim, const Tensor& index) {
  LOOM_TRACE("op", "gather");
  Tensor out = kernels::for_tensor(x, "gather").gather(x, dim, index);
  const Shape in = x.shape();
  const DType dt = x.dtype();
  record("gather", {&x}, {&out}, {index}, [in, dt, dim](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "gather");
    return {k.scatter(Tensor::zeros(in, dt, g[0].device()), dim, ctx.saved(0), g[0], true)};
  });
  return out;
}

Tensor scatter(const Tensor& x, int dim, const Tensor& index, const Tensor& src, bool accumulate) {
  LOOM_TRACE("op", "scatter");
  Tensor out = kernels::for_tensor(x, "scatter").scatter(x, dim, index, src, accumulate);
  record("scatter", {&x, &src}, {&out}, {index}, [dim, accumulate](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "scatter");
    Grads r(2);
    Tensor idx = ctx.saved(0);
    if (ctx.needs_input_grad(0)) {
      // Overwritten positions get no grad from x; accumulated ones pass it through.
      r[0] = accumulate ? g[0]
                        : k.scatter(g[0], dim, idx, Tensor::zeros(idx.shape(), g[0].dtype(), g[0].device()),
                                    false);
    }
    if (ctx.needs_input_grad(1)) r[1] = k.gather(g[0], dim, idx);
    return r;
  });
  return out;
}

Tensor index_select(const Tensor& x, int dim, const Tensor& index) {
  LOOM_TRACE("op", "index_select");
  Tensor out = kernels::for_tensor(x, "index_select").index_select(x, dim, index);
  const Shape in = x.shape();
  const DType dt = x.dtype();
  record("index_select", {&x}, {&out}, {index}, [in, dt, dim](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "index_select");
    return {k.index_add(Tensor::zeros(in, dt, g[0].device()), dim, ctx.saved(0), g[0])};
  });
  return out;
}

Tensor index_add(const Tensor& x, int dim, const Tensor& index, const Tensor& src) {
  LOOM_TRACE("op", "index_add");
  Tensor out = kernels::for_tensor(x, "index_add").index_add(x, dim, index, src);
  record("index_add", {&x, &src}, {&out}, {index}, [dim](const Grads& g, const BackwardContext& ctx) -> Grads {
    Grads r(2);
    if (ctx.needs_input_grad(0)) r[0] = g[0];
    if (ctx.needs_input_grad(1)) r[1] = kernels::for_tensor(g[0], "index_add").index_select(g[0], dim, ctx.saved(0));
    return r;
  });
  return out;
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t kk) {
  LOOM_TRACE("op", "topk");
  Tensor values, indices;
  kernels::for_tensor(x, "topk").topk(x, kk, values, indices);
  const Shape in = x.shape();
  const DType dt = x.dtype();
  record("topk", {&x}, {&values}, {indices}, [in, dt](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "topk");
    return {k.scatter(Tensor::zeros(in, dt, g[0].device()), -1, ctx.saved(0), g[0], true)};
  });
  return {values, indices};
}

}  // namespace loom::ops
