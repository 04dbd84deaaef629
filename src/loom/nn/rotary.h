// Rotary position embedding shared by a model's attention layers: one cos/sin table (rope_theta,
// rope_scaling: linear, YaRN, or HF "llama3" bands), grown on demand when a batch reaches past
// it, applied rotate-half (Llama/Qwen) or interleaved (DeepSeek-V3's inference/model.py).
#pragma once

#include <memory>

#include "loom/nn/transformer_config.h"
#include "loom/ops/rope.h"

namespace loom::nn {

class RotaryEmbedding {
 public:
  // rotary_dim: head_dim (Llama/Qwen) or qk_rope_head_dim (MLA).
  RotaryEmbedding(const TransformerConfig& config, int64_t rotary_dim);

  // x [B, S, H, D]; position_ids [B, S], [S] or undefined (0..S-1). Rotates the first
  // rotary_dim dims in rotary_dtype (bf16 activations compute in fp32 and round once).
  Tensor apply(const Tensor& x, const Tensor& position_ids, bool interleaved);
  const ops::RopeTable& table(int64_t positions, DType dtype);
  int64_t rotary_dim() const { return rotary_dim_; }

 private:
  TransformerConfig config_;
  int64_t rotary_dim_;
  ops::RopeTable table_;
};

// HF `_compute_llama3_parameters` applied to plain inv_freq, as a complete table.
ops::RopeTable make_llama3_rope_table(int64_t rotary_dim, int64_t max_positions, double theta,
                                      const Llama3RopeScaling& scaling, DType dtype);

}  // namespace loom::nn
