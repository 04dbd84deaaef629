// Placements: how a parameter's local tensor sits in its global tensor (the DTensor idea, small).
//
// A model is built with whole parameters. A parallel strategy that splits a parameter over a
// mesh axis appends one AxisPlacement saying how; strategies compose in the order they were
// applied (TP first, FSDP last): each one splits the local tensor the previous ones left.
//
//   Shard(dim)  the axis splits `dim`: this rank holds `ranges` of the previous local tensor's
//               indices along dim, concatenated in order. One range normally; one per block of a
//               fused tensor (fc1's gate and up halves, q/k/v of a fused projection), so each
//               block is split like the separate tensor it fuses. `copies` > 1 when several ranks
//               of the axis hold the same slice (KV heads shared by the TP ranks of a group).
//   Replicate   every rank of the axis holds the same values and computes the same gradient.
//   Partial     every rank holds the same values but computes a partial gradient (it saw only a
//               part of the tokens along this axis, e.g. a norm weight under sequence
//               parallelism); the gradients must be summed over the axis before the update.
//
// A mesh axis a parameter has no entry for holds identical copies (data-parallel replicas).
// Everything that must know where a rank's numbers belong reads placements only: the
// initialisation (Philox by global index, so every layout starts from the one-process weights),
// the grad norm's replica factors, sharded checkpoints (global shape + chunk offsets) and
// resharding on load.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/shape.h"

namespace loom::nn {

struct IndexRange {
  int64_t begin = 0;
  int64_t length = 0;
  bool operator==(const IndexRange&) const = default;
};

struct AxisPlacement {
  enum class Kind : uint8_t { shard, replicate, partial };
  std::string axis;  // mesh axis: "tp", "fsdp", "ep", "efsdp", ...
  Kind kind = Kind::replicate;
  int dim = 0;                      // shard only
  std::vector<IndexRange> ranges;   // shard only: indices of the previous local tensor along dim
  int copies = 1;                   // shard only: ranks of the axis holding this same slice

  static AxisPlacement shard(std::string axis, int dim, std::vector<IndexRange> ranges, int copies = 1);
  static AxisPlacement replicate(std::string axis);
  static AxisPlacement partial(std::string axis);
  bool operator==(const AxisPlacement&) const = default;
};

// A box of the local tensor and where it sits in the global tensor (same shape in both).
struct Piece {
  std::vector<int64_t> local_offset;
  std::vector<int64_t> global_offset;
  Shape shape;
};

class Placement {
 public:
  // Axes in the order strategies applied them.
  const std::vector<AxisPlacement>& axes() const { return axes_; }
  // Appends a placement; a shard's ranges must lie inside the current local extent of its dim
  // (ValueError naming the axis otherwise).
  void add(const Shape& global_shape, AxisPlacement placement);
  // The entry for `axis`, or null.
  const AxisPlacement* on(const std::string& axis) const;
  bool is_sharded() const;

  // The shape of this rank's local tensor.
  Shape local_shape(const Shape& global_shape) const;
  // The local tensor as boxes of the global tensor, in local row-major order of their offsets.
  // One piece covering everything when nothing is sharded; none when the local tensor is empty.
  std::vector<Piece> pieces(const Shape& global_shape) const;

 private:
  std::vector<AxisPlacement> axes_;
};

}  // namespace loom::nn
