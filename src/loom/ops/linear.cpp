#include "loom/ops/linear.h"

#include "loom/core/trace.h"
#include "loom/autograd/checkpoint.h"
#include "loom/autograd/function.h"
#include "loom/kernels/kernel_table.h"
#include "loom/ops/shape.h"

namespace loom::ops {

using autograd::BackwardContext;
using kernels::KernelTable;
using autograd::record;
using Grads = std::vector<Tensor>;

namespace {
DType wgrad_dtype(DType weight) {
  return weight == DType::bf16 || weight == DType::f16 ? DType::f32 : weight;
}
}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  return autograd::reuse_in_recompute("linear", [&] {
    LOOM_TRACE("op", "linear");
    LOOM_CHECK(w.dim() == 2, ShapeError, "linear: weight must be 2-D [out, in], got ", w.shape().str());
    LOOM_CHECK(x.dim() >= 1 && x.shape()[x.dim() - 1] == w.shape()[1], ShapeError,
               "linear: input ", x.shape().str(), " has last dim ", x.dim() ? x.shape()[x.dim() - 1] : 0,
               " but weight ", w.shape().str(), " expects ", w.shape()[1], " (weight is [out, in])");
    check_same_dtype(x, w, "linear");
    const int64_t K = w.shape()[1], N = w.shape()[0], M = x.numel() / std::max<int64_t>(K, 1);
    if (b.defined()) {
      LOOM_CHECK(b.dim() == 1 && b.shape()[0] == N, ShapeError, "linear: bias ", b.shape().str(),
                 " must be [", N, "] for weight ", w.shape().str());
      check_same_dtype(x, b, "linear");
    }
    Shape out_shape = x.shape();
    out_shape[out_shape.ndim() - 1] = N;
    const KernelTable& k = kernels::for_tensor(x, "linear");
    Tensor x2 = x.reshape({M, K});
    Tensor y = Tensor::empty({M, N}, x.dtype(), x.device());
    if (b.defined()) {
      y.copy_(b.expand({M, N}));  // bias first, then GEMM accumulates onto it (one pass fewer)
      k.gemm(x2, false, w, true, y, 1.0, 1.0);
    } else {
      k.gemm(x2, false, w, true, y, 1.0, 0.0);
    }
    Tensor out = y.view(out_shape);
    const bool has_bias = b.defined();
    record("linear", {&x, &w, &b}, {&out}, {x2, w},
           [M, K, N, has_bias, in_shape = x.shape()](const Grads& g, const BackwardContext& ctx) -> Grads {
             const KernelTable& k = kernels::for_tensor(g[0], "linear");
             Grads r(3);
             Tensor g2 = g[0].reshape({M, N});
             if (ctx.needs_input_grad(0))
               r[0] = k.matmul_2d(g2, false, ctx.saved(1), false, g2.dtype()).view(in_shape);
             // bf16/f16 weights: the weight grad stays in fp32 (gradient-accumulation fusion), so
             // the main grad never sees a bf16-rounded wgrad.
             if (ctx.needs_input_grad(1))
               r[1] = k.matmul_2d(g2, true, ctx.saved(0), false, wgrad_dtype(ctx.saved(1).dtype()));
             if (has_bias && ctx.needs_input_grad(2)) r[2] = k.sum(g2, {0}, false);
             return r;
           });
    return out;
  });
}

Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b) {
  LOOM_TRACE("op", "bmm");
  LOOM_CHECK(a.dim() == 3 && b.dim() == 3, ShapeError, "bmm: operands must be 3-D, got ",
             a.shape().str(), " and ", b.shape().str());
  check_same_dtype(a, b, "bmm");
  const int64_t B = a.shape()[0];
  const int64_t M = trans_a ? a.shape()[2] : a.shape()[1];
  const int64_t Ka = trans_a ? a.shape()[1] : a.shape()[2];
  const int64_t Kb = trans_b ? b.shape()[2] : b.shape()[1];
  const int64_t N = trans_b ? b.shape()[1] : b.shape()[2];
  LOOM_CHECK(b.shape()[0] == B && Ka == Kb, ShapeError, "bmm: cannot multiply ", a.shape().str(),
             trans_a ? "ᵀ" : "", " by ", b.shape().str(), trans_b ? "ᵀ" : "",
             " (batch sizes must match and inner dims agree)");
  Tensor out = Tensor::empty({B, M, N}, a.dtype(), a.device());
  kernels::for_tensor(a, "bmm").bmm(a, trans_a, b, trans_b, out, 1.0, 0.0);
  record("bmm", {&a, &b}, {&out}, {a, b}, [trans_a, trans_b](const Grads& g, const BackwardContext& ctx) -> Grads {
    const KernelTable& k = kernels::for_tensor(g[0], "bmm");
    Grads r(2);
    Tensor av = ctx.saved(0), bv = ctx.saved(1);
    const Tensor& go = g[0];
    if (ctx.needs_input_grad(0)) {
      // C = op(A)·op(B): dop(A) = dC·op(B)ᵀ ; dA = dop(A) or its transpose.
      Tensor da = Tensor::empty(av.shape(), av.dtype(), av.device());
      if (!trans_a) k.bmm(go, false, bv, !trans_b, da, 1.0, 0.0);  // [B,M,N]·op(B)ᵀ → [B,M,K]
      else k.bmm(bv, trans_b, go, true, da, 1.0, 0.0);              // (dC·op(B)ᵀ)ᵀ = op(B)·dCᵀ → [B,K,M]
      r[0] = da;
    }
    if (ctx.needs_input_grad(1)) {
      Tensor db = Tensor::empty(bv.shape(), bv.dtype(), bv.device());
      if (!trans_b) k.bmm(av, !trans_a, go, false, db, 1.0, 0.0);  // op(A)ᵀ·dC → [B,K,N]
      else k.bmm(go, true, av, trans_a, db, 1.0, 0.0);              // dCᵀ·op(A) → [B,N,K]
      r[1] = db;
    }
    return r;
  });
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  LOOM_TRACE("op", "matmul");
  LOOM_CHECK(a.dim() >= 2 && b.dim() >= 2, ShapeError, "matmul: operands must be at least 2-D, got ",
             a.shape().str(), " and ", b.shape().str());
  if (b.dim() == 2) {
    // [..., M, K] · [K, N]: fold the leading dims into M: linear with wᵀ.
    LOOM_CHECK(a.shape()[a.dim() - 1] == b.shape()[0], ShapeError, "matmul: ", a.shape().str(),
               " · ", b.shape().str(), ": inner dims differ");
    const int64_t K = b.shape()[0], N = b.shape()[1];
    const int64_t M = a.numel() / std::max<int64_t>(K, 1);
    Shape out_shape = a.shape();
    out_shape[out_shape.ndim() - 1] = N;
    Tensor a2 = a.reshape({M, K});
    Tensor out = kernels::for_tensor(a, "matmul").matmul_2d(a2, false, b, false, a2.dtype()).view(out_shape);
    record("matmul", {&a, &b}, {&out}, {a2, b},
           [M, N, in_shape = a.shape()](const Grads& g, const BackwardContext& ctx) -> Grads {
             const KernelTable& k = kernels::for_tensor(g[0], "matmul");
             Grads r(2);
             Tensor g2 = g[0].reshape({M, N});
             if (ctx.needs_input_grad(0))
               r[0] = k.matmul_2d(g2, false, ctx.saved(1), true, g2.dtype()).view(in_shape);
             if (ctx.needs_input_grad(1)) r[1] = k.matmul_2d(ctx.saved(0), true, g2, false, ctx.saved(0).dtype());
             return r;
           });
    return out;
  }
  LOOM_CHECK(a.dim() == b.dim(), ShapeError, "matmul: ", a.shape().str(), " · ", b.shape().str(),
             ": batched operands need the same number of dims");
  for (int i = 0; i < a.dim() - 2; ++i)
    LOOM_CHECK(a.shape()[i] == b.shape()[i], ShapeError, "matmul: batch dims of ", a.shape().str(),
               " and ", b.shape().str(), " differ (no batch broadcasting)");
  const int64_t M = a.shape()[a.dim() - 2], K = a.shape()[a.dim() - 1], N = b.shape()[b.dim() - 1];
  const int64_t B = a.numel() / std::max<int64_t>(M * K, 1);
  Shape out_shape = a.shape();
  out_shape[out_shape.ndim() - 1] = N;
  // Route through bmm so autograd has one formula.
  Tensor out = bmm(reshape(a, {B, M, K}), reshape(b, {B, K, N}));
  return reshape(out, out_shape);
}

}  // namespace loom::ops
