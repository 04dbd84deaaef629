#include "loom/autograd/node.h"

#include "loom/autograd/grad_mode.h"
#include "loom/kernels/kernel_table.h"

namespace loom::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
}

Node::Node() : sequence_nr(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

namespace {
// Nodes whose last owner is being destroyed, waiting to be released by the outermost ~Node.
thread_local std::vector<std::shared_ptr<Node>>* t_graveyard = nullptr;
}  // namespace

Node::~Node() {
  std::vector<std::shared_ptr<Node>> local;
  const bool outermost = t_graveyard == nullptr;
  if (outermost) t_graveyard = &local;
  for (Edge& e : next_edges)
    if (e.node) t_graveyard->push_back(std::move(e.node));  // released below, not recursively
  next_edges.clear();
  if (!outermost) return;
  while (!local.empty()) {
    std::shared_ptr<Node> n = std::move(local.back());
    local.pop_back();
    n.reset();  // may run ~Node, which appends that node's children to `local`
  }
  t_graveyard = nullptr;
}

AccumulateGrad::AccumulateGrad(Tensor leaf) : leaf_(std::move(leaf)) {
  next_edges.clear();
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grad_outputs) {
  Tensor& incoming = grad_outputs[0];
  if (!incoming.defined()) return {};
  LOOM_CHECK(incoming.shape() == leaf_.shape(), ShapeError, "grad of leaf '", leaf_.name(),
             "' has shape ", incoming.shape().str(), " but the leaf is ", leaf_.shape().str());
  AutogradMeta& meta = leaf_.autograd_meta();
  for (auto& hook : meta.grad_hooks) incoming = hook(incoming);
  // bf16/f16 leaves accumulate into fp32 main grads.
  const DType grad_dtype = (leaf_.dtype() == DType::bf16 || leaf_.dtype() == DType::f16)
                               ? DType::f32 : leaf_.dtype();
  if (!meta.grad.defined()) {
    const bool sole_owner = incoming.impl_shared().use_count() == 1 &&
                            incoming.storage().use_count() == 1 && incoming.offset() == 0 &&
                            incoming.storage()->nbytes() == incoming.nbytes();
    if (incoming.dtype() == grad_dtype && incoming.is_contiguous() && sole_owner) {
      meta.grad = std::move(incoming);  // nobody else sees this buffer: adopt without copying
    } else {
      meta.grad = Tensor::empty(leaf_.shape(), grad_dtype, leaf_.device());
      meta.grad.copy_(incoming);
    }
  } else {
    kernels::for_tensor(meta.grad, "grad accumulation").add_(meta.grad, incoming, 1.0);
  }
  for (auto& hook : meta.post_accumulate_hooks) hook(leaf_);
  return {};
}

bool any_requires_grad(std::initializer_list<const Tensor*> tensors) {
  if (!grad_enabled()) return false;
  for (const Tensor* t : tensors)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  AutogradMeta& meta = t.autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn, meta.output_nr};
  auto acc = meta.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t);
    meta.grad_accumulator = acc;
  }
  return {acc, 0};
}

void connect(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
             const std::vector<Tensor*>& outputs) {
  node->next_edges.clear();
  node->next_edges.reserve(inputs.size());
  for (const Tensor* t : inputs) node->next_edges.push_back(t ? gradient_edge(*t) : Edge{});
  node->num_outputs = static_cast<uint32_t>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!outputs[i] || !outputs[i]->defined()) continue;
    AutogradMeta& meta = outputs[i]->autograd_meta();
    meta.requires_grad = true;
    meta.grad_fn = node;
    meta.output_nr = static_cast<uint32_t>(i);
  }
}

void retain_grad(const Tensor& t) {
  LOOM_CHECK(t.requires_grad(), AutogradError, "retain_grad() on a tensor that does not require grad");
  if (t.is_leaf()) return;  // leaves keep their grad anyway
  AutogradMeta& meta = t.autograd_meta();
  meta.grad_fn->retained.emplace_back(meta.output_nr, t.impl_shared()->autograd);
}

void register_grad_hook(Tensor& leaf, std::function<Tensor(const Tensor&)> fn) {
  LOOM_CHECK(leaf.is_leaf(), AutogradError, "grad hooks are for leaf tensors (parameters)");
  leaf.autograd_meta().grad_hooks.push_back(std::move(fn));
}

void register_post_accumulate_hook(Tensor& leaf, std::function<void(Tensor&)> fn) {
  LOOM_CHECK(leaf.is_leaf(), AutogradError, "post-accumulate hooks are for leaf tensors (parameters)");
  leaf.autograd_meta().post_accumulate_hooks.push_back(std::move(fn));
}

}  // namespace loom::autograd
