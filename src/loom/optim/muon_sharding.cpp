#include "loom/optim/muon_sharding.h"

#include <algorithm>
#include <numeric>

#include "loom/core/error.h"
#include "loom/core/text.h"

namespace loom::optim {

std::string muon_comm_strategy_problem(const std::string& value) {
  const std::vector<std::string> names = {"allgather", "allgather_deredundency"};
  if (std::find(names.begin(), names.end(), value) != names.end()) return "";
  return "must be 'allgather' or 'allgather_deredundency', got '" + value + "'" + did_you_mean(value, names);
}

MuonCommStrategy parse_muon_comm_strategy(const std::string& value) {
  const std::string problem = muon_comm_strategy_problem(value);
  LOOM_CHECK(problem.empty(), ConfigError, "optimizer.comm_strategy: ", problem);
  return value == "allgather" ? MuonCommStrategy::allgather : MuonCommStrategy::allgather_deredundency;
}

const char* muon_comm_strategy_name(MuonCommStrategy strategy) {
  return strategy == MuonCommStrategy::allgather ? "allgather" : "allgather_deredundency";
}

ShardLayout ShardLayout::whole(const Shape& shape) {
  ShardLayout l;
  l.global_shape = shape;
  if (shape.numel() > 0) {
    const std::vector<int64_t> zeros(static_cast<size_t>(shape.ndim()), 0);
    l.boxes.push_back({zeros, zeros, shape});
  }
  return l;
}

double newton_schulz_work(const std::vector<MuonBlock>& blocks, int64_t batch, int64_t ns_steps) {
  double per_matrix = 0;
  for (const MuonBlock& b : blocks) {
    const double s = static_cast<double>(std::min(b.rows, b.cols)), l = static_cast<double>(std::max(b.rows, b.cols));
    per_matrix += static_cast<double>(ns_steps) * (2.0 * l * s * s + s * s * s) + static_cast<double>(b.rows * b.cols);
  }
  return static_cast<double>(batch) * per_matrix;
}

OwnerAssignment assign_owners(const std::vector<double>& work, const std::vector<std::vector<int>>& candidates,
                              int num_ranks) {
  LOOM_CHECK(work.size() == candidates.size(), ValueError, "assign_owners: ", work.size(), " work estimates for ",
             candidates.size(), " candidate lists");
  OwnerAssignment a;
  a.owner.assign(work.size(), -1);
  a.load.assign(static_cast<size_t>(std::max(num_ranks, 0)), 0.0);
  std::vector<size_t> order(work.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return work[x] > work[y]; });
  for (size_t item : order) {
    int best = -1;
    for (int r : candidates[item]) {
      LOOM_CHECK(r >= 0 && r < num_ranks, ValueError, "assign_owners: candidate rank ", r, " of item ", item,
                 " is outside [0, ", num_ranks, ")");
      const auto ru = static_cast<size_t>(r), bu = static_cast<size_t>(best);
      if (best < 0 || a.load[ru] < a.load[bu] || (a.load[ru] == a.load[bu] && r < best)) best = r;
    }
    LOOM_CHECK(best >= 0, ValueError, "assign_owners: item ", item, " has no candidate rank");
    a.owner[item] = best;
    a.load[static_cast<size_t>(best)] += work[item];
  }
  return a;
}

}  // namespace loom::optim
