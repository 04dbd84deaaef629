// The backward engine: walks the graph from the roots with dependency counts, iteratively (no
// recursion, so a 100,000-op chain is fine), running ready nodes newest-first.
#pragma once

#include <vector>

#include "loom/core/tensor.h"

namespace loom::autograd {

// Accumulates d(roots)/d(leaf) into every reachable leaf's .grad(). grad_roots may be empty for
// scalar roots (grad 1). Saved tensors are freed afterwards unless retain_graph.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {},
              bool retain_graph = false);
inline void backward(const Tensor& root, const Tensor& grad_root = Tensor(), bool retain_graph = false) {
  backward(std::vector<Tensor>{root}, grad_root.defined() ? std::vector<Tensor>{grad_root}
                                                          : std::vector<Tensor>{},
           retain_graph);
}

// Returns d(roots)/d(inputs) without touching any .grad() (inputs may be non-leaf tensors).
// An input the roots do not depend on gets an undefined tensor.
std::vector<Tensor> grad(const std::vector<Tensor>& roots, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_roots = {}, bool retain_graph = false);

}  // namespace loom::autograd
