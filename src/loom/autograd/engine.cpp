#include "loom/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "loom/autograd/grad_mode.h"
#include "loom/autograd/node.h"
#include "loom/core/trace.h"
#include "loom/kernels/kernel_table.h"

namespace loom::autograd {

namespace {

struct NodeLater {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr < b->sequence_nr; }
};

// Sum `g` into slot (non-owning accumulation: a fresh tensor, never in place on a shared grad).
void accumulate(Tensor& slot, Tensor&& g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = std::move(g);
    return;
  }
  const bool owned = slot.impl_shared().use_count() == 1 && slot.storage().use_count() == 1 &&
                     slot.is_contiguous();
  if (!owned) slot = slot.clone();  // someone else sees this buffer: never add into it
  kernels::for_tensor(slot, "grad accumulation").add_(slot, g, 1.0);
}

Tensor default_root_grad(const Tensor& root) {
  LOOM_CHECK(root.numel() == 1, AutogradError, "backward on a non-scalar tensor of shape ",
             root.shape().str(), " needs an explicit gradient of the same shape");
  return Tensor::ones(root.shape(), root.dtype(), root.device());
}

// Runs the graph. When `capture` is given, grads arriving at those edges are stored there instead
// of flowing on (used by grad()); leaves' AccumulateGrad nodes are then not executed.
void run_engine(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
                bool retain_graph, std::unordered_map<const Node*, std::vector<Tensor>>* capture) {
  LOOM_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), AutogradError,
             "backward: ", roots.size(), " roots but ", grad_roots.size(), " root grads");
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> keep_alive;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    LOOM_CHECK(r.requires_grad(), AutogradError,
               "backward: root ", i, " does not require grad (no parameter or input that requires "
               "grad contributed to it, or it was computed under NoGradGuard)");
    Tensor g = grad_roots.empty() ? default_root_grad(r) : grad_roots[i];
    LOOM_CHECK(g.shape() == r.shape(), ShapeError, "backward: root grad shape ", g.shape().str(),
               " differs from root shape ", r.shape().str());
    Edge e = gradient_edge(r);
    keep_alive.push_back(e.node);
    auto& buf = buffers[e.node.get()];
    buf.resize(e.node->num_outputs);
    accumulate(buf[e.input_nr], std::move(g));
  }

  // Dependency counts over the reachable graph (iterative DFS).
  std::unordered_map<Node*, int> deps;
  {
    std::unordered_set<Node*> seen;
    std::vector<Node*> stack;
    for (auto& n : keep_alive)
      if (seen.insert(n.get()).second) stack.push_back(n.get());
    while (!stack.empty()) {
      Node* n = stack.back();
      stack.pop_back();
      for (const Edge& e : n->next_edges) {
        if (!e.node) continue;
        ++deps[e.node.get()];
        if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
      }
    }
  }

  std::priority_queue<Node*, std::vector<Node*>, NodeLater> ready;
  {
    std::unordered_set<Node*> queued;
    for (auto& n : keep_alive)
      if (deps[n.get()] == 0 && queued.insert(n.get()).second) ready.push(n.get());
  }

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> inputs = std::move(buffers[node]);
    buffers.erase(node);
    inputs.resize(node->num_outputs);
    for (auto& [idx, weak_meta] : node->retained)
      if (auto meta = weak_meta.lock(); meta && idx < inputs.size() && inputs[idx].defined())
        meta->grad = inputs[idx].clone();
    if (capture) {
      // grad(): record what arrives at the requested tensors; never touch any leaf's .grad().
      auto it = capture->find(node);
      if (it != capture->end()) it->second = inputs;
      if (dynamic_cast<AccumulateGrad*>(node)) continue;
    }
    std::vector<Tensor> outputs;
    {
      LOOM_TRACE("backward", node->name());
      outputs = node->apply(std::move(inputs));
    }
    if (!retain_graph) node->release_saved();
    LOOM_ASSERT(outputs.size() == node->next_edges.size() || outputs.empty(),
                "node ", node->name(), " returned ", outputs.size(), " grads for ",
                node->next_edges.size(), " inputs");
    for (size_t i = 0; i < outputs.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.node) continue;
      auto& buf = buffers[e.node.get()];
      if (buf.empty()) buf.resize(e.node->num_outputs);
      accumulate(buf[e.input_nr], std::move(outputs[i]));
      if (--deps[e.node.get()] == 0) ready.push(e.node.get());
    }
  }
}

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots,
              bool retain_graph) {
  // Backward formulas use differentiable-free kernels; make sure nothing records history.
  NoGradGuard no_grad;
  run_engine(roots, grad_roots, retain_graph, nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_roots, bool retain_graph) {
  NoGradGuard no_grad;
  std::unordered_map<const Node*, std::vector<Tensor>> capture;
  std::vector<Edge> edges;
  for (const Tensor& t : inputs) {
    LOOM_CHECK(t.requires_grad(), AutogradError, "grad(): an input does not require grad");
    Edge e = gradient_edge(t);
    edges.push_back(e);
    capture[e.node.get()];
  }
  run_engine(roots, grad_roots, retain_graph, &capture);
  std::vector<Tensor> result;
  for (const Edge& e : edges) {
    auto& got = capture[e.node.get()];
    result.push_back(e.input_nr < got.size() ? got[e.input_nr] : Tensor());
  }
  return result;
}

}  // namespace loom::autograd
