// How a training forward should run, chosen by its caller (the schedule) because only the caller
// knows what happens next.
#pragma once

namespace loom::nn {

struct ForwardOptions {
  // Form the LM head's (and the MTP heads') loss gradients during the forward pass and keep
  // them until backward (ops::linear_cross_entropy grads_in_forward): 3 GEMMs instead of 4, at
  // the same peak memory, when backward follows right away (a plain micro-batch loop). Off, the
  // forward keeps only the per-token log-sum-exp and backward recomputes the logits: the choice
  // when no backward follows (evaluation), or when other forwards run before this one's
  // backward, so held grads of [vocab, hidden] per micro-batch in flight would add up.
  bool head_grads_in_forward = false;
  // Return the main head's logits instead of the losses (a pipeline's last stage in evaluation
  // and generation; the whole model has CausalLM::logits).
  bool logits = false;
};

}  // namespace loom::nn
