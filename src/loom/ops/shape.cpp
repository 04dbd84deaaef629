#include "loom/ops/shape.h"

#include "loom/core/trace.h"
#include "loom/autograd/function.h"
#include "loom/kernels/kernel_table.h"

namespace loom::ops {

using autograd::BackwardContext;
using autograd::record;
using Grads = std::vector<Tensor>;

Tensor reshape(const Tensor& x, const Shape& shape) {
  Tensor out = x.reshape(shape);
  if (out.impl_ptr() == x.impl_ptr()) out = out.detach();  // never alias x's autograd meta
  const Shape in = x.shape();
  record("reshape", {&x}, {&out}, {}, [in](const Grads& g, const BackwardContext&) -> Grads {
    return {g[0].reshape(in)};
  });
  return out;
}

Tensor transpose(const Tensor& x, int d0, int d1) {
  Tensor out = x.transpose(d0, d1);
  record("transpose", {&x}, {&out}, {}, [d0, d1](const Grads& g, const BackwardContext&) -> Grads {
    return {g[0].transpose(d0, d1)};
  });
  return out;
}

Tensor permute(const Tensor& x, const std::vector<int>& order) {
  Tensor out = x.permute(order);
  std::vector<int> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    inverse[normalize_dim(order[i], x.dim(), "permute")] = static_cast<int>(i);
  record("permute", {&x}, {&out}, {}, [inverse](const Grads& g, const BackwardContext&) -> Grads {
    return {g[0].permute(inverse)};
  });
  return out;
}

Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  Tensor out = x.narrow(dim, start, length);
  const Shape in = x.shape();
  const DType dt = x.dtype();
  record("narrow", {&x}, {&out}, {}, [in, dt, dim, start, length](const Grads& g, const BackwardContext&) -> Grads {
    Tensor full = Tensor::zeros(in, dt, g[0].device());
    full.narrow(dim, start, length).copy_(g[0]);
    return {full};
  });
  return out;
}

Tensor select(const Tensor& x, int dim, int64_t index) {
  Tensor out = x.select(dim, index);
  const Shape in = x.shape();
  const DType dt = x.dtype();
  const int d = normalize_dim(dim, x.dim(), "select");
  const int64_t idx = index < 0 ? index + x.shape()[d] : index;
  record("select", {&x}, {&out}, {}, [in, dt, d, idx](const Grads& g, const BackwardContext&) -> Grads {
    Tensor full = Tensor::zeros(in, dt, g[0].device());
    full.select(d, idx).copy_(g[0]);
    return {full};
  });
  return out;
}

Tensor expand(const Tensor& x, const Shape& shape) {
  Tensor out = x.expand(shape);
  const Shape in = x.shape();
  record("expand", {&x}, {&out}, {}, [in](const Grads& g, const BackwardContext&) -> Grads {
    return {kernels::for_tensor(g[0], "expand").sum_to_shape(g[0], in)};
  });
  return out;
}

Tensor unsqueeze(const Tensor& x, int dim) {
  Tensor out = x.unsqueeze(dim);
  const Shape in = x.shape();
  record("unsqueeze", {&x}, {&out}, {}, [in](const Grads& g, const BackwardContext&) -> Grads {
    return {g[0].reshape(in)};
  });
  return out;
}

Tensor squeeze(const Tensor& x, int dim) {
  Tensor out = x.squeeze(dim);
  const Shape in = x.shape();
  record("squeeze", {&x}, {&out}, {}, [in](const Grads& g, const BackwardContext&) -> Grads {
    return {g[0].reshape(in)};
  });
  return out;
}

Tensor contiguous(const Tensor& x) {
  LOOM_TRACE("op", "contiguous");
  if (x.is_contiguous()) return x;
  Tensor out = x.clone();
  record("contiguous", {&x}, {&out}, {}, [](const Grads& g, const BackwardContext&) -> Grads {
    return {g[0]};
  });
  return out;
}

Tensor flatten(const Tensor& x, int start_dim, int end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  const int s = normalize_dim(start_dim, x.dim(), "flatten");
  const int e = normalize_dim(end_dim, x.dim(), "flatten");
  LOOM_CHECK(s <= e, ShapeError, "flatten: start_dim ", start_dim, " is after end_dim ", end_dim);
  Shape shape;
  for (int i = 0; i < s; ++i) shape.push_back(x.shape()[i]);
  int64_t n = 1;
  for (int i = s; i <= e; ++i) n *= x.shape()[i];
  shape.push_back(n);
  for (int i = e + 1; i < x.dim(); ++i) shape.push_back(x.shape()[i]);
  return reshape(x, shape);
}

