// The `model:` section has one reader, models::ModelArgs (what the model is built from). The
// configuration layer reads the section through it once, while resolving (read_model_section in
// checks.h), and only adds what a file needs: the position of each problem and did-you-mean hints.
#pragma once

#include "loom/config/sections.h"

namespace loom::config {

// The section as models::ModelArgs and checkpoints see it: model_type and architectures, then
// the other keys in file order.
Json model_section_json(const ModelConfig& model);

}  // namespace loom::config
