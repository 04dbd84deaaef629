#include "loom/ops/moe.h"

#include "loom/core/trace.h"
#include "loom/autograd/function.h"
#include "loom/kernels/kernel_table.h"

namespace loom::ops {

using autograd::BackwardContext;
using kernels::KernelTable;
using autograd::record;
using Grads = std::vector<Tensor>;

MoePermutation moe_permute(const Tensor& x, const Tensor& expert_ids, int64_t num_experts) {
  LOOM_TRACE("op", "moe_permute");
  check_floating(x, "moe_permute", "x");
  const KernelTable& k = kernels::for_tensor(x, "moe_permute");
  LOOM_CHECK(x.dim() == 2, ShapeError, "moe_permute: x must be [tokens, hidden], got ", x.shape().str());
  LOOM_CHECK(expert_ids.dim() == 2 && expert_ids.shape()[0] == x.shape()[0], ShapeError,
             "moe_permute: expert_ids ", expert_ids.shape().str(), " must be [tokens, top_k] with the ",
             x.shape()[0], " tokens of x ", x.shape().str());
  kernels::MoeRouting routing = k.moe_routing(expert_ids, num_experts);
  MoePermutation r;
  r.permuted = k.moe_permute_rows(x, routing.row_map);
  r.tokens_per_expert = routing.tokens_per_expert;
  r.row_map = routing.row_map;
  record("moe_permute", {&x}, {&r.permuted}, {routing.row_map},
         [](const Grads& g, const BackwardContext& ctx) -> Grads {
           return {kernels::for_tensor(g[0], "moe_permute").moe_permute_backward(g[0], ctx.saved(0))};
         });
  return r;
}

Tensor moe_unpermute(const Tensor& y, const Tensor& row_map, const Tensor& weights) {
  LOOM_TRACE("op", "moe_unpermute");
  check_floating(y, "moe_unpermute", "y");
  if (weights.defined()) check_floating(weights, "moe_unpermute", "weights");
  Tensor out = kernels::for_tensor(y, "moe_unpermute").moe_unpermute(y, row_map, weights);
  record("moe_unpermute", {&y, &weights}, {&out}, {y, row_map, weights},
         [](const Grads& g, const BackwardContext& ctx) -> Grads {
           Tensor dy, dw;
           Tensor w = ctx.saved(2);
           kernels::for_tensor(g[0], "moe_unpermute")
               .moe_unpermute_backward(g[0], ctx.saved(0), ctx.saved(1), w,
                                       ctx.needs_input_grad(0) ? &dy : nullptr,
                                       ctx.needs_input_grad(1) && w.defined() ? &dw : nullptr);
           return {dy, dw};
         });
  return out;
}

Tensor grouped_gemm(const Tensor& x, const Tensor& w, const Tensor& tokens_per_expert, bool trans_w) {
  LOOM_TRACE("op", "grouped_gemm");
  const char* op = "grouped_gemm";
  check_floating(x, op, "x");
  check_same_dtype(x, w, op);
  const KernelTable& k = kernels::for_tensor(x, op);
  LOOM_CHECK(x.dim() == 2, ShapeError, op, ": x must be [rows, in], got ", x.shape().str());
  LOOM_CHECK(w.dim() == 3, ShapeError, op, ": w must be [experts, in, out]", trans_w ? " ([experts, out, in] with trans_w)" : "",
             ", got ", w.shape().str());
  const int64_t E = w.shape()[0], w_in = trans_w ? w.shape()[2] : w.shape()[1];
  LOOM_CHECK(w_in == x.shape()[1], ShapeError, op, ": x ", x.shape().str(), " has ", x.shape()[1],
             " input features but w ", w.shape().str(), trans_w ? " (trans_w)" : "", " expects ", w_in);
  LOOM_CHECK(tokens_per_expert.dtype() == DType::i64 || tokens_per_expert.dtype() == DType::i32, DTypeError,
             op, ": tokens_per_expert must be int32 or int64, got ", dtype_name(tokens_per_expert.dtype()));
  LOOM_CHECK(tokens_per_expert.dim() == 1 && tokens_per_expert.shape()[0] == E, ShapeError, op,
             ": tokens_per_expert ", tokens_per_expert.shape().str(), " must have one count per expert of w ",
             w.shape().str());
  // The counts decide how the rows are cut, so they are needed on the host.
  const std::vector<int64_t> counts = tokens_per_expert.to_int_vector();
  int64_t total = 0;
  for (int64_t e = 0; e < E; ++e) {
    LOOM_CHECK(counts[e] >= 0, ValueError, op, ": tokens_per_expert[", e, "] = ", counts[e], " is negative");
    total += counts[e];
  }
  LOOM_CHECK(total == x.shape()[0], ValueError, op, ": tokens_per_expert sums to ", total, " but x has ",
             x.shape()[0], " rows; pass the counts moe_permute returned for these rows");
  Tensor out = k.grouped_gemm(x, w, counts, trans_w);
  record(op, {&x, &w}, {&out}, {x, w}, [counts, trans_w](const Grads& g, const BackwardContext& ctx) -> Grads {
    Tensor dx, dw;
    kernels::for_tensor(g[0], "grouped_gemm")
        .grouped_gemm_backward(g[0], ctx.saved(0), ctx.saved(1), counts, trans_w,
                               ctx.needs_input_grad(0) ? &dx : nullptr, ctx.needs_input_grad(1) ? &dw : nullptr);
    return {dx, dw};
  });
  return out;
}

}  // namespace loom::ops
