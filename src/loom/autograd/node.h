// A node of the backward graph: the backward of one forward op. apply() takes the grads of the
// op's outputs and returns the grads of its inputs, one per next edge. Nodes are created by ops
// (loom/ops) with hand-written backward formulas; leaves get an AccumulateGrad node.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/autograd/saved_tensor.h"
#include "loom/core/tensor.h"

namespace loom::autograd {

class Node;

// Where an input's grad goes: output `input_nr` of the node that produced that input.
struct Edge {
  std::shared_ptr<Node> node;  // null when the input does not need a grad
  uint32_t input_nr = 0;
  bool valid() const { return node != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  // Releases the graph behind this node iteratively: a 100,000-node chain would otherwise be
  // freed by 100,000 nested destructor calls and overflow the stack.
  virtual ~Node();

  // grad_outputs[i] is the grad of forward output i (undefined = zero grad). Returns one tensor
  // per next edge (undefined where no grad flows).
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  // Frees saved tensors once backward has run (unless the graph is retained).
  virtual void release_saved() {}

  std::vector<Edge> next_edges;
  uint32_t num_outputs = 1;
  // Creation order: among ready nodes the newest runs first, so backward follows the reverse of
  // forward (which frees activations early and keeps per-layer grad hooks in layer order).
  uint64_t sequence_nr;
  // Output indices whose grad should be kept on the tensor (retain_grad on a non-leaf).
  std::vector<std::pair<uint32_t, std::weak_ptr<AutogradMeta>>> retained;
};

// The grad sink of a leaf tensor that requires grad. Grads of bf16/f16 leaves accumulate in fp32
// (main grads). After accumulation the leaf's post-accumulate hooks run.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(Tensor leaf);
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  const Tensor& leaf() const { return leaf_; }

 private:
  Tensor leaf_;
};

// True when grad mode is on and any of the tensors requires grad.
bool any_requires_grad(std::initializer_list<const Tensor*> tensors);
inline bool needs_grad(const Tensor& a) { return any_requires_grad({&a}); }
inline bool needs_grad(const Tensor& a, const Tensor& b) { return any_requires_grad({&a, &b}); }
inline bool needs_grad(const Tensor& a, const Tensor& b, const Tensor& c) {
  return any_requires_grad({&a, &b, &c});
}

// The edge a grad for `t` should flow into (its grad_fn, or its leaf accumulator, or none).
Edge gradient_edge(const Tensor& t);

// Wires a freshly created node: next_edges from `inputs` (undefined or non-grad inputs give
// empty edges) and marks each output as produced by `node` (output i = outputs[i]).
void connect(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
             const std::vector<Tensor*>& outputs);

// Keep the grad of a non-leaf tensor after backward (readable with t.grad()).
void retain_grad(const Tensor& t);

// Registers fn to transform every grad contribution of `leaf` before it accumulates (in
// registration order); it returns the grad to accumulate.
void register_grad_hook(Tensor& leaf, std::function<Tensor(const Tensor&)> fn);

// Registers fn to run after `leaf`'s grad has been accumulated.
void register_post_accumulate_hook(Tensor& leaf, std::function<void(Tensor&)> fn);

}  // namespace loom::autograd
