#include "loom/ops/norm.h"

#include "loom/core/trace.h"
#include "loom/autograd/checkpoint.h"
#include "loom/autograd/function.h"
#include "loom/kernels/kernel_table.h"
#include "loom/ops/elementwise.h"

namespace loom::ops {

using autograd::BackwardContext;
using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

bool is_reduced(DType d) { return d == DType::bf16 || d == DType::f16; }

// The parameter-grad dtype: fp32 main grads for reduced-precision parameters.
Tensor as_param_grad(const Tensor& g, const Tensor& param) {
  if (!g.defined()) return g;
  const DType want = is_reduced(param.dtype()) ? DType::f32 : param.dtype();
  return g.dtype() == want ? g : g.to(want);
}

Tensor cast_if(const Tensor& t, DType d) { return t.defined() ? cast(t, d) : t; }

Tensor rms_norm_fused(const Tensor& x, const Tensor& weight, double eps, DType compute) {
  Tensor rstd;
  Tensor y = kernels::for_tensor(x, "rms_norm").rms_norm(x, weight, eps, compute, rstd);
  record("rms_norm", {&x, &weight}, {&y}, {x, weight, rstd},
         [](const Grads& g, const BackwardContext& ctx) -> Grads {
           Tensor dx, dw;
           Tensor w = ctx.saved(1);
           kernels::for_tensor(g[0], "rms_norm")
               .rms_norm_backward(g[0], ctx.saved(0), w, ctx.saved(2),
                                  ctx.needs_input_grad(0) ? &dx : nullptr,
                                  ctx.needs_input_grad(1) ? &dw : nullptr);
           return {dx, as_param_grad(dw, w)};
         });
  return y;
}

Tensor layer_norm_fused(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                        DType compute) {
  Tensor mean, rstd;
  Tensor y = kernels::for_tensor(x, "layer_norm").layer_norm(x, weight, bias, eps, compute, mean, rstd);
  record("layer_norm", {&x, &weight, &bias}, {&y}, {x, weight, bias, mean, rstd},
         [](const Grads& g, const BackwardContext& ctx) -> Grads {
           Tensor dx, dw, db;
           Tensor w = ctx.saved(1), b = ctx.saved(2);
           kernels::for_tensor(g[0], "layer_norm")
               .layer_norm_backward(g[0], ctx.saved(0), w, ctx.saved(3), ctx.saved(4),
                                    ctx.needs_input_grad(0) ? &dx : nullptr,
                                    ctx.needs_input_grad(1) ? &dw : nullptr,
                                    ctx.needs_input_grad(2) ? &db : nullptr);
           return {dx, as_param_grad(dw, w), as_param_grad(db, b)};
         });
  return y;
}

void check_compute_dtype(DType compute, const char* op) {
  LOOM_CHECK(is_floating(compute), DTypeError, op, ": compute dtype (model.layernorm_compute_dtype) ",
             dtype_name(compute), " is not a floating dtype; use float32, bfloat16, float16 or float64");
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps, DType compute_dtype) {
  return autograd::reuse_in_recompute("rms_norm", [&] {
    LOOM_TRACE("op", "rms_norm");
    check_compute_dtype(compute_dtype, "rms_norm");
    if (!is_reduced(compute_dtype) || x.dtype() == DType::f64)
      return rms_norm_fused(x, weight, eps, compute_dtype);
    // Reduced-precision compute: the op sees compute_dtype inputs; its output is cast back.
    Tensor y = rms_norm_fused(cast(x, compute_dtype), cast_if(weight, compute_dtype), eps, DType::f32);
    return cast(y, x.dtype());
  });
}

Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  DType compute_dtype) {
  LOOM_TRACE("op", "layer_norm");
  check_compute_dtype(compute_dtype, "layer_norm");
  if (!is_reduced(compute_dtype) || x.dtype() == DType::f64)
    return layer_norm_fused(x, weight, bias, eps, compute_dtype);
  Tensor y = layer_norm_fused(cast(x, compute_dtype), cast_if(weight, compute_dtype),
                              cast_if(bias, compute_dtype), eps, DType::f32);
  return cast(y, x.dtype());
}

}  // namespace loom::ops
