// Rotary position embeddings (RoFormer; DeepSeek-V3's YaRN + interleaved pairs, HF Qwen3's
// rotate-half): a table builder with none / linear / YaRN frequency scaling, and the
// differentiable rope op. The backward of a rotation by θ is the rotation by −θ.
#pragma once

#include <cstdint>
#include <optional>

#include "loom/core/tensor.h"

namespace loom::ops {

// HF `rope_scaling`. Zero means "absent" for mscale and mscale_all_dim, as in HF's truthiness
// tests; original_max_position_embeddings must be given for YaRN.
struct RopeScaling {
  enum class Kind { none, linear, yarn };
  Kind kind = Kind::none;
  double factor = 1.0;
  int64_t original_max_position_embeddings = 0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  std::optional<double> attention_factor;  // HF `attention_factor`; overrides the mscale ratio
  bool truncate = true;                    // floor/ceil the correction range (HF default)
};

struct RopeTable {
  Tensor cos;  // [max_positions, rotary_dim / 2], attention_factor folded in
  Tensor sin;
  Tensor inv_freq;  // [rotary_dim / 2] float64, after scaling
  int64_t rotary_dim = 0;
  int64_t max_positions = 0;
  double attention_factor = 1.0;  // YaRN cos/sin scale (1 otherwise)
};

// inv_freq_i = theta^(−2i/rotary_dim), scaled per `scaling`; cos/sin of position·inv_freq for
// positions [0, max_positions), computed in float64 and stored in `dtype` (float32 by default;
// float64 for exact tests). Throws ValueError naming the bad field.
RopeTable make_rope_table(int64_t rotary_dim, int64_t max_positions, double theta,
                          const RopeScaling& scaling = {}, DType dtype = DType::f32);

// YaRN's mscale: 0.1·mscale·ln(scale) + 1 for scale > 1, else 1.
double yarn_get_mscale(double scale, double mscale = 1.0);
// The factor MLA multiplies its softmax scale by: m² with m = yarn_get_mscale(factor,
// mscale_all_dim) when YaRN is on and mscale_all_dim is set, else 1 (HF DeepseekV3Attention).
double yarn_softmax_scale_factor(const RopeScaling& scaling);

// x [B, S, H, D] (any strides); position_ids int32/int64 [B, S] or [S], default 0..S-1. The first
// table.rotary_dim dims rotate (partial rotary when that is < D), the rest pass through.
// interleaved: pairs (2i, 2i+1) (DeepSeek reference); otherwise rotate-half pairs (i, i + R/2)
// (Llama/Qwen). bf16/f16 compute in fp32 and round once; f64 stays f64.
Tensor rope(const Tensor& x, const RopeTable& table, const Tensor& position_ids = Tensor(),
            bool interleaved = false);

}  // namespace loom::ops
