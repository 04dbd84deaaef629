#include "loom/optim/muon_split.h"

#include <fnmatch.h>

#include "loom/core/error.h"

namespace loom::optim {

std::vector<MuonBlock> periodic_row_blocks(const std::string& name, int64_t rows, int64_t cols,
                                           const std::vector<int64_t>& parts, int64_t heads) {
  int64_t period = 0;
  for (int64_t p : parts) period += p;
  LOOM_CHECK(heads > 0 && period > 0 && period * heads == rows, ShapeError, "Muon split of '",
             name, "': ", rows, " rows do not hold ", heads, " heads of ", period,
             " rows each; check model.num_attention_heads and the MLA head dims");
  std::vector<MuonBlock> out;
  int64_t row = 0;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t p : parts) {
      if (p > 0) out.push_back({row, p, 0, cols});
      row += p;
    }
  return out;
}

MuonSplitSchema MuonSplitSchema::standard(const MlaDims& d) {
  MuonSplitSchema s;
  s.append({"*mlp.experts.weight1*"}, [](const std::string& name, int64_t rows, int64_t cols) {
    LOOM_CHECK(cols % 2 == 0, ShapeError, "Muon split of '", name, "': ", cols,
               " columns cannot be split into gate and up halves");
    return std::vector<MuonBlock>{{0, rows, 0, cols / 2}, {0, rows, cols / 2, cols / 2}};
  });
  s.append({"*mlp.experts.weight2*"}, [](const std::string&, int64_t rows, int64_t cols) {
    return std::vector<MuonBlock>{{0, rows, 0, cols}};
  });
  s.append({"*self_attention.linear_qb.weight*", "*self_attention.linear_q.weight*"},
           [d](const std::string& name, int64_t rows, int64_t cols) {
             return periodic_row_blocks(name, rows, cols, {d.qk_nope_head_dim, d.qk_rope_head_dim},
                                        d.num_heads);
           });
  s.append({"*self_attention.linear_kvb.weight*"},
           [d](const std::string& name, int64_t rows, int64_t cols) {
             return periodic_row_blocks(name, rows, cols, {d.qk_nope_head_dim, d.v_head_dim},
                                        d.num_heads);
           });
  s.append({"*mlp.linear_fc1.weight*", "*mlp.shared_experts.linear_fc1.weight*"},
           [](const std::string& name, int64_t rows, int64_t cols) {
             LOOM_CHECK(rows % 2 == 0, ShapeError, "Muon split of '", name, "': ", rows,
                        " rows cannot be split into gate and up halves");
             return std::vector<MuonBlock>{{0, rows / 2, 0, cols}, {rows / 2, rows / 2, 0, cols}};
           });
  return s;
}

void MuonSplitSchema::append(std::vector<std::string> patterns, MuonBlockFn fn) {
  rules_.push_back({std::move(patterns), std::move(fn)});
}

void MuonSplitSchema::prepend(std::vector<std::string> patterns, MuonBlockFn fn) {
  rules_.insert(rules_.begin(), Rule{std::move(patterns), std::move(fn)});
}

std::vector<MuonBlock> MuonSplitSchema::blocks(const std::string& name, const Shape& shape) const {
  LOOM_CHECK(shape.ndim() == 2 || shape.ndim() == 3, ShapeError, "Muon: parameter '", name,
             "' has shape ", shape.str(), "; only 2-D and 3-D parameters are orthogonalised");
  const int64_t rows = shape[shape.ndim() - 2], cols = shape[shape.ndim() - 1];
  std::vector<MuonBlock> out;
  bool matched = false;
  for (const Rule& rule : rules_) {
    for (const auto& pattern : rule.patterns)
      if (fnmatch(pattern.c_str(), name.c_str(), 0) == 0) {
        matched = true;
        break;
      }
    if (matched) {
      out = rule.fn(name, rows, cols);
      break;
    }
  }
  if (!matched) return {{0, rows, 0, cols}};
  int64_t area = 0;
  for (const MuonBlock& b : out) {
    LOOM_CHECK(b.rows > 0 && b.cols > 0 && b.row0 >= 0 && b.col0 >= 0 && b.row0 + b.rows <= rows &&
                   b.col0 + b.cols <= cols,
               ShapeError, "Muon split of '", name, "': block rows [", b.row0, ", ",
               b.row0 + b.rows, ") cols [", b.col0, ", ", b.col0 + b.cols,
               ") lies outside its ", rows, "x", cols, " matrix");
    area += b.rows * b.cols;
  }
  LOOM_CHECK(area == rows * cols, ShapeError, "Muon split of '", name, "': the blocks cover ",
             area, " of the ", rows * cols, " elements of each ", rows, "x", cols,
             " matrix; a split rule must tile the matrix exactly");
  return out;
}

}  // namespace loom::optim
