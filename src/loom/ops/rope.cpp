#include "loom/ops/rope.h"

#include "loom/core/trace.h"
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "loom/autograd/function.h"
#include "loom/kernels/kernel_table.h"

namespace loom::ops {

using autograd::BackwardContext;
using autograd::record;
using Grads = std::vector<Tensor>;

namespace {

// HF `_compute_yarn_parameters`: blends interpolated (inv_freq / factor) and extrapolated
// frequencies with a linear ramp between the correction dims of beta_fast and beta_slow.
void apply_yarn(std::vector<double>& inv_freq, int64_t dim, double theta, const RopeScaling& sc) {
  const double l0 = static_cast<double>(sc.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(l0 / (rotations * 2 * std::numbers::pi)) / (2 * std::log(theta));
  };
  double low = correction_dim(sc.beta_fast), high = correction_dim(sc.beta_slow);
  if (sc.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // avoid a division by zero in the ramp
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    inv_freq[i] = inv_freq[i] / sc.factor * (1.0 - extrapolation_weight) + inv_freq[i] * extrapolation_weight;
  }
}

double yarn_attention_factor(const RopeScaling& sc) {
  if (sc.attention_factor) return *sc.attention_factor;
  if (sc.mscale != 0.0 && sc.mscale_all_dim != 0.0)
    return yarn_get_mscale(sc.factor, sc.mscale) / yarn_get_mscale(sc.factor, sc.mscale_all_dim);
  return yarn_get_mscale(sc.factor);
}

}  // namespace

double yarn_get_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

double yarn_softmax_scale_factor(const RopeScaling& sc) {
  if (sc.kind != RopeScaling::Kind::yarn || sc.mscale_all_dim == 0.0) return 1.0;
  const double m = yarn_get_mscale(sc.factor, sc.mscale_all_dim);
  return m * m;
}

RopeTable make_rope_table(int64_t rotary_dim, int64_t max_positions, double theta,
                          const RopeScaling& sc, DType dtype) {
  LOOM_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, ValueError, "rope: rotary_dim = ", rotary_dim,
             " must be a positive even number (head_dim · partial_rotary_factor, or qk_rope_head_dim)");
  LOOM_CHECK(max_positions > 0, ValueError, "rope: max_positions = ", max_positions,
             " must be positive (the longest sequence the table serves)");
  LOOM_CHECK(theta > 1.0, ValueError, "rope: rope_theta = ", theta, " must be greater than 1");
  LOOM_CHECK(dtype == DType::f32 || dtype == DType::f64, DTypeError, "rope: table dtype ",
             dtype_name(dtype), " is not supported; use float32 or float64");
  if (sc.kind != RopeScaling::Kind::none)
    LOOM_CHECK(sc.factor > 0.0, ValueError, "rope: rope_scaling.factor = ", sc.factor, " must be positive");
  if (sc.kind == RopeScaling::Kind::yarn) {
    LOOM_CHECK(sc.original_max_position_embeddings > 0, ValueError,
               "rope: rope_scaling.original_max_position_embeddings = ",
               sc.original_max_position_embeddings, " must be positive for YaRN");
    LOOM_CHECK(sc.beta_fast > 0.0 && sc.beta_slow > 0.0, ValueError,
               "rope: rope_scaling.beta_fast = ", sc.beta_fast, " and beta_slow = ", sc.beta_slow,
               " must both be positive");
  }
  const int64_t half = rotary_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
  double attention_factor = 1.0;
  if (sc.kind == RopeScaling::Kind::linear) {
    for (double& f : inv_freq) f /= sc.factor;
  } else if (sc.kind == RopeScaling::Kind::yarn) {
    apply_yarn(inv_freq, rotary_dim, theta, sc);
    attention_factor = yarn_attention_factor(sc);
  }
  RopeTable table;
  table.rotary_dim = rotary_dim;
  table.max_positions = max_positions;
  table.attention_factor = attention_factor;
  table.inv_freq = Tensor::from_vector(inv_freq, {half}, DType::f64);
  Tensor cos = Tensor::empty({max_positions, half}, DType::f64);
  Tensor sin = Tensor::empty({max_positions, half}, DType::f64);
  double* pc = cos.data<double>();
  double* ps = sin.data<double>();
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[i];
      pc[p * half + i] = std::cos(angle) * attention_factor;
      ps[p * half + i] = std::sin(angle) * attention_factor;
    }
  }
  table.cos = cos.to(dtype);
  table.sin = sin.to(dtype);
  return table;
}

Tensor rope(const Tensor& x, const RopeTable& table, const Tensor& position_ids, bool interleaved) {
  LOOM_TRACE("op", "rope");
  LOOM_CHECK(table.cos.defined(), ValueError, "rope: the table is empty; build it with make_rope_table");
  LOOM_CHECK(x.dim() == 4, ShapeError, "rope: x must be [batch, seq, heads, head_dim], got ",
             x.shape().str());
  Tensor positions = position_ids.defined() ? position_ids : Tensor::arange(x.shape()[1], DType::i64);
  Tensor out = kernels::for_tensor(x, "rope").rope(x, table.cos, table.sin, positions, interleaved,
                                                   /*inverse=*/false);
  record("rope", {&x}, {&out}, {table.cos, table.sin, positions},
         [interleaved](const Grads& g, const BackwardContext& ctx) -> Grads {
           return {kernels::for_tensor(g[0], "rope")
                       .rope(g[0], ctx.saved(0), ctx.saved(1), ctx.saved(2), interleaved, /*inverse=*/true)};
         });
  return out;
}

}  // namespace loom::ops
