// Muon's whole-matrix view of a parallel layout (muon_sharding.h), built from the parameters'
// placements and the device mesh (MindFormers' muon.py, spec training_hyperparameters.md
// §1.2 `comm_strategy`): what the trainer hands Muon when the strategies have sharded the model.
//
// Split matrices and their holders. A Muon parameter is split when its placement shards one of
// its matrix dims (the last two) over a mesh axis of more than one rank. Its holder group is the
// set of ranks that share every mesh coordinate except along those axes: between them they hold
// every element of the matrices (different boxes, or the same box when a slice has copies).
// Placements split each dim independently, so a 3-D expert batch that is also split along dim 0
// (experts over FSDP) keeps that split: its holders assemble whole matrices of their own experts.
// A batch split along dim 0 only, in whole experts, is not split at all: no communication.
//
// plan(), once and collectively: one process group per distinct set of split axes (split off
// the world, so its traffic is counted apart), every holder's boxes exchanged once (a holder may
// hold nothing: FSDP rows run out on the last ranks), and for allgather_deredundency one owner
// per matrix and holder group by longest-processing-time greedy over the whole world
// (plan_owners): every rank computes the same owners, and each owner is one of the holders.
//
// orthogonalize(), every step, matrix by matrix in plan order (the same order on every rank):
//   allgather               each holder's U travels as bf16 (exact: U holds bf16 values), padded
//                           to the largest holder's size, in one all_gather over the holder group;
//                           every holder places every box, runs Newton–Schulz, keeps its slice.
//   allgather_deredundency  three phases (MindFormers' muon.py): the holders send their U to
//                           the owner, matrix by matrix (the owner receives in group rank order);
//                           every owner runs Newton–Schulz on the matrices it owns, all ranks at
//                           once; the owners send each holder its slice of the (bf16-valued,
//                           unscaled) result, matrix by matrix. Blocking send/recv cannot
//                           deadlock: within a matrix a rank talks only to its holder group, and
//                           in each phase every rank walks the matrices in the same order.
// Per matrix of M bf16 bytes and n holders: allgather moves (n−1)/n·M into every holder and runs
// Newton–Schulz n times; deredundency moves (n−1)/n·M into and out of the owner, M/n out of and
// into every other holder, and runs it once.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"
#include "loom/nn/placement.h"
#include "loom/optim/muon_sharding.h"

namespace loom::optim {

// Where one parameter lives: what Muon's view is computed from.
struct ParamPlacement {
  std::string name;
  Shape global_shape;
  nn::Placement placement;
};

// The mesh axes over which a placement splits a matrix dim (the last two of a 2-D or 3-D
// parameter) across more than one rank, in placement order; empty: each rank holds whole
// matrices.
std::vector<std::string> matrix_split_axes(const ParamPlacement& param, const dist::ParallelDims& dims);

// World ranks sharing every mesh coordinate with `rank` except along `axes` (ascending).
std::vector<int> holder_ranks(const dist::ParallelDims& dims, const std::vector<std::string>& axes, int rank);

// Holder groups of every matrix over the whole world, each with its owner (a world rank among
// its holders) from assign_owners on `work`; load[r] is the work world rank r owns. Pure
// arithmetic on the layout: every rank computes the same plan.
struct HolderGroup {
  std::vector<int> ranks;
  int owner = -1;
};
struct OwnerPlan {
  std::vector<std::vector<HolderGroup>> groups;  // per matrix
  std::vector<double> load;                      // per world rank
};
OwnerPlan plan_owners(const dist::ParallelDims& dims, const std::vector<std::vector<std::string>>& split_axes,
                      const std::vector<double>& work);

class PlacementMuonSharding final : public MuonSharding {
 public:
  PlacementMuonSharding(std::shared_ptr<dist::DeviceMesh> mesh, std::vector<ParamPlacement> params);
  // Every parameter of `module` with its global shape and placement (read when built: build it
  // after the parallel strategies ran).
  static std::shared_ptr<PlacementMuonSharding> of_module(nn::Module& module, std::shared_ptr<dist::DeviceMesh> mesh);

  ShardLayout layout(const std::string& name) const override;
  void plan(const std::vector<SplitMatrix>& matrices, MuonCommStrategy strategy) override;
  void orthogonalize(std::vector<SplitUpdate>& updates, const WholeMatrixNs& ns) override;

  // After plan(): the planned matrices, the world ranks holding matrix i with this rank, and the
  // world rank that runs its Newton–Schulz (allgather_deredundency; -1 under allgather: all do).
  size_t num_matrices() const { return matrices_.size(); }
  const std::string& name(size_t matrix) const;
  std::vector<int> holders(size_t matrix) const;
  int owner(size_t matrix) const;
  // Bytes this rank moved for the exchange since the last reset (the holder groups only).
  dist::CommStats comm_stats() const;
  void reset_comm_stats();

 private:
  // One holder's local tensor: its shape and boxes, the same for every rank of the group.
  struct Holder {
    Shape local_shape;
    std::vector<ShardBox> boxes;
  };
  struct Planned {
    std::string name;
    std::shared_ptr<dist::ProcessGroup> group;  // the holder group
    std::vector<Holder> holders;                // by group rank
    Shape whole;                                // [batch, rows, cols] a holder assembles
    int64_t largest = 0;                        // largest holder's numel (the all_gather chunk)
    int owner = -1;                             // group rank (allgather_deredundency)
  };

  const ParamPlacement& find(const std::string& name) const;
  void make_groups(const std::vector<std::vector<std::string>>& axes);
  void exchange_layouts(const std::vector<std::string>& keys);
  void gather_whole(const Planned& p, const Tensor& local, size_t matrix, const WholeMatrixNs& ns);
  void via_owners(std::vector<SplitUpdate>& updates, const WholeMatrixNs& ns);

  std::shared_ptr<dist::DeviceMesh> mesh_;
  std::map<std::string, ParamPlacement> params_;
  MuonCommStrategy strategy_ = MuonCommStrategy::allgather;
  std::map<std::string, std::shared_ptr<dist::ProcessGroup>> groups_;  // by split-axes key
  std::vector<Planned> matrices_;
};

}  // namespace loom::optim
