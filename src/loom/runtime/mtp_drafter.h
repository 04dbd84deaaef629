// Draft tokens for speculative decoding from DeepSeek-V3's multi-token prediction layers
// (DeepSeek-V3 technical report §2.2: the MTP modules, trained to predict further tokens, can
// serve speculative decoding; nn/mtp.h has the layer).
//
// Depth k (1..D) at position i reads h^{k-1}_i (h^0: the main model's hidden state, before its
// final norm) and the embedding of t_{i+k}, and predicts t_{i+k+1}. Once the main model gave
// t_{N-1} from h_{N-2}, depth 1 at position N-2 drafts t_N, depth 2 reads depth 1's state there
// and the draft t_N and drafts t_{N+1}, and so on: D drafts per step.
//
// The MTP layers keep their own KV cache (CausalLM::attach_cache(cache, mtp_cache)), because
// their stream cannot move with the main one:
//   - it trails: depth k's state at position i needs t_{i+k}, which exists only after the main
//     model (or a draft) produced it, so when drafting after t_{N-1} the MTP stream reaches
//     position N-2 while the main cache already holds N-1 positions;
//   - it is cut back on its own: depth k's states at the last k-1 positions were built from
//     draft tokens, so whatever the main model accepted, the MTP stream's last D-1 positions
//     (and the position that read the token the main model replaced) are rebuilt at the next
//     draft, from the main hidden states this class keeps for them.
// Each draft therefore runs every depth over the positions [s, N-2], s = min(the MTP stream's
// length, N-1-D): the new committed positions, plus the D-1 that read a draft (one more after
// a rejection). All depths share the one MTP cache, each in its own slot, at one length.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/nn/causal_lm.h"
#include "loom/nn/kv_cache.h"

namespace loom::runtime {

class MtpDrafter {
 public:
  // `capacity` and `pad` as the main cache's (the rows left-padded alike); the model must have
  // MTP layers. Attaching the cache is the caller's (CausalLM::attach_cache(main, &cache())).
  MtpDrafter(nn::CausalLM& model, int64_t capacity, const std::vector<int64_t>& pad);

  // D, the drafts per call: the model's MTP layers.
  int64_t depth() const { return static_cast<int64_t>(layers_.size()); }
  nn::KVCache& cache() { return cache_; }

  // `tokens[r]`: row r's sequence t_0..t_{N-1} by cache position (its padding first), every row
  // of one length N; `committed` [B, n, hidden]: the main model's hidden states of the n
  // positions it accepted since the last call, ending at N-2 (the prompt's at the first call).
  // Returns each row's D greedy drafts for t_N..t_{N+D-1}.
  std::vector<std::vector<int64_t>> draft(const Tensor& committed, const std::vector<std::vector<int64_t>>& tokens);

 private:
  nn::CausalLM& model_;
  std::vector<nn::MTPLayer*> layers_;
  nn::KVCache cache_;
  // Main hidden states of positions [hidden_start_, N-2]: what the next draft may rebuild from.
  Tensor hidden_;
  int64_t hidden_start_ = 0;
};

}  // namespace loom::runtime
