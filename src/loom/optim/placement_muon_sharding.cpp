#include "loom/optim/placement_muon_sharding.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <set>
#include <tuple>

#include "loom/core/error.h"

namespace loom::optim {

namespace {

// Point-to-point tag of the owner exchange (FIFO per pair of ranks keeps the matrices apart).
constexpr int kMuonTag = 0x4d75;

std::string join(const std::vector<std::string>& parts, char sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? std::string(1, sep) : std::string()) + parts[i];
  return out;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= text.size() && !text.empty()) {
    const size_t end = std::min(text.find(sep, begin), text.size());
    out.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

// One name for a set of split axes, whatever order the strategies applied them in.
std::string axes_key(std::vector<std::string> axes) {
  std::sort(axes.begin(), axes.end());
  return join(axes, '+');
}

int axis_size(const dist::ParallelDims& dims, const std::string& axis) {
  return static_cast<int>(dims.group_ranks(axis, 0).size());
}

// ---- Boxes as [batch, rows, cols] regions ------------------------------------------------------
// A 2-D parameter is one matrix of a batch of one. In the assembled whole matrices the batch
// index stays local (every holder has the same batch slice) and the matrix dims are global.

Shape as_batch(const Shape& s) { return s.ndim() == 2 ? Shape{1, s[0], s[1]} : s; }

struct Region {
  std::array<int64_t, 3> local, whole, shape;
};

Region region_of(const ShardBox& b) {
  if (b.shape.ndim() == 2)
    return {{0, b.local_offset[0], b.local_offset[1]}, {0, b.global_offset[0], b.global_offset[1]}, {1, b.shape[0], b.shape[1]}};
  return {{b.local_offset[0], b.local_offset[1], b.local_offset[2]},
          {b.local_offset[0], b.global_offset[1], b.global_offset[2]},
          {b.shape[0], b.shape[1], b.shape[2]}};
}

Tensor part(const Tensor& t, const std::array<int64_t, 3>& offset, const std::array<int64_t, 3>& shape) {
  return t.narrow(0, offset[0], shape[0]).narrow(1, offset[1], shape[1]).narrow(2, offset[2], shape[2]);
}

// A holder's local tensor (as [batch, rows, cols]) into the whole matrices, and back.
void place(Tensor& whole, const Tensor& local, const std::vector<ShardBox>& boxes) {
  for (const auto& b : boxes) {
    const Region r = region_of(b);
    part(whole, r.whole, r.shape).copy_(part(local, r.local, r.shape));
  }
}

void take(Tensor& local, const Tensor& whole, const std::vector<ShardBox>& boxes) {
  for (const auto& b : boxes) {
    const Region r = region_of(b);
    part(local, r.local, r.shape).copy_(part(whole, r.whole, r.shape));
  }
}

// ---- Layout descriptors exchanged once -----------------------------------------------------------
// [ndim, local shape..., boxes, (local offset..., global offset..., shape...) per box]

void encode(std::vector<int64_t>& out, const Shape& local, const std::vector<ShardBox>& boxes) {
  out.push_back(local.ndim());
  for (int d = 0; d < local.ndim(); ++d) out.push_back(local[d]);
  out.push_back(static_cast<int64_t>(boxes.size()));
  for (const auto& b : boxes) {
    out.insert(out.end(), b.local_offset.begin(), b.local_offset.end());
    out.insert(out.end(), b.global_offset.begin(), b.global_offset.end());
    for (int d = 0; d < b.shape.ndim(); ++d) out.push_back(b.shape[d]);
  }
}

struct Decoded {
  Shape local_shape;
  std::vector<ShardBox> boxes;
};

Decoded decode(const std::vector<int64_t>& words, size_t& at) {
  auto next = [&]() {
    LOOM_CHECK(at < words.size(), DistError, "Muon sharding: a holder's layout descriptor is truncated");
    return words[at++];
  };
  Decoded d;
  const auto nd = static_cast<int>(next());
  for (int i = 0; i < nd; ++i) d.local_shape.push_back(next());
  const int64_t boxes = next();
  for (int64_t i = 0; i < boxes; ++i) {
    ShardBox b;
    for (int k = 0; k < nd; ++k) b.local_offset.push_back(next());
    for (int k = 0; k < nd; ++k) b.global_offset.push_back(next());
    for (int k = 0; k < nd; ++k) b.shape.push_back(next());
    d.boxes.push_back(std::move(b));
  }
  return d;
}

std::vector<std::vector<int64_t>> all_gather_words(dist::ProcessGroup& group, const std::vector<int64_t>& mine) {
  std::string bytes(mine.size() * sizeof(int64_t), '\0');
  if (!mine.empty()) std::memcpy(bytes.data(), mine.data(), bytes.size());
  std::vector<std::vector<int64_t>> out;
  for (const std::string& s : dist::all_gather_strings(group, bytes)) {
    std::vector<int64_t> words(s.size() / sizeof(int64_t));
    if (!words.empty()) std::memcpy(words.data(), s.data(), words.size() * sizeof(int64_t));
    out.push_back(std::move(words));
  }
  return out;
}

// Every holder holds the same batch slice, and together they tile each rows × cols matrix.
void check_holders(const std::string& name, const Shape& global, const std::vector<Decoded>& holders) {
  const bool batched = global.ndim() == 3;
  const int64_t rows = global[global.ndim() - 2], cols = global[global.ndim() - 1];
  using BatchRun = std::tuple<int64_t, int64_t, int64_t>;
  auto batch_runs = [&](const Decoded& h) {
    std::set<BatchRun> runs;
    if (batched)
      for (const auto& b : h.boxes) runs.insert({b.local_offset[0], b.global_offset[0], b.shape[0]});
    return runs;
  };
  const std::set<BatchRun> first = batch_runs(holders[0]);
  std::set<std::array<int64_t, 4>> tiles;
  for (size_t m = 0; m < holders.size(); ++m) {
    const Decoded& h = holders[m];
    LOOM_CHECK(h.local_shape.ndim() == global.ndim(), DistError, "Muon sharding: holder ", m, " of '", name,
               "' has a ", h.local_shape.ndim(), "-d local tensor of a ", global.ndim(), "-d parameter");
    LOOM_CHECK(!batched || (h.local_shape[0] == holders[0].local_shape[0] && (h.boxes.empty() || batch_runs(h) == first)),
               DistError, "Muon sharding: the holders of '", name, "' hold different slices of its batch dim; a "
               "strategy must split a 3-D parameter's matrices and its batch over different mesh axes");
    for (const auto& b : h.boxes) {
      const int r = global.ndim() - 2, c = r + 1;
      tiles.insert({b.global_offset[r], b.global_offset[c], b.shape[r], b.shape[c]});
    }
  }
  if (batched && holders[0].local_shape[0] == 0) return;  // no experts here: nothing to tile
  int64_t area = 0;
  for (const auto& t : tiles) area += t[2] * t[3];
  LOOM_CHECK(area == rows * cols, DistError, "Muon sharding: the holders of '", name, "' hold ", area, " of the ",
             rows * cols, " elements of each ", rows, "x", cols, " matrix; its placement does not tile the matrix "
             "over the ranks that share every other mesh coordinate");
}

}  // namespace

// ---- The layout, as pure arithmetic -------------------------------------------------------------

std::vector<std::string> matrix_split_axes(const ParamPlacement& param, const dist::ParallelDims& dims) {
  const int nd = param.global_shape.ndim();
  std::vector<std::string> axes;
  if (nd != 2 && nd != 3) return axes;
  for (const nn::AxisPlacement& a : param.placement.axes())
    if (a.kind == nn::AxisPlacement::Kind::shard && a.dim >= nd - 2 && axis_size(dims, a.axis) > 1 &&
        std::find(axes.begin(), axes.end(), a.axis) == axes.end())
      axes.push_back(a.axis);
  return axes;
}

std::vector<int> holder_ranks(const dist::ParallelDims& dims, const std::vector<std::string>& axes, int rank) {
  std::set<int> ranks{rank};
  for (bool grew = true; grew;) {  // closure: a holder's holders along any axis are holders too
    grew = false;
    for (const std::string& axis : axes)
      for (int q : std::vector<int>(ranks.begin(), ranks.end()))
        for (int r : dims.group_ranks(axis, q)) grew = ranks.insert(r).second || grew;
  }
  return {ranks.begin(), ranks.end()};
}

OwnerPlan plan_owners(const dist::ParallelDims& dims, const std::vector<std::vector<std::string>>& split_axes,
                      const std::vector<double>& work) {
  LOOM_CHECK(split_axes.size() == work.size(), ValueError, "plan_owners: ", split_axes.size(), " matrices but ",
             work.size(), " work estimates");
  const int world = dims.world_size();
  // The holder groups of each distinct axis set partition the world.
  std::map<std::string, std::vector<std::vector<int>>> partitions;
  for (const auto& axes : split_axes) {
    auto& groups = partitions[axes_key(axes)];
    if (!groups.empty()) continue;
    std::vector<bool> seen(static_cast<size_t>(world), false);
    for (int r = 0; r < world; ++r) {
      if (seen[static_cast<size_t>(r)]) continue;
      groups.push_back(holder_ranks(dims, axes, r));
      for (int q : groups.back()) seen[static_cast<size_t>(q)] = true;
    }
  }
  OwnerPlan plan;
  std::vector<double> item_work;
  std::vector<std::vector<int>> candidates;
  for (size_t j = 0; j < split_axes.size(); ++j) {
    plan.groups.emplace_back();
    for (const auto& ranks : partitions[axes_key(split_axes[j])]) {
      plan.groups.back().push_back({ranks, -1});
      item_work.push_back(work[j]);
      candidates.push_back(ranks);
    }
  }
  const OwnerAssignment a = assign_owners(item_work, candidates, world);
  size_t item = 0;
  for (auto& groups : plan.groups)
    for (auto& g : groups) g.owner = a.owner[item++];
  plan.load = a.load;
  return plan;
}

// ---- PlacementMuonSharding ------------------------------------------------------------------------

PlacementMuonSharding::PlacementMuonSharding(std::shared_ptr<dist::DeviceMesh> mesh, std::vector<ParamPlacement> params)
    : mesh_(std::move(mesh)) {
  LOOM_CHECK(mesh_ != nullptr, ValueError, "Muon sharding: the device mesh is null");
  for (auto& p : params) {
    const std::string name = p.name;
    params_.emplace(name, std::move(p));
  }
}

std::shared_ptr<PlacementMuonSharding> PlacementMuonSharding::of_module(nn::Module& module,
                                                                        std::shared_ptr<dist::DeviceMesh> mesh) {
  std::vector<ParamPlacement> params;
  for (auto& [name, p] : module.named_parameters()) params.push_back({name, p->global_shape, p->placement});
  return std::make_shared<PlacementMuonSharding>(std::move(mesh), std::move(params));
}

const ParamPlacement& PlacementMuonSharding::find(const std::string& name) const {
  auto it = params_.find(name);
  LOOM_CHECK(it != params_.end(), ValueError, "Muon sharding: no parameter named '", name,
             "' in the model; the optimizer must be built over the model's own parameters");
  return it->second;
}

ShardLayout PlacementMuonSharding::layout(const std::string& name) const {
  const ParamPlacement& p = find(name);
  ShardLayout l;
  l.global_shape = p.global_shape;
  for (const nn::Piece& piece : p.placement.pieces(p.global_shape))
    l.boxes.push_back({piece.local_offset, piece.global_offset, piece.shape});
  l.split_matrices = !matrix_split_axes(p, mesh_->dims()).empty();
  return l;
}

void PlacementMuonSharding::make_groups(const std::vector<std::vector<std::string>>& axes) {
  // Splitting is collective over the world: every rank creates every axis set any rank uses,
  // in one order (a rank whose parameters never use a set still joins its group).
  std::set<std::string> mine;
  for (const auto& a : axes) mine.insert(axes_key(a));
  std::set<std::string> keys;
  for (const std::string& s : dist::all_gather_strings(mesh_->world(), join({mine.begin(), mine.end()}, ',')))
    for (const std::string& key : split(s, ',')) keys.insert(key);
  for (const std::string& key : keys) {
    const std::vector<int> ranks = holder_ranks(mesh_->dims(), split(key, '+'), mesh_->rank());
    groups_[key] = std::shared_ptr<dist::ProcessGroup>(mesh_->world().split_subgroup("muon:" + key, ranks));
  }
}

void PlacementMuonSharding::exchange_layouts(const std::vector<std::string>& keys) {
  for (const auto& [key, group] : groups_) {
    std::vector<size_t> planned;
    std::vector<std::string> names;
    std::vector<int64_t> words;
    for (size_t j = 0; j < matrices_.size(); ++j) {
      if (keys[j] != key) continue;
      planned.push_back(j);
      names.push_back(matrices_[j].name);
      const ParamPlacement& p = find(matrices_[j].name);
      encode(words, p.placement.local_shape(p.global_shape), layout(p.name).boxes);
    }
    const std::string listed = join(names, ',');
    const std::vector<std::string> everyone = dist::all_gather_strings(*group, listed);
    for (size_t m = 0; m < everyone.size(); ++m)
      LOOM_CHECK(everyone[m] == listed, DistError, "Muon sharding: rank ", group->members()[m],
                 " splits the matrices [", everyone[m], "] over mesh axes ", key, " but rank ", mesh_->rank(),
                 " splits [", listed, "]; every rank must build Muon over the same parameters and placements");
    const std::vector<std::vector<int64_t>> all = all_gather_words(*group, words);
    std::vector<size_t> cursor(all.size(), 0);
    for (size_t j : planned) {
      Planned& p = matrices_[j];
      std::vector<Decoded> holders;
      for (size_t m = 0; m < all.size(); ++m) holders.push_back(decode(all[m], cursor[m]));
      check_holders(p.name, find(p.name).global_shape, holders);
      for (auto& h : holders) {
        p.largest = std::max(p.largest, h.local_shape.numel());
        p.holders.push_back({h.local_shape, std::move(h.boxes)});
      }
    }
  }
}

void PlacementMuonSharding::plan(const std::vector<SplitMatrix>& matrices, MuonCommStrategy strategy) {
  LOOM_CHECK(matrices_.empty() && groups_.empty(), ValueError, "Muon sharding: plan() runs once, when Muon is built");
  strategy_ = strategy;
  const dist::ParallelDims& dims = mesh_->dims();
  std::vector<std::vector<std::string>> axes;
  std::vector<std::string> keys;
  std::vector<double> work;
  for (const SplitMatrix& m : matrices) {
    const ParamPlacement& p = find(m.name);
    axes.push_back(matrix_split_axes(p, dims));
    LOOM_CHECK(!axes.back().empty(), ValueError, "Muon sharding: '", m.name,
               "' was planned as split but its placement keeps whole matrices on every rank");
    keys.push_back(axes_key(axes.back()));
    work.push_back(m.work);
  }
  make_groups(axes);
  for (size_t j = 0; j < matrices.size(); ++j) {
    const ParamPlacement& p = find(matrices[j].name);
    const Shape& g = p.global_shape;
    const Shape local = p.placement.local_shape(g);
    Planned planned;
    planned.name = p.name;
    planned.group = groups_.at(keys[j]);
    planned.whole = g.ndim() == 3 ? Shape{local[0], g[1], g[2]} : Shape{1, g[0], g[1]};
    matrices_.push_back(std::move(planned));
  }
  exchange_layouts(keys);
  if (strategy_ != MuonCommStrategy::allgather_deredundency) return;
  const OwnerPlan owners = plan_owners(dims, axes, work);
  for (size_t j = 0; j < matrices_.size(); ++j) {
    const std::vector<int>& members = matrices_[j].group->members();
    for (const HolderGroup& g : owners.groups[j]) {
      if (g.ranks != members) continue;
      matrices_[j].owner = static_cast<int>(std::find(members.begin(), members.end(), g.owner) - members.begin());
    }
    LOOM_CHECK(matrices_[j].owner >= 0 && matrices_[j].owner < static_cast<int>(members.size()), DistError,
               "Muon sharding: no owner among the holders of '", matrices_[j].name, "'");
  }
}

void PlacementMuonSharding::orthogonalize(std::vector<SplitUpdate>& updates, const WholeMatrixNs& ns) {
  for (size_t i = 0; i < updates.size(); ++i) {
    const SplitUpdate& u = updates[i];
    LOOM_CHECK(u.matrix < matrices_.size() && (i == 0 || u.matrix > updates[i - 1].matrix), ValueError,
               "Muon sharding: updates must name planned matrices in ascending order");
    const Planned& p = matrices_[u.matrix];
    const Holder& mine = p.holders[static_cast<size_t>(p.group->rank())];
    LOOM_CHECK(u.local.dtype() == DType::f32 && u.local.is_contiguous() && u.local.shape() == mine.local_shape,
               ShapeError, "Muon sharding: the update of '", p.name, "' is ", u.local.shape().str(), " ",
               dtype_name(u.local.dtype()), "; this rank holds a contiguous float32 ", mine.local_shape.str());
  }
  if (strategy_ == MuonCommStrategy::allgather)
    for (SplitUpdate& u : updates) gather_whole(matrices_[u.matrix], u.local, u.matrix, ns);
  else
    via_owners(updates, ns);
}

void PlacementMuonSharding::gather_whole(const Planned& p, const Tensor& local, size_t matrix,
                                         const WholeMatrixNs& ns) {
  dist::ProcessGroup& g = *p.group;
  const int64_t n = g.size();
  Tensor send = Tensor::zeros({p.largest}, DType::bf16);
  if (local.numel() > 0) send.narrow(0, 0, local.numel()).copy_(local.view({local.numel()}));
  Tensor all = Tensor::empty({n * p.largest}, DType::bf16);
  g.all_gather(send, all);
  Tensor whole = Tensor::empty(p.whole, DType::bf16);
  for (int64_t m = 0; m < n; ++m) {
    const Holder& h = p.holders[static_cast<size_t>(m)];
    if (h.boxes.empty()) continue;
    place(whole, all.narrow(0, m * p.largest, h.local_shape.numel()).view(as_batch(h.local_shape)), h.boxes);
  }
  Tensor whole32 = whole.to(DType::f32);
  ns(matrix, whole32);
  Tensor mine = local.view(as_batch(local.shape()));
  take(mine, whole32, p.holders[static_cast<size_t>(g.rank())].boxes);
}

void PlacementMuonSharding::via_owners(std::vector<SplitUpdate>& updates, const WholeMatrixNs& ns) {
  auto span_of = [](const Tensor& t) { return std::span<bf16>(t.data<bf16>(), static_cast<size_t>(t.numel())); };
  auto owns = [this](const SplitUpdate& u) { return matrices_[u.matrix].group->rank() == matrices_[u.matrix].owner; };
  // 1. Every holder's U reaches its owner, matrix by matrix.
  std::vector<Tensor> whole(updates.size());
  for (size_t i = 0; i < updates.size(); ++i) {
    const Planned& p = matrices_[updates[i].matrix];
    const Tensor& local = updates[i].local;
    dist::ProcessGroup& g = *p.group;
    const Holder& mine = p.holders[static_cast<size_t>(g.rank())];
    if (!owns(updates[i])) {
      if (!mine.boxes.empty()) g.send(std::span<const bf16>(span_of(local.to(DType::bf16))), p.owner, kMuonTag);
      continue;
    }
    whole[i] = Tensor::empty(p.whole, DType::bf16);
    place(whole[i], local.to(DType::bf16).view(as_batch(local.shape())), mine.boxes);
    for (int m = 0; m < g.size(); ++m) {
      const Holder& h = p.holders[static_cast<size_t>(m)];
      if (m == p.owner || h.boxes.empty()) continue;
      Tensor theirs = Tensor::empty(as_batch(h.local_shape), DType::bf16);
      g.recv(span_of(theirs), m, kMuonTag);
      place(whole[i], theirs, h.boxes);
    }
  }
  // 2. Each owner orthogonalises its matrices, every rank at the same time.
  for (size_t i = 0; i < updates.size(); ++i) {
    if (!owns(updates[i])) continue;
    whole[i] = whole[i].to(DType::f32);
    ns(updates[i].matrix, whole[i]);
  }
  // 3. The slices go back in the same order; the owner keeps its own.
  for (size_t i = 0; i < updates.size(); ++i) {
    const Planned& p = matrices_[updates[i].matrix];
    Tensor local = updates[i].local;
    dist::ProcessGroup& g = *p.group;
    const Holder& mine = p.holders[static_cast<size_t>(g.rank())];
    if (!owns(updates[i])) {
      if (mine.boxes.empty()) continue;
      Tensor back = Tensor::empty(local.shape(), DType::bf16);
      g.recv(span_of(back), p.owner, kMuonTag);
      local.copy_(back);
      continue;
    }
    const Tensor result = whole[i].to(DType::bf16);  // exact: Newton–Schulz leaves bf16 values
    for (int m = 0; m < g.size(); ++m) {
      const Holder& h = p.holders[static_cast<size_t>(m)];
      if (m == p.owner || h.boxes.empty()) continue;
      Tensor slice = Tensor::empty(as_batch(h.local_shape), DType::bf16);
      take(slice, result, h.boxes);
      g.send(std::span<const bf16>(span_of(slice)), m, kMuonTag);
    }
    Tensor out = local.view(as_batch(local.shape()));
    take(out, whole[i], mine.boxes);
  }
}

const std::string& PlacementMuonSharding::name(size_t matrix) const {
  LOOM_CHECK(matrix < matrices_.size(), ValueError, "Muon sharding: matrix ", matrix, " was not planned");
  return matrices_[matrix].name;
}

std::vector<int> PlacementMuonSharding::holders(size_t matrix) const {
  LOOM_CHECK(matrix < matrices_.size(), ValueError, "Muon sharding: matrix ", matrix, " was not planned");
  return matrices_[matrix].group->members();
}

int PlacementMuonSharding::owner(size_t matrix) const {
  LOOM_CHECK(matrix < matrices_.size(), ValueError, "Muon sharding: matrix ", matrix, " was not planned");
  const Planned& p = matrices_[matrix];
  return p.owner < 0 ? -1 : p.group->members()[static_cast<size_t>(p.owner)];
}

dist::CommStats PlacementMuonSharding::comm_stats() const {
  dist::CommStats total;
  for (const auto& [key, g] : groups_) total += g->stats();
  return total;
}

void PlacementMuonSharding::reset_comm_stats() {
  for (auto& [key, g] : groups_) g->reset_stats();
}

}  // namespace loom::optim
