// How Muon cuts a fused weight into the pieces that get their own Newton–Schulz and their own
// sqrt(max(a, b)) scale (the split schema of MindFormers' make_model_muon_fns). A piece is a
// rectangle of every matrix of the parameter (3-D parameters are batches of matrices along dim 0).
//
// Built-in rules, for Loom's parameter names (docs/models.md), first match wins:
//   *mlp.experts.weight1*  [E, hidden, 2·ffn]  gate columns | up columns of each expert
//   *mlp.experts.weight2*  [E, ffn, hidden]    each expert whole (the batch)
//   *self_attention.linear_qb.weight*          per head: q_nope rows, then q_pe rows
//   *self_attention.linear_q.weight*           same layout (MLA without q-LoRA)
//   *self_attention.linear_kvb.weight*         per head: k_nope rows, then v rows
//   *mlp.linear_fc1.weight*, *mlp.shared_experts.linear_fc1.weight*
//                                               gate rows | up rows (two halves: Loom's layout,
//                                               not the reference's interleaved rows)
// Anything else is one piece per matrix. Models with other fused layouts add rules in front.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/shape.h"

namespace loom::optim {

// MLA attention dimensions the split (and QK-clip) need; names follow the model config.
struct MlaDims {
  int64_t num_heads = 0;
  int64_t qk_nope_head_dim = 0;   // qk_head_dim in MindFormers
  int64_t qk_rope_head_dim = 0;   // qk_pos_emb_head_dim
  int64_t v_head_dim = 0;
  int64_t q_lora_rank = 0;        // 0: no q-LoRA (linear_q instead of linear_qa/linear_qb)
};

struct MuonBlock {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  bool operator==(const MuonBlock& o) const {
    return row0 == o.row0 && rows == o.rows && col0 == o.col0 && cols == o.cols;
  }
};

// Blocks of one rows×cols matrix of parameter `name`.
using MuonBlockFn = std::function<std::vector<MuonBlock>(const std::string& name, int64_t rows,
                                                         int64_t cols)>;

class MuonSplitSchema {
 public:
  MuonSplitSchema() = default;
  // The built-in rules above for a model with these attention dims.
  static MuonSplitSchema standard(const MlaDims& dims);

  // Rules are fnmatch globs over the parameter name; prepend() puts a rule before the others.
  void append(std::vector<std::string> patterns, MuonBlockFn fn);
  void prepend(std::vector<std::string> patterns, MuonBlockFn fn);

  // The pieces of each matrix of `name` (shape = the parameter's shape, 2-D or 3-D). They are
  // checked to lie inside the matrix and to cover it exactly (ShapeError otherwise).
  std::vector<MuonBlock> blocks(const std::string& name, const Shape& shape) const;

 private:
  struct Rule {
    std::vector<std::string> patterns;
    MuonBlockFn fn;
  };
  std::vector<Rule> rules_;
};

// Row blocks repeating `parts` (e.g. {nope, rope}) `heads` times: the reference's "periodic".
std::vector<MuonBlock> periodic_row_blocks(const std::string& name, int64_t rows, int64_t cols,
                                           const std::vector<int64_t>& parts, int64_t heads);

}  // namespace loom::optim
