// Gradient injection for auxiliary losses (Megatron's MoEAuxLossAutoScaler / MTPLossAutoScaler):
// the MoE balance losses and the MTP loss train the model without being added to the logged LM
// loss. attach_auxiliary_loss(x, aux, scale) returns x unchanged; when backward reaches it, aux
// receives the gradient `scale` (dL_total/daux) besides x's own gradient.
#pragma once

#include "loom/core/tensor.h"

namespace loom::nn {

// aux: a scalar tensor with history (undefined or without history: x is returned as is).
Tensor attach_auxiliary_loss(const Tensor& x, const Tensor& aux, double scale);

}  // namespace loom::nn
