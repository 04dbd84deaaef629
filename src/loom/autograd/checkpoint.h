// Activation checkpointing (recompute). checkpoint(fn, inputs) runs fn normally but, through
// saved-tensor hooks, keeps none of the tensors fn's ops save for backward (except those the
// policy says to keep). The first time backward needs one of them, fn is re-run on the stored
// inputs with the RNG state of the original forward, regenerating all of them at once; each is
// released as soon as backward has used it. Grads are identical to running without checkpoint.
#pragma once

#include <functional>
#include <type_traits>
#include <vector>

#include "loom/autograd/grad_mode.h"
#include "loom/core/tensor.h"

namespace loom::autograd {

using CheckpointFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
// Returns true when the tensor saved by op `op` must be kept (not recomputed).
using SavePolicy = std::function<bool(const char* op)>;

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               SavePolicy keep = nullptr);

// Runs `op`, the operator `name`, and returns its outputs. Inside a checkpointed forward whose
// policy keeps `name` (recompute.exclude_op; MindSpore's MUST_SAVE, PyTorch's selective
// checkpoint), the first forward keeps the outputs (and what the operator saves for its own
// backward) and the recompute hands them back without running `op` again, so a kept collective
// is not re-issued in backward. Elsewhere it just runs `op`. The operators that go through it
// are listed in docs/memory.md.
template <class Op>
auto reuse_in_recompute(const char* name, Op&& op) -> std::invoke_result_t<Op&>;

// Whether a checkpointed forward whose policy keeps operator `name` runs on this thread, and the
// keeping itself (reuse_in_recompute's two halves).
bool keeps_operator(const char* name);
std::vector<Tensor> run_kept_operator(const char* name, const std::function<std::vector<Tensor>()>& op);

template <class Op>
auto reuse_in_recompute(const char* name, Op&& op) -> std::invoke_result_t<Op&> {
  if (!keeps_operator(name)) return op();  // the common case: one thread-local read
  if constexpr (std::is_same_v<std::invoke_result_t<Op&>, Tensor>)
    return run_kept_operator(name, [&op] { return std::vector<Tensor>{op()}; })[0];
  else
    return run_kept_operator(name, [&op] { return op(); });
}

// True while a checkpointed function is being re-run for backward. Modules with side effects
// in forward (counters, running maxima, aux-loss bookkeeping) skip them when this is set, so a
// recomputed layer does not count twice.
bool is_recomputing();

// A forward for evaluation or generation: no history (as NoGradGuard) and no side effects on
// training state, which must leave the next training step exactly as it would have been.
class EvaluationGuard {
 public:
  EvaluationGuard();
  ~EvaluationGuard();
  EvaluationGuard(const EvaluationGuard&) = delete;
  EvaluationGuard& operator=(const EvaluationGuard&) = delete;

 private:
  NoGradGuard no_grad_;
  bool previous_;
};
bool is_evaluating();

// Whether this forward's side effects on training state (MoE routing counts and balance
// statistics, QK-clip maxima) happen: neither when it is being recomputed (they were counted the
// first time) nor under an EvaluationGuard.
bool records_training_statistics();

}  // namespace loom::autograd
