// Non-finite training state is never kept: a parameter or optimizer moment holding inf or nan
// turns every later step into nan, and a checkpoint of it would poison every resume. The
// optimizer never writes such an update (optim/optimizer.h: it decides before writing, with the
// verdict agreed over the world by agreed_non_finite, so every rank skips the same step); the
// trainer checks the state before each save and after each load, again agreed over the world.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/process_group.h"

namespace loom::train {

// The name of the first tensor holding inf or nan; "" when every one is finite.
std::string first_non_finite(const std::vector<std::pair<std::string, Tensor>>& tensors);
std::string first_non_finite(const std::map<std::string, Tensor>& tensors);

// This rank's verdict (`local`: the first non-finite tensor here or "") agreed over `world`:
// "" when every rank is finite, else a description naming a tensor and the rank holding it.
std::string agreed_non_finite(const std::string& local, dist::ProcessGroup& world);

}  // namespace loom::train
