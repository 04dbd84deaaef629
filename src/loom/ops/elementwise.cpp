#include "loom/ops/elementwise.h"

#include "loom/core/trace.h"
#include "loom/autograd/checkpoint.h"
#include "loom/autograd/function.h"
#include "loom/kernels/kernel_table.h"

namespace loom::ops {

using autograd::BackwardContext;
using autograd::record;
using kernels::BinaryOp;
using kernels::KernelTable;
using kernels::UnaryOp;

namespace {

using Grads = std::vector<Tensor>;

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  LOOM_TRACE("op", "add");
  Tensor out = kernels::for_tensor(a, "add").binary(BinaryOp::add, a, b, "add");
  const Shape sa = a.shape(), sb = b.shape();
  record("add", {&a, &b}, {&out}, {}, [sa, sb](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "add");
    return {ctx.needs_input_grad(0) ? k.sum_to_shape(g[0], sa) : Tensor(),
            ctx.needs_input_grad(1) ? k.sum_to_shape(g[0], sb) : Tensor()};
  });
  return out;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  LOOM_TRACE("op", "sub");
  Tensor out = kernels::for_tensor(a, "sub").binary(BinaryOp::sub, a, b, "sub");
  const Shape sa = a.shape(), sb = b.shape();
  record("sub", {&a, &b}, {&out}, {}, [sa, sb](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "sub");
    return {ctx.needs_input_grad(0) ? k.sum_to_shape(g[0], sa) : Tensor(),
            ctx.needs_input_grad(1) ? k.affine(k.sum_to_shape(g[0], sb), -1.0, 0.0) : Tensor()};
  });
  return out;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  LOOM_TRACE("op", "mul");
  Tensor out = kernels::for_tensor(a, "mul").binary(BinaryOp::mul, a, b, "mul");
  const Shape sa = a.shape(), sb = b.shape();
  record("mul", {&a, &b}, {&out}, {a, b}, [sa, sb](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "mul");
    Grads r(2);
    if (ctx.needs_input_grad(0))
      r[0] = k.sum_to_shape(k.binary(BinaryOp::mul, g[0], ctx.saved(1), "mul_backward"), sa);
    if (ctx.needs_input_grad(1))
      r[1] = k.sum_to_shape(k.binary(BinaryOp::mul, g[0], ctx.saved(0), "mul_backward"), sb);
    return r;
  });
  return out;
}

Tensor div(const Tensor& a, const Tensor& b) {
  LOOM_TRACE("op", "div");
  Tensor out = kernels::for_tensor(a, "div").binary(BinaryOp::div, a, b, "div");
  const Shape sa = a.shape(), sb = b.shape();
  record("div", {&a, &b}, {&out}, {a, b}, [sa, sb](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "div");
    Grads r(2);
    Tensor bv = ctx.saved(1);
    Tensor ga = k.binary(BinaryOp::div, g[0], bv, "div_backward");
    if (ctx.needs_input_grad(0)) r[0] = k.sum_to_shape(ga, sa);
    if (ctx.needs_input_grad(1)) {
      // d(a/b)/db = -a/b² = -(g/b)·(a/b)
      Tensor q = k.binary(BinaryOp::div, ctx.saved(0), bv, "div_backward");
      r[1] = k.sum_to_shape(k.affine(k.binary(BinaryOp::mul, ga, q, "div_backward"), -1.0, 0.0), sb);
    }
    return r;
  });
  return out;
}

Tensor maximum(const Tensor& a, const Tensor& b) {
  LOOM_TRACE("op", "maximum");
  LOOM_CHECK(!autograd::needs_grad(a, b), ValueError,
             "maximum: an input requires grad, but maximum has no backward; call it on detached "
             "tensors or under autograd::NoGradGuard");
  return kernels::for_tensor(a, "maximum").binary(BinaryOp::maximum, a, b, "maximum");
}

Tensor scale(const Tensor& a, double s) {
  LOOM_TRACE("op", "scale");
  Tensor out = kernels::for_tensor(a, "scale").affine(a, s, 0.0);
  record("scale", {&a}, {&out}, {}, [s](const Grads& g, const BackwardContext&) -> Grads {
    return {kernels::for_tensor(g[0], "scale").affine(g[0], s, 0.0)};
  });
  return out;
}

Tensor add_scalar(const Tensor& a, double s) {
  LOOM_TRACE("op", "add_scalar");
  Tensor out = kernels::for_tensor(a, "add_scalar").affine(a, 1.0, s);
  record("add_scalar", {&a}, {&out}, {}, [](const Grads& g, const BackwardContext&) -> Grads {
    return {g[0]};
  });
  return out;
}

Tensor neg(const Tensor& a) { return scale(a, -1.0); }

Tensor exp(const Tensor& a) {
  LOOM_TRACE("op", "exp");
  Tensor out = kernels::for_tensor(a, "exp").unary(UnaryOp::exp, a, "exp");
  record("exp", {&a}, {&out}, {out}, [](const Grads& g, const BackwardContext& ctx) -> Grads {
    return {kernels::for_tensor(g[0], "exp").binary(BinaryOp::mul, g[0], ctx.saved(0), "exp_backward")};
  });
  return out;
}

