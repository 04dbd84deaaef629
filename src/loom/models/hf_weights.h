// Weight names and layouts between Loom (docs/models.md naming) and HF transformers (their
// modeling_llama, modeling_qwen3(_moe) and modeling_deepseek_v3 names): q/k/v/o projections,
// qk-norms, MLA projections, gate|up fused into linear_fc1, per-expert HF matrices stacked and
// transposed into experts.weight1/weight2, the router and its correction bias, DeepSeek-V3 MTP
// layers stored as model.layers.{L+k}.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/models/model_args.h"

namespace loom::models {

struct WeightRule {
  enum class Kind {
    copy,             // one HF tensor, same layout
    concat_rows,      // Loom = [hf[0]; hf[1]] along dim 0 (gate rows then up rows)
    experts_gate_up,  // Loom [E, D, 2F], hf = E gate [F, D] then E up [F, D]
    experts_down,     // Loom [E, F, D], hf = E down [D, F]
  };
  Kind kind = Kind::copy;
  std::string loom;
  std::vector<std::string> hf;
};

// Every Loom weight of the model described by `args`, with its HF source(s), in model order.
std::vector<WeightRule> weight_rules(const ModelArgs& args);

// Loom state dict → HF tensors (HF names and layouts), in rule order. CheckpointError naming
// `source` when a weight is missing or unexpected.
std::vector<std::pair<std::string, Tensor>> to_hf_weights(const ModelArgs& args,
                                                          const std::map<std::string, Tensor>& loom,
                                                          const std::string& source = "state dict");
// HF tensors → Loom state dict. Tensors HF stores redundantly (the MTP layers' copies of the
// embedding and head, rotary inv_freq buffers, a tied lm_head, an all-zero correction bias the
// config does not use) are skipped; anything else left over or missing is one CheckpointError
// listing every problem.
std::map<std::string, Tensor> from_hf_weights(const ModelArgs& args, const std::map<std::string, Tensor>& hf,
                                              const std::string& source);

}  // namespace loom::models
