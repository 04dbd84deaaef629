#include "loom/ops/attention.h"

#include "loom/core/trace.h"
#include <cmath>

#include "loom/autograd/function.h"
#include "loom/autograd/grad_mode.h"
#include "loom/kernels/kernel_table.h"

namespace loom::ops {

using autograd::BackwardContext;
using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

void check_inputs(const Tensor& q, const Tensor& kt, const Tensor& v, const AttentionOptions& opt,
                  const Tensor* max_logits) {
  const char* op = "attention";
  LOOM_CHECK(q.defined() && kt.defined() && v.defined(), ValueError,
             "attention: q, k and v must all be defined tensors");
  LOOM_CHECK(q.dim() == 4, ShapeError, "attention: q ", q.shape().str(),
             " must be 4-D [batch, seq, heads, head_dim]");
  LOOM_CHECK(kt.dim() == 4, ShapeError, "attention: k ", kt.shape().str(),
             " must be 4-D [batch, seq, kv_heads, head_dim]");
  LOOM_CHECK(v.dim() == 4, ShapeError, "attention: v ", v.shape().str(),
             " must be 4-D [batch, seq, kv_heads, v_head_dim]");
  check_floating(q, op, "q");
  LOOM_CHECK(kt.dtype() == q.dtype() && v.dtype() == q.dtype(), DTypeError,
             "attention: q, k and v must share one dtype, got q ", dtype_name(q.dtype()), ", k ",
             dtype_name(kt.dtype()), ", v ", dtype_name(v.dtype()), "; cast them first");
  check_same_device(q, kt, op);
  check_same_device(q, v, op);
  const std::string shapes = "q " + q.shape().str() + ", k " + kt.shape().str() + ", v " + v.shape().str();
  LOOM_CHECK(kt.size(0) == q.size(0) && v.size(0) == q.size(0), ShapeError, "attention: ", shapes,
             ": batch sizes (dim 0) must be equal");
  LOOM_CHECK(v.size(1) == kt.size(1), ShapeError, "attention: ", shapes,
             ": k and v must have the same sequence length (dim 1)");
  LOOM_CHECK(v.size(2) == kt.size(2), ShapeError, "attention: ", shapes,
             ": k and v must have the same number of kv heads (dim 2)");
  LOOM_CHECK(kt.size(2) >= 1 && q.size(2) % kt.size(2) == 0, ShapeError, "attention: ", shapes,
             ": query heads (", q.size(2), ") must be a multiple of kv heads (", kt.size(2),
             ") for grouped-query attention");
  LOOM_CHECK(kt.size(3) == q.size(3), ShapeError, "attention: ", shapes,
             ": q and k head dims (dim 3) must be equal (", q.size(3), " vs ", kt.size(3), ")");
  LOOM_CHECK(q.size(3) >= 1 && v.size(3) >= 1, ShapeError, "attention: ", shapes,
             ": head dims must be at least 1");
  LOOM_CHECK(std::isfinite(opt.softmax_scale), ValueError, "attention: softmax_scale = ",
             opt.softmax_scale, " is not finite; use 0 for 1/sqrt(head_dim)");
  if (opt.doc_ends.defined()) {
    LOOM_CHECK(opt.doc_ends.dtype() == DType::i32 || opt.doc_ends.dtype() == DType::i64, DTypeError,
               "attention: doc_ends must be int32 or int64, got ", dtype_name(opt.doc_ends.dtype()));
    LOOM_CHECK(opt.doc_ends.dim() == 2 && opt.doc_ends.size(0) == q.size(0) && opt.doc_ends.size(1) >= 1,
               ShapeError, "attention: doc_ends ", opt.doc_ends.shape().str(), " must be [batch, K] = [",
               q.size(0), ", K>=1] for ", shapes, " (ascending document ends per sample)");
  }
  LOOM_CHECK(!opt.track_max_logits || max_logits != nullptr, ValueError,
             "attention: track_max_logits is set but no max_logits output was passed; pass a "
             "Tensor* to receive the fp32 [heads] maxima");
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& kt, const Tensor& v, const AttentionOptions& opt,
                 Tensor* max_logits) {
  LOOM_TRACE("op", "attention");
  check_inputs(q, kt, v, opt, max_logits);
  const double scale = opt.softmax_scale != 0 ? opt.softmax_scale : 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  const kernels::AttentionMask mask{opt.causal, opt.q_offset, opt.doc_ends, Tensor()};
  if (opt.decoding) {
    const bool differentiated =
        autograd::grad_enabled() && (q.requires_grad() || kt.requires_grad() || v.requires_grad());
    LOOM_CHECK(!opt.track_max_logits && !differentiated, ValueError,
               "attention: the decoding mode has no backward and no logit tracking; it is for generation "
               "without grads");
    return kernels::for_tensor(q, "attention").attention_decode(q, kt, v, scale, mask).out;
  }
  kernels::AttentionForwardResult fwd = kernels::for_tensor(q, "attention")
      .attention_forward(q, kt, v, scale, mask, opt.track_max_logits, kernels::AttentionTiles{});
  if (max_logits) *max_logits = opt.track_max_logits ? fwd.max_logits : Tensor();
  Tensor out = fwd.out;
  record("attention", {&q, &kt, &v}, {&out}, {q, kt, v, out, fwd.lse, opt.doc_ends},
         [scale, causal = opt.causal, q_offset = opt.q_offset](const Grads& g, const BackwardContext& ctx) -> Grads {
           const kernels::AttentionMask m{causal, q_offset, ctx.saved(5), Tensor()};
           kernels::AttentionGrads grads = kernels::for_tensor(g[0], "attention")
               .attention_backward(g[0], ctx.saved(0), ctx.saved(1), ctx.saved(2), ctx.saved(3), ctx.saved(4),
                                   scale, m, kernels::AttentionTiles{});
           return {ctx.needs_input_grad(0) ? grads.dq : Tensor(),
                   ctx.needs_input_grad(1) ? grads.dk : Tensor(),
                   ctx.needs_input_grad(2) ? grads.dv : Tensor()};
         });
  return out;
}

}  // namespace loom::ops
