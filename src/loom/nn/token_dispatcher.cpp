#include "loom/nn/token_dispatcher.h"

#include "loom/ops/moe.h"

namespace loom::nn {

MoETokenDispatcher::MoETokenDispatcher(int64_t num_experts)
    : Module("MoETokenDispatcher"), num_experts_(num_experts) {
  LOOM_CHECK(num_experts > 0, ValueError, "MoETokenDispatcher: num_experts must be positive, got ", num_experts);
  register_operation("dispatch");
  register_operation("combine");
}

DispatchedTokens MoETokenDispatcher::dispatch(const Tensor& x, const Tensor& indices, const Tensor& weights) {
  std::vector<Tensor> out =
      call_operation("dispatch", {x, indices, weights}, [experts = num_experts_](const std::vector<Tensor>& in) {
        ops::MoePermutation perm = ops::moe_permute(in[0], in[1], experts);
        return std::vector<Tensor>{perm.permuted, perm.tokens_per_expert, perm.row_map, in[2]};
      });
  LOOM_CHECK(out.size() >= 2, ValueError, "MoETokenDispatcher: 'dispatch' returned ", out.size(),
             " tensors; it must return {tokens, tokens_per_expert, combine state...}");
  return {out[0], out[1], std::vector<Tensor>(out.begin() + 2, out.end())};
}

Tensor MoETokenDispatcher::combine(const Tensor& expert_output, const std::vector<Tensor>& combine_state) {
  std::vector<Tensor> in{expert_output};
  in.insert(in.end(), combine_state.begin(), combine_state.end());
  std::vector<Tensor> out = call_operation("combine", in, [](const std::vector<Tensor>& args) {
    LOOM_CHECK(args.size() == 3, ValueError, "MoETokenDispatcher: 'combine' got ", args.size() - 1,
               " state tensors; the one-process combine needs {row_map, weights} as dispatch returns them");
    return std::vector<Tensor>{ops::moe_unpermute(args[0], args[1], args[2])};
  });
  LOOM_CHECK(out.size() == 1, ValueError, "MoETokenDispatcher: 'combine' returned ", out.size(),
             " tensors; it must return {y}");
  return out[0];
}

}  // namespace loom::nn