Tensor log(const Tensor& a) {
  LOOM_TRACE("op", "log");
  Tensor out = kernels::for_tensor(a, "log").unary(UnaryOp::log, a, "log");
  record("log", {&a}, {&out}, {a}, [](const Grads& g, const BackwardContext& ctx) -> Grads {
    return {kernels::for_tensor(g[0], "log").binary(BinaryOp::div, g[0], ctx.saved(0), "log_backward")};
  });
  return out;
}

Tensor sqrt(const Tensor& a) {
  LOOM_TRACE("op", "sqrt");
  Tensor out = kernels::for_tensor(a, "sqrt").unary(UnaryOp::sqrt, a, "sqrt");
  record("sqrt", {&a}, {&out}, {out}, [](const Grads& g, const BackwardContext& ctx) -> Grads {
    // d sqrt(a) = g / (2 sqrt(a))
    const KernelTable& k = kernels::for_tensor(g[0], "sqrt");
    return {k.affine(k.binary(BinaryOp::div, g[0], ctx.saved(0), "sqrt_backward"), 0.5, 0.0)};
  });
  return out;
}

Tensor square(const Tensor& a) {
  LOOM_TRACE("op", "square");
  Tensor out = kernels::for_tensor(a, "square").unary(UnaryOp::square, a, "square");
  record("square", {&a}, {&out}, {a}, [](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "square");
    return {k.affine(k.binary(BinaryOp::mul, g[0], ctx.saved(0), "square_backward"), 2.0, 0.0)};
  });
  return out;
}

Tensor sigmoid(const Tensor& a) {
  LOOM_TRACE("op", "sigmoid");
  Tensor out = kernels::for_tensor(a, "sigmoid").unary(UnaryOp::sigmoid, a, "sigmoid");
  record("sigmoid", {&a}, {&out}, {out}, [](const Grads& g, const BackwardContext& ctx) -> Grads {
    return {kernels::for_tensor(g[0], "sigmoid").sigmoid_backward(g[0].contiguous(), ctx.saved(0))};
  });
  return out;
}

Tensor silu(const Tensor& a) {
  LOOM_TRACE("op", "silu");
  Tensor out = kernels::for_tensor(a, "silu").unary(UnaryOp::silu, a, "silu");
  record("silu", {&a}, {&out}, {a}, [](const Grads& g, const BackwardContext& ctx) -> Grads {
    return {kernels::for_tensor(g[0], "silu").silu_backward(g[0], ctx.saved(0))};
  });
  return out;
}

Tensor tanh(const Tensor& a) {
  LOOM_TRACE("op", "tanh");
  Tensor out = kernels::for_tensor(a, "tanh").unary(UnaryOp::tanh, a, "tanh");
  record("tanh", {&a}, {&out}, {out}, [](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "tanh");
    Tensor y = ctx.saved(0);
    Tensor one_minus_y2 = k.affine(k.unary(UnaryOp::square, y, "tanh_backward"), -1.0, 1.0);
    return {k.binary(BinaryOp::mul, g[0], one_minus_y2, "tanh_backward")};
  });
  return out;
}

Tensor gelu(const Tensor& a, bool tanh_approx) {
  LOOM_TRACE("op", "gelu");
  Tensor out = kernels::for_tensor(a, "gelu").gelu(a, tanh_approx);
  record("gelu", {&a}, {&out}, {a}, [tanh_approx](const Grads& g, const BackwardContext& ctx) -> Grads {
    return {kernels::for_tensor(g[0], "gelu").gelu_backward(g[0], ctx.saved(0), tanh_approx)};
  });
  return out;
}

Tensor swiglu(const Tensor& gate, const Tensor& up) {
  return autograd::reuse_in_recompute("swiglu", [&] {
    LOOM_TRACE("op", "swiglu");
    Tensor out = kernels::for_tensor(gate, "swiglu").swiglu(gate, up);
    record("swiglu", {&gate, &up}, {&out}, {gate, up}, [](const Grads& g, const BackwardContext& ctx) -> Grads {
      Tensor dg, du;
      kernels::for_tensor(g[0], "swiglu").swiglu_backward(g[0], ctx.saved(0), ctx.saved(1), dg, du);
      return {dg, du};
    });
    return out;
  });
}

Tensor swiglu_packed(const Tensor& h) {
  return autograd::reuse_in_recompute("swiglu", [&] {
    LOOM_TRACE("op", "swiglu");
    Tensor out = kernels::for_tensor(h, "swiglu").swiglu_packed(h);
    record("swiglu", {&h}, {&out}, {h}, [](const Grads& g, const BackwardContext& ctx) -> Grads {
      return {kernels::for_tensor(g[0], "swiglu").swiglu_packed_backward(g[0], ctx.saved(0))};
    });
    return out;
  });
}

Tensor cast(const Tensor& a, DType dtype) {
  LOOM_TRACE("op", "cast");
  if (a.dtype() == dtype) return a;
  return record_cast(a, a.to(dtype));
}

Tensor record_cast(const Tensor& a, Tensor out) {
  const DType from = a.dtype();
  record("cast", {&a}, {&out}, {}, [from](const Grads& g, const BackwardContext&) -> Grads {
    return {g[0].to(from)};
  });
  return out;
}

}  // namespace loom::ops
