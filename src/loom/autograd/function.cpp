#include "loom/autograd/function.h"

#include "loom/autograd/grad_mode.h"

namespace loom::autograd {

Tensor BackwardContext::saved(size_t i) const {
  LOOM_ASSERT(i < node_.saved.size(), "saved tensor index ", i, " of op ", node_.name());
  return node_.saved[i].unpack();
}

bool BackwardContext::needs_input_grad(size_t i) const {
  return i < node_.next_edges.size() && node_.next_edges[i].valid();
}

std::vector<Tensor> FunctionNode::apply(std::vector<Tensor>&& grad_outputs) {
  // No grad reached any output: nothing flows on.
  bool any = false;
  for (const Tensor& g : grad_outputs) any = any || g.defined();
  if (!any) return std::vector<Tensor>(next_edges.size());
  // Outputs nobody used get explicit zeros, so formulas can assume every grad is defined.
  for (size_t i = 0; i < grad_outputs.size() && i < output_shapes.size(); ++i)
    if (!grad_outputs[i].defined())
      grad_outputs[i] = Tensor::zeros(output_shapes[i], output_dtypes[i], output_devices[i]);
  std::vector<Tensor> grads = fn_(grad_outputs, BackwardContext(*this));
  grads.resize(next_edges.size());
  return grads;
}

void FunctionNode::release_saved() {
  for (auto& s : saved) s.reset();
}

bool record(const char* op, const std::vector<const Tensor*>& inputs,
            const std::vector<Tensor*>& outputs, const std::vector<Tensor>& saved,
            BackwardFn backward) {
  if (!grad_enabled()) return false;
  bool any = false;
  for (const Tensor* t : inputs) any = any || (t && t->defined() && t->requires_grad());
  if (!any) return false;
  auto node = std::make_shared<FunctionNode>(op, std::move(backward));
  node->saved.reserve(saved.size());
  for (const Tensor& t : saved) node->saved.emplace_back(t, op);
  for (const Tensor* t : outputs) {
    node->output_shapes.push_back(t && t->defined() ? t->shape() : Shape{});
    node->output_dtypes.push_back(t && t->defined() ? t->dtype() : DType::f32);
    node->output_devices.push_back(t && t->defined() ? t->device() : Device::cpu());
  }
  connect(node, inputs, outputs);
  return true;
}

bool record(const char* op, std::initializer_list<const Tensor*> inputs,
            std::initializer_list<Tensor*> outputs, std::initializer_list<Tensor> saved,
            BackwardFn backward) {
  return record(op, std::vector<const Tensor*>(inputs), std::vector<Tensor*>(outputs),
                std::vector<Tensor>(saved), std::move(backward));
}

}  // namespace loom::autograd