Tensor cat(const std::vector<Tensor>& xs, int dim) {
  LOOM_TRACE("op", "cat");
  LOOM_CHECK(!xs.empty(), ValueError, "cat: needs at least one tensor");
  const Tensor& first = xs[0];
  const int d = normalize_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  int64_t total = 0;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    LOOM_CHECK(x.dim() == first.dim(), ShapeError, "cat: tensor ", i, " has shape ", x.shape().str(),
               " but tensor 0 has ", first.shape().str(), " (same number of dims required)");
    check_same_dtype(first, x, "cat");
    for (int k = 0; k < x.dim(); ++k)
      LOOM_CHECK(k == d || x.shape()[k] == first.shape()[k], ShapeError, "cat: tensor ", i,
                 " has shape ", x.shape().str(), " but tensor 0 has ", first.shape().str(),
                 "; all dims except dim ", d, " must match");
    sizes.push_back(x.shape()[d]);
    total += x.shape()[d];
  }
  out_shape[d] = total;
  Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());
  int64_t offset = 0;
  for (const Tensor& x : xs) {
    out.narrow(d, offset, x.shape()[d]).copy_(x);
    offset += x.shape()[d];
  }
  std::vector<const Tensor*> inputs;
  for (const Tensor& x : xs) inputs.push_back(&x);
  record("cat", inputs, {&out}, {}, [sizes, d](const Grads& g, const BackwardContext& ctx) -> Grads {
    Grads r(sizes.size());
    int64_t off = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (ctx.needs_input_grad(i)) r[i] = g[0].narrow(d, off, sizes[i]).contiguous();
      off += sizes[i];
    }
    return r;
  });
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int dim) {
  LOOM_TRACE("op", "split");
  const int d = normalize_dim(dim, x.dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    LOOM_CHECK(s >= 0, ShapeError, "split: negative size ", s);
    total += s;
  }
  LOOM_CHECK(total == x.shape()[d], ShapeError, "split: sizes sum to ", total, " but dim ", d,
             " of ", x.shape().str(), " is ", x.shape()[d]);
  std::vector<Tensor> outs;
  int64_t off = 0;
  for (int64_t s : sizes) {
    outs.push_back(x.narrow(d, off, s));
    off += s;
  }
  std::vector<Tensor*> out_ptrs;
  for (Tensor& o : outs) out_ptrs.push_back(&o);
  const Shape in = x.shape();
  const DType dt = x.dtype();
  // One node for all pieces: backward writes each piece's grad into one full-size buffer.
  record("split", {&x}, out_ptrs, {}, [sizes, d, in, dt](const Grads& g, const BackwardContext&) -> Grads {
    Tensor full = Tensor::empty(in, dt, g[0].device());
    int64_t o = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      full.narrow(d, o, sizes[i]).copy_(g[i]);
      o += sizes[i];
    }
    return {full};
  });
  return outs;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim) {
  const int d = normalize_dim(dim, x.dim(), "chunk");
  LOOM_CHECK(chunks >= 1 && x.shape()[d] % chunks == 0, ShapeError, "chunk: dim ", d, " of ",
             x.shape().str(), " is not divisible into ", chunks, " equal chunks");
  return split(x, std::vector<int64_t>(static_cast<size_t>(chunks), x.shape()[d] / chunks), d);
}

Tensor stack(const std::vector<Tensor>& xs, int dim) {
  LOOM_CHECK(!xs.empty(), ValueError, "stack: needs at least one tensor");
  const int d = normalize_dim(dim, xs[0].dim() + 1, "stack");
  std::vector<Tensor> expanded;
  for (const Tensor& x : xs) {
    LOOM_CHECK(x.shape() == xs[0].shape(), ShapeError, "stack: shapes differ (", x.shape().str(),
               " vs ", xs[0].shape().str(), ")");
    expanded.push_back(unsqueeze(x, d));
  }
  return cat(expanded, d);
}

}  // namespace loom::ops
