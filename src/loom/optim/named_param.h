// The unit every optimizer works on: a model parameter under its dotted module path
// (the model's named_parameters()). Its gradient is param.grad() — fp32 "main grad" for
// bf16/f16 parameters; an undefined grad means the parameter got none this step and is skipped.
#pragma once

#include <string>
#include <vector>

#include "loom/core/tensor.h"

namespace loom::optim {

struct NamedParam {
  std::string name;
  Tensor param;
};

using NamedParams = std::vector<NamedParam>;

}  // namespace loom::optim
