#include "loom/optim/qk_clip.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/kernels/kernel_table.h"

namespace loom::optim {

namespace {

// Scales the local rows of `t` that hold global rows [row0, row0 + count) by the fp32 factor.
void scale_global_rows(const QkClipTarget& t, int64_t row0, int64_t count, float factor) {
  for (const RowRun& run : t.rows) {
    const int64_t lo = std::max(row0, run.global_begin);
    const int64_t hi = std::min(row0 + count, run.global_begin + run.length);
    if (hi <= lo) continue;
    Tensor rows = t.master.narrow(0, run.local_begin + (lo - run.global_begin), hi - lo);
    kernels::for_tensor(rows, "QK-clip").scale_(rows, static_cast<double>(factor));
  }
}

// Per head: `first` rows scaled by first_scale[h], then `second` rows by second_scale[h].
void scale_head_rows(const QkClipTarget& t, const std::string& name, int64_t heads, int64_t first,
                     int64_t second, const std::vector<float>& first_scale,
                     const std::vector<float>* second_scale) {
  const Tensor& master = t.master;
  LOOM_CHECK(master.dtype() == DType::f32 && master.dim() == 2 && master.is_contiguous(),
             ShapeError, "QK-clip: '", name, "' must be a contiguous 2-D fp32 master, got ",
             master.shape().str(), " ", dtype_name(master.dtype()));
  LOOM_CHECK(t.global_rows == heads * (first + second), ShapeError, "QK-clip: '", name, "' has ",
             t.global_rows, " rows but ", heads, " heads of ", first, " + ", second,
             " rows were expected; check the MLA head dims given to Muon");
  for (const RowRun& run : t.rows)
    LOOM_CHECK(run.local_begin >= 0 && run.length >= 0 && run.local_begin + run.length <= master.size(0) &&
                   run.global_begin >= 0 && run.global_begin + run.length <= t.global_rows,
               ShapeError, "QK-clip: '", name, "': local rows [", run.local_begin, ", ",
               run.local_begin + run.length, ") as global rows [", run.global_begin, ", ",
               run.global_begin + run.length, ") do not fit a ", master.size(0), "-row shard of ",
               t.global_rows, " rows");
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t base = h * (first + second);
    if (first_scale[h] != 1.f) scale_global_rows(t, base, first, first_scale[h]);
    if (second_scale && (*second_scale)[h] != 1.f)
      scale_global_rows(t, base + first, second, (*second_scale)[h]);
  }
}

}  // namespace

QkClipTarget::QkClipTarget(Tensor whole) : master(std::move(whole)) {
  if (master.defined() && master.dim() >= 1) {
    global_rows = master.size(0);
    rows.push_back({0, 0, global_rows});
  }
}

QkClipResult apply_qk_clip(const std::vector<QkClipLayer>& layers, float threshold,
                           const MlaDims& dims,
                           const std::function<QkClipTarget(const std::string&)>& target_of) {
  LOOM_CHECK(threshold > 0.f, ValueError, "QK-clip: threshold must be > 0, got ", threshold);
  QkClipResult result;
  bool any = false;
  for (const auto& layer : layers)
    for (float s : layer.max_logits) {
      result.max_logit = any ? std::max(result.max_logit, s) : s;
      any = true;
    }
  result.fired = any && result.max_logit >= threshold;
  if (!result.fired) return result;

  for (const auto& layer : layers) {
    const int64_t heads = static_cast<int64_t>(layer.max_logits.size());
    LOOM_CHECK(heads == dims.num_heads, ShapeError, "QK-clip: layer of '", layer.q_up_name,
               "' reports ", heads, " per-head max logits but the model has ", dims.num_heads,
               " heads");
    std::vector<float> gamma(heads, 1.f), sqrt_gamma(heads, 1.f);
    int64_t clipped = 0;
    for (int64_t h = 0; h < heads; ++h) {
      const float s = layer.max_logits[h];
      if (s >= threshold) {
        gamma[h] = threshold / s;
        sqrt_gamma[h] = std::sqrt(gamma[h]);
        ++clipped;
      }
    }
    if (clipped == 0) continue;
    result.heads_clipped += clipped;
    if (QkClipTarget q = target_of(layer.q_up_name); q.master.defined()) {
      scale_head_rows(q, layer.q_up_name, heads, dims.qk_nope_head_dim, dims.qk_rope_head_dim,
                      sqrt_gamma, &gamma);
      result.scaled.push_back(layer.q_up_name);
    }
    if (!layer.kv_up_name.empty())
      if (QkClipTarget kv = target_of(layer.kv_up_name); kv.master.defined()) {
        scale_head_rows(kv, layer.kv_up_name, heads, dims.qk_nope_head_dim, dims.v_head_dim,
                        sqrt_gamma, nullptr);
        result.scaled.push_back(layer.kv_up_name);
      }
  }
  return result;
}

}  // namespace loom::optim
