// The one way ops record history: record(op, inputs, outputs, saved, backward). `backward` gets
// the grads of the outputs and a context holding the saved tensors (through SavedTensor, so the
// checkpoint and swap hooks see them) and returns one grad per input (undefined = none).
// Backward lambdas must capture only plain values, never Tensors: tensors go through `saved`.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "loom/autograd/node.h"

namespace loom::autograd {

class FunctionNode;

class BackwardContext {
 public:
  explicit BackwardContext(const FunctionNode& node) : node_(node) {}
  // The i-th saved tensor (recomputed or fetched back from the host if hooks dropped it).
  Tensor saved(size_t i) const;
  // Whether input i needs a grad (skip computing the others).
  bool needs_input_grad(size_t i) const;

 private:
  const FunctionNode& node_;
};

using BackwardFn =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs, const BackwardContext& ctx)>;

class FunctionNode : public Node {
 public:
  FunctionNode(const char* op, BackwardFn fn) : op_(op), fn_(std::move(fn)) {}
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  std::string name() const override { return op_; }
  void release_saved() override;

  std::vector<SavedTensor> saved;
  // Shapes/dtypes/devices of the forward outputs, to give zero grads to outputs nobody used.
  std::vector<Shape> output_shapes;
  std::vector<DType> output_dtypes;
  std::vector<Device> output_devices;

 private:
  const char* op_;
  BackwardFn fn_;
};

// Records the op when grad mode is on and some input requires grad; otherwise does nothing.
// Returns true when history was recorded.
bool record(const char* op, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<Tensor*> outputs, std::initializer_list<Tensor> saved,
            BackwardFn backward);
bool record(const char* op, const std::vector<const Tensor*>& inputs,
            const std::vector<Tensor*>& outputs, const std::vector<Tensor>& saved,
            BackwardFn backward);

}  // namespace loom::autograd
