// What Muon needs from the model (MindFormers' make_model_muon_fns and QK-clip): how each fused
// weight is cut into the pieces that get their own Newton–Schulz (per head for the MLA
// up-projections, gate/up halves of linear_fc1, per expert and gate/up halves for experts.weight1),
// and, for QK-clip, the names of each MLA layer's q and kv up-projections with the running per-head
// max logits.
//
// The pieces are the same rectangles optim::MuonSplitSchema::standard(dims) produces for these
// names (tests/models/test_model_support.cpp checks that for every parameter); the trainer builds
// optim::MuonModelInfo from MuonModelFacts (models sits above optim, so it defines its own types).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/shape.h"
#include "loom/models/model_args.h"
#include "loom/nn/causal_lm.h"

namespace loom::models {

struct MuonPiece {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  bool operator==(const MuonPiece& o) const {
    return row0 == o.row0 && rows == o.rows && col0 == o.col0 && cols == o.cols;
  }
};

// Pieces of each matrix of parameter `name` (2-D, or 3-D = a batch of matrices along dim 0),
// covering the matrix exactly. Unfused weights are one piece.
std::vector<MuonPiece> muon_pieces(const ModelArgs& args, const std::string& name, const Shape& shape);

struct QkClipLayerNames {
  int64_t layer = 0;            // decoder index; MTP layer k is num_layers + k
  std::string attention_path;   // "decoder.layers.3.self_attention"
  std::string q_up_name;        // "<attention>.linear_qb.weight" (linear_q.weight without q-LoRA)
  std::string kv_up_name;       // "<attention>.linear_kvb.weight"
};

struct MuonModelFacts {
  bool multi_latent_attention = false;
  int64_t num_heads = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  int64_t q_lora_rank = 0;
  std::vector<QkClipLayerNames> qk_clip_layers;  // every MLA layer, decoder then MTP
};
MuonModelFacts muon_model_facts(const ModelArgs& args);

struct QkClipObservation {
  QkClipLayerNames names;
  std::vector<float> max_logits;  // per head, since the last take (empty if not tracked)
};
// Reads and resets the running max logits of every MLA layer this model holds (a pipeline stage:
// its own layers), enable with set_track_max_logits.
std::vector<QkClipObservation> take_qk_clip_observations(nn::CausalLM& model, const ModelArgs& args);

}  // namespace loom::models
