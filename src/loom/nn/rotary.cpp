#include "loom/nn/rotary.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "loom/ops/elementwise.h"

namespace loom::nn {

ops::RopeTable make_llama3_rope_table(int64_t rotary_dim, int64_t max_positions, double theta,
                                      const Llama3RopeScaling& sc, DType dtype) {
  // Start from the unscaled table for validation and the layout, then replace the frequencies.
  ops::RopeTable t = ops::make_rope_table(rotary_dim, 1, theta, {}, DType::f64);
  const int64_t half = rotary_dim / 2;
  const double low_wavelen = sc.original_max_position_embeddings / sc.low_freq_factor;
  const double high_wavelen = sc.original_max_position_embeddings / sc.high_freq_factor;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    const double f = 1.0 / std::pow(theta, static_cast<double>(2 * i) / rotary_dim);
    const double wavelen = 2 * std::numbers::pi / f;
    if (wavelen > low_wavelen) {
      inv[i] = f / sc.factor;
    } else if (wavelen < high_wavelen) {
      inv[i] = f;
    } else {
      const double smooth = (sc.original_max_position_embeddings / wavelen - sc.low_freq_factor) /
                            (sc.high_freq_factor - sc.low_freq_factor);
      inv[i] = (1 - smooth) * f / sc.factor + smooth * f;
    }
  }
  Tensor cos = Tensor::empty({max_positions, half}, DType::f64);
  Tensor sin = Tensor::empty({max_positions, half}, DType::f64);
  double* pc = cos.data<double>();
  double* ps = sin.data<double>();
  for (int64_t p = 0; p < max_positions; ++p)
    for (int64_t i = 0; i < half; ++i) {
      pc[p * half + i] = std::cos(static_cast<double>(p) * inv[i]);
      ps[p * half + i] = std::sin(static_cast<double>(p) * inv[i]);
    }
  t.inv_freq = Tensor::from_vector(inv, {half}, DType::f64);
  t.cos = cos.to(dtype);
  t.sin = sin.to(dtype);
  t.max_positions = max_positions;
  return t;
}

RotaryEmbedding::RotaryEmbedding(const TransformerConfig& config, int64_t rotary_dim)
    : config_(config), rotary_dim_(rotary_dim) {}

const ops::RopeTable& RotaryEmbedding::table(int64_t positions, DType dtype) {
  if (!table_.cos.defined() || table_.max_positions < positions || table_.cos.dtype() != dtype) {
    const int64_t n = std::max(positions, config_.rope_table_positions());
    table_ = config_.llama3_rope.enabled
                 ? make_llama3_rope_table(rotary_dim_, n, config_.rope_theta, config_.llama3_rope, dtype)
                 : ops::make_rope_table(rotary_dim_, n, config_.rope_theta, config_.rope_scaling, dtype);
  }
  return table_;
}

Tensor RotaryEmbedding::apply(const Tensor& x, const Tensor& position_ids, bool interleaved) {
  int64_t needed = x.size(1);
  if (position_ids.defined() && position_ids.numel() > 0) {
    std::vector<int64_t> pos = position_ids.to_int_vector();
    const auto [lo, hi] = std::minmax_element(pos.begin(), pos.end());
    LOOM_CHECK(*lo >= 0, ValueError, "rope: position_ids must be non-negative, got ", *lo);
    needed = std::max(needed, *hi + 1);
  }
  // The table is fp64 for fp64 runs (exact tests), else fp32: rotary_dtype float32 (the default)
  // is what the kernel computes in for every lower precision anyway.
  const DType table_dtype = x.dtype() == DType::f64 || config_.rotary_dtype == DType::f64 ? DType::f64 : DType::f32;
  const ops::RopeTable& t = table(needed, table_dtype);
  const DType rot = x.dtype() == DType::f64 ? DType::f64 : config_.rotary_dtype;
  // A rotary dtype narrower than the activations: round the inputs as the reference's cast would.
  if (rot != x.dtype() && dtype_size(rot) < dtype_size(x.dtype()))
    return ops::cast(ops::rope(ops::cast(x, rot), t, position_ids, interleaved), x.dtype());
  return ops::rope(x, t, position_ids, interleaved);
}

}  // namespace loom::nn
