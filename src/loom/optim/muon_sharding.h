// Muon on sharded parameters (spec training_hyperparameters.md §1.2 `comm_strategy`,
// MindFormers' muon.py). Newton–Schulz is not equivalent on a shard, so every split-schema
// piece is orthogonalised as the whole (global) matrix, while everything else stays local:
//
//   each rank    M = μM + G and U on its own shard (every rank keeps its own muon_m shard)
//   exchange     the whole U of each sharded matrix reaches whoever runs Newton–Schulz:
//                  allgather               every holder gathers U and runs NS itself
//                  allgather_deredundency  one owner per matrix gathers U, runs NS once and
//                                          sends every holder its slice back
//   each rank    scales its slice piece by piece (lr·sqrt(max(a, b))·rms of the GLOBAL piece)
//                and applies W = W·(1 − lr·wd) − O to its shard
//
// Both strategies hand Newton–Schulz the same whole matrix, so they agree bit for bit with each
// other and with one process. A 3-D expert batch split along dim 0 in whole matrices needs no
// exchange at all; neither does an unsharded parameter.
//
// Muon sees the layout only through the MuonSharding interface below, so it steps (and is tested)
// without processes; placement_muon_sharding.h implements it from the parameters' placements and
// the device mesh's groups.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "loom/core/shape.h"
#include "loom/core/tensor.h"
#include "loom/optim/muon_split.h"

namespace loom::optim {

enum class MuonCommStrategy : uint8_t { allgather, allgather_deredundency };

// What is wrong with optimizer.comm_strategy `value`, or "" when it is "allgather" or
// "allgather_deredundency".
std::string muon_comm_strategy_problem(const std::string& value);
// optimizer.comm_strategy as text; ConfigError naming the field when muon_comm_strategy_problem
// finds one.
MuonCommStrategy parse_muon_comm_strategy(const std::string& value);
const char* muon_comm_strategy_name(MuonCommStrategy strategy);

// A box of a parameter's local tensor and where it sits in the global tensor (same shape in
// both): nn::Piece restated, so that Muon itself needs nothing of nn.
struct ShardBox {
  std::vector<int64_t> local_offset;
  std::vector<int64_t> global_offset;
  Shape shape;
};

struct ShardLayout {
  Shape global_shape;
  // The local tensor as boxes of the global one; none when the local tensor is empty.
  std::vector<ShardBox> boxes;
  // A matrix dim (one of the last two) is split over ranks: Newton–Schulz needs the other
  // holders' pieces. The same answer on every rank that holds the parameter (it comes from the
  // placement's axes, never from the local extent, which may be empty on one rank only).
  bool split_matrices = false;

  // A parameter this rank holds whole.
  static ShardLayout whole(const Shape& shape);
};

// A Muon matrix whose update must be assembled from several ranks, and its Newton–Schulz cost.
struct SplitMatrix {
  std::string name;
  double work = 0;  // newton_schulz_work()
};

// This step's update of planned matrix `matrix`: on entry the fp32 U of the local shard (bf16
// values, the parameter's local shape, contiguous); on return this rank's slice of the
// orthogonalised whole matrix (unscaled, bf16 values).
struct SplitUpdate {
  size_t matrix = 0;
  Tensor local;
};

// Newton–Schulz in place on whole matrices: `full` is a contiguous fp32 [batch, rows, cols]
// tensor of bf16 values with the global rows × cols of planned matrix `matrix`; afterwards every
// split-schema piece holds its own orthogonalisation, unscaled.
using WholeMatrixNs = std::function<void(size_t matrix, Tensor& full)>;

class MuonSharding {
 public:
  virtual ~MuonSharding() = default;

  // Where parameter `name`'s local tensor sits (every parameter Muon was given).
  virtual ShardLayout layout(const std::string& name) const = 0;
  // Once, when Muon is built, on every rank, collectively: the matrices whose layout says
  // split_matrices, in the order updates will refer to them, and the strategy.
  virtual void plan(const std::vector<SplitMatrix>& matrices, MuonCommStrategy strategy) = 0;
  // Every step, collectively, with updates in ascending `matrix` order (the same matrices on
  // every holder): replaces each update's local tensor by its slice of ns(whole U).
  virtual void orthogonalize(std::vector<SplitUpdate>& updates, const WholeMatrixNs& ns) = 0;
};

// The estimated Newton–Schulz cost of one parameter (MF _estimate_ns_work_for_shape):
// batch · Σ_pieces (ns_steps·(2·L·s² + s³) + a·b) with s = min(a, b), L = max(a, b).
double newton_schulz_work(const std::vector<MuonBlock>& blocks, int64_t batch, int64_t ns_steps);

// Longest-processing-time greedy: items sorted by work, largest first (ties by index), each to
// the least loaded of its candidate ranks (ties to the lowest rank). Deterministic: every rank
// that runs it on the same input gets the same owners. Candidates are ranks in [0, num_ranks).
struct OwnerAssignment {
  std::vector<int> owner;   // per item
  std::vector<double> load;  // per rank: the work it owns
};
OwnerAssignment assign_owners(const std::vector<double>& work,
                              const std::vector<std::vector<int>>& candidates, int num_ranks);

}  // namespace loom::optim
