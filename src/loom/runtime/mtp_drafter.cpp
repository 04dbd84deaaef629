#include "loom/runtime/mtp_drafter.h"

#include <algorithm>

#include "loom/core/error.h"
#include "loom/ops/shape.h"
#include "loom/runtime/sampling.h"

namespace loom::runtime {

MtpDrafter::MtpDrafter(nn::CausalLM& model, int64_t capacity, const std::vector<int64_t>& pad)
    : model_(model), layers_(model.mtp_layers()), cache_(capacity, pad) {
  LOOM_CHECK(!layers_.empty(), ValueError, "MtpDrafter: the model has no MTP layers (model.mtp_num_layers / "
             "num_nextn_predict_layers is 0), so it cannot draft tokens");
}

std::vector<std::vector<int64_t>> MtpDrafter::draft(const Tensor& committed,
                                                    const std::vector<std::vector<int64_t>>& tokens) {
  const int64_t B = static_cast<int64_t>(tokens.size()), N = static_cast<int64_t>(tokens.front().size());
  const int64_t D = depth();
  LOOM_ASSERT(B == cache_.batch() && committed.dim() == 3 && committed.size(0) == B);
  hidden_ = hidden_.defined() ? ops::cat({hidden_, committed}, 1) : committed;
  LOOM_ASSERT(hidden_start_ + hidden_.size(1) == N - 1);

  // States that read only tokens up to t_{N-2} stand (those were committed, or drafts the main
  // model accepted); later ones read a draft or the token that replaced one: rebuilt.
  const int64_t start = std::max<int64_t>(0, std::min(cache_.length(), N - 1 - D));
  LOOM_ASSERT(start >= hidden_start_);
  cache_.truncate(start);
  const int64_t n = N - 1 - start;
  Tensor h = ops::narrow(hidden_, 1, start - hidden_start_, n);
  const Tensor positions = cache_.positions(n);

  std::vector<std::vector<int64_t>> drafts(static_cast<size_t>(B));
  std::vector<int64_t> ids(static_cast<size_t>(B * n));
  for (int64_t k = 1; k <= D; ++k) {
    // Depth k at position i embeds t_{i+k}: a committed token, or one of this call's drafts.
    for (int64_t r = 0; r < B; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t at = start + i + k;
        const auto& row = tokens[static_cast<size_t>(r)];
        LOOM_ASSERT(static_cast<int64_t>(row.size()) == N);
        ids[static_cast<size_t>(r * n + i)] =
            at < N ? row[static_cast<size_t>(at)] : drafts[static_cast<size_t>(r)][static_cast<size_t>(at - N)];
      }
    nn::MTPLayer& layer = *layers_[static_cast<size_t>(k - 1)];
    h = layer.forward(h, model_.embed(Tensor::from_vector(ids, {B, n})), positions, Tensor());
    const std::vector<float> logits =
        model_.mtp_head_logits(static_cast<size_t>(k - 1), ops::narrow(h, 1, n - 1, 1)).contiguous().to_float_vector();
    const int64_t V = static_cast<int64_t>(logits.size()) / B;
    for (int64_t r = 0; r < B; ++r)
      drafts[static_cast<size_t>(r)].push_back(sample_token(logits.data() + r * V, V, SamplingOptions{}, 0, 0));
  }
  cache_.advance(n);

  // The next call starts at N'-1-D >= N-D at the earliest (N' > N): keep the states from there.
  const int64_t keep = std::max(hidden_start_, N - D);
  const int64_t kept = N - 1 - keep;
  hidden_ = kept > 0 ? ops::narrow(hidden_, 1, keep - hidden_start_, kept).contiguous() : Tensor();
  hidden_start_ = keep;
  return drafts;
}

}  // namespace loom::runtime
