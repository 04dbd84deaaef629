#include "loom/nn/placement.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::nn {

namespace {

// A run of one dim's local indices and where it starts in the global tensor.
struct Segment {
  int64_t local_begin, global_begin, length;
};

// Per dim, the local extent as global runs, after every shard applied so far.
std::vector<std::vector<Segment>> segments(const Shape& global, const std::vector<AxisPlacement>& axes) {
  std::vector<std::vector<Segment>> out(static_cast<size_t>(global.ndim()));
  for (int d = 0; d < global.ndim(); ++d)
    if (global[d] > 0) out[static_cast<size_t>(d)].push_back({0, 0, global[d]});
  for (const AxisPlacement& a : axes) {
    if (a.kind != AxisPlacement::Kind::shard) continue;
    std::vector<Segment>& segs = out[static_cast<size_t>(a.dim)];
    std::vector<Segment> next;
    int64_t local = 0;
    for (const IndexRange& r : a.ranges) {
      for (const Segment& s : segs) {
        const int64_t lo = std::max(r.begin, s.local_begin);
        const int64_t hi = std::min(r.begin + r.length, s.local_begin + s.length);
        if (hi > lo) next.push_back({local + (lo - r.begin), s.global_begin + (lo - s.local_begin), hi - lo});
      }
      local += r.length;
    }
    segs = std::move(next);
  }
  return out;
}

int64_t extent(const std::vector<Segment>& segs) {
  int64_t n = 0;
  for (const Segment& s : segs) n += s.length;
  return n;
}

}  // namespace

AxisPlacement AxisPlacement::shard(std::string axis, int dim, std::vector<IndexRange> ranges, int copies) {
  AxisPlacement p;
  p.axis = std::move(axis);
  p.kind = Kind::shard;
  p.dim = dim;
  p.ranges = std::move(ranges);
  p.copies = copies;
  return p;
}

AxisPlacement AxisPlacement::replicate(std::string axis) {
  AxisPlacement p;
  p.axis = std::move(axis);
  p.kind = Kind::replicate;
  return p;
}

AxisPlacement AxisPlacement::partial(std::string axis) {
  AxisPlacement p;
  p.axis = std::move(axis);
  p.kind = Kind::partial;
  return p;
}

void Placement::add(const Shape& global, AxisPlacement placement) {
  LOOM_CHECK(on(placement.axis) == nullptr, ValueError, "placement: the parameter is already placed on mesh axis '",
             placement.axis, "'");
  if (placement.kind == AxisPlacement::Kind::shard) {
    LOOM_CHECK(placement.dim >= 0 && placement.dim < global.ndim(), ValueError, "placement: shard over mesh axis '",
               placement.axis, "' names dim ", placement.dim, " of a ", global.ndim(), "-d parameter ", global.str());
    LOOM_CHECK(placement.copies >= 1, ValueError, "placement: copies must be >= 1 on mesh axis '", placement.axis, "'");
    const int64_t n = local_shape(global)[placement.dim];
    for (const IndexRange& r : placement.ranges)
      LOOM_CHECK(r.begin >= 0 && r.length >= 0 && r.begin + r.length <= n, ValueError, "placement: shard over mesh axis '",
                 placement.axis, "' takes indices [", r.begin, ", ", r.begin + r.length, ") of dim ", placement.dim,
                 ", which holds ", n, " locally");
  }
  axes_.push_back(std::move(placement));
}

const AxisPlacement* Placement::on(const std::string& axis) const {
  for (const AxisPlacement& a : axes_)
    if (a.axis == axis) return &a;
  return nullptr;
}

bool Placement::is_sharded() const {
  for (const AxisPlacement& a : axes_)
    if (a.kind == AxisPlacement::Kind::shard) return true;
  return false;
}

Shape Placement::local_shape(const Shape& global) const {
  Shape out = global;
  for (const AxisPlacement& a : axes_) {
    if (a.kind != AxisPlacement::Kind::shard) continue;
    int64_t n = 0;
    for (const IndexRange& r : a.ranges) n += r.length;
    out[a.dim] = n;
  }
  return out;
}

std::vector<Piece> Placement::pieces(const Shape& global) const {
  const auto segs = segments(global, axes_);
  const int nd = global.ndim();
  for (int d = 0; d < nd; ++d)
    if (extent(segs[static_cast<size_t>(d)]) == 0) return {};
  // Cartesian product of the per-dim runs, last dim fastest.
  std::vector<Piece> out;
  std::vector<size_t> at(static_cast<size_t>(nd), 0);
  while (true) {
    Piece p;
    for (int d = 0; d < nd; ++d) {
      const Segment& s = segs[static_cast<size_t>(d)][at[static_cast<size_t>(d)]];
      p.local_offset.push_back(s.local_begin);
      p.global_offset.push_back(s.global_begin);
      p.shape.push_back(s.length);
    }
    out.push_back(std::move(p));
    int d = nd - 1;
    while (d >= 0 && ++at[static_cast<size_t>(d)] == segs[static_cast<size_t>(d)].size()) at[static_cast<size_t>(d--)] = 0;
    if (d < 0) break;
  }
  return out;
}

}  // namespace loom::nn
