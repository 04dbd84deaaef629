// Communication recompute: outputs of the selected operations (e.g. the all_gather a tensor-
// parallel strategy inserts) are not kept when a later op saves them for backward; the saved
// handle remembers how to regenerate them (the operation and its inputs) and re-runs the
// operation when backward needs the tensor. Everything else saved in the layer goes to whatever
// hooks were active outside (or is kept as usual).
#pragma once

#include <memory>
#include <string>

#include "loom/nn/module.h"

namespace loom::memory {

class CommRecomputeRegistry;

// Installs the mechanism on one layer: wraps each operation in `operations` (paths relative to
// the layer, "self_attention.linear_q.all_gather") and the layer's forward.
void apply_comm_recompute(nn::Module& layer, const std::vector<std::string>& operations);

}  // namespace loom::memory
