// QK-clip (MuonClip of the Kimi K2 report, as MindFormers' Muon applies it): after the Muon
// updates, when the largest per-head attention logit of the step reached the threshold τ, shrink
// the q and k up-projections of the offending heads so their logits fall back to τ. Per head h with
// S_h >= τ: γ = τ / S_h; q_nope rows × sqrt(γ), q_pe rows × γ (in linear_qb, or linear_q without
// q-LoRA), k_nope rows × sqrt(γ) (in linear_kvb); v rows and the shared k_pe are untouched. fp32
// math on the masters.
//
// Under sharding a rank holds some rows of a weight (FSDP rows, TP heads, or both): the maxima
// still come per global head, and each rank scales the rows of its shard that belong to a clipped
// head, found through the row runs its placement gives. A head split over ranks is then scaled
// consistently, as if the whole weight were scaled on one process.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/optim/muon_split.h"

namespace loom::optim {

// One attention layer's input: the running per-head max of softmax_scale·q·k over the step's
// micro-batches (already all-reduced MAX over data/context parallel ranks), and the names of
// its up-projections.
struct QkClipLayer {
  std::string q_up_name;    // "...self_attention.linear_qb.weight" (or linear_q.weight)
  std::string kv_up_name;   // "...self_attention.linear_kvb.weight"
  std::vector<float> max_logits;  // S_h, one per head
};

struct QkClipResult {
  bool fired = false;         // max over all layers and heads >= τ
  int64_t heads_clipped = 0;
  float max_logit = 0.f;
  std::vector<std::string> scaled;  // names of the weights that were rescaled
};

// Local rows [local_begin, local_begin + length) of a master are global rows
// [global_begin, global_begin + length) of the weight.
struct RowRun {
  int64_t local_begin = 0, global_begin = 0, length = 0;
};

// The fp32 master of an up-projection (contiguous, 2-D) and where its rows sit in the weight.
struct QkClipTarget {
  Tensor master;  // undefined: the weight is not optimised here and is skipped
  int64_t global_rows = 0;
  std::vector<RowRun> rows;

  QkClipTarget() = default;
  // A master that is the whole weight (one process, or a replicated weight): implicit, so a
  // lookup may simply return the master.
  QkClipTarget(Tensor whole);  // NOLINT(google-explicit-constructor)
};

// `target_of(name)` gives the master of a parameter and its rows. Shapes are checked against
// `dims` (ShapeError naming the weight).
QkClipResult apply_qk_clip(const std::vector<QkClipLayer>& layers, float threshold,
                           const MlaDims& dims,
                           const std::function<QkClipTarget(const std::string&)>& target_of);

}  // namespace loom::optim
