// Translates the recompute / recompute_comm / swap sections into the memory layer's options
// (layer specs resolved against the model's depth, MTP layers included).
#pragma once

#include "loom/config/sections.h"
#include "loom/memory/policy.h"

namespace loom::train {

memory::RecomputeOptions recompute_options(const config::RecomputeConfig& recompute,
                                           const config::RecomputeCommConfig& comm, int64_t total_layers);
memory::SwapOptions swap_options(const config::SwapConfig& swap, int64_t total_layers);

}  // namespace loom::train
