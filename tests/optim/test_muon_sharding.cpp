// Muon under sharding, the parts that need no processes (MindFormers' muon.py comm_strategy): the
// Newton–Schulz work estimate, the longest-processing-time owner assignment, and Muon's own side
// of a split matrix — global shape for the schema and scales, whole-matrix Newton–Schulz, each
// rank scaling and applying only its slice — driven through a one-process MuonSharding that
// plays the other holders.
#include <gtest/gtest.h>

#include <bit>

#include "loom/core/error.h"
#include "loom/kernels/kernel_table.h"
#include "loom/optim/muon.h"
#include "loom/optim/muon_sharding.h"
#include "optim_test_util.h"

using namespace loom;
using namespace loom::optim;
using namespace loom::optim::testing;

namespace {

// Holds rows [row0, row0 + rows) of one global matrix. The other holders' part of U comes from
// the whole gradient the test hands it, through a whole-matrix momentum it keeps itself: what
// the other ranks would contribute.
class RowSliceSharding : public MuonSharding {
 public:
  RowSliceSharding(std::string name, Shape global, int64_t row0, int64_t rows)
      : name_(std::move(name)), global_(global), row0_(row0), rows_(rows),
        momentum_(Tensor::zeros(global)) {}

  ShardLayout layout(const std::string& name) const override {
    if (name != name_) return ShardLayout::whole(Shape{});
    ShardLayout l;
    l.global_shape = global_;
    l.boxes.push_back({{0, 0}, {row0_, 0}, Shape{rows_, global_[1]}});
    l.split_matrices = true;
    return l;
  }
  void plan(const std::vector<SplitMatrix>& matrices, MuonCommStrategy strategy) override {
    planned = matrices;
    planned_strategy = strategy;
  }
  void orthogonalize(std::vector<SplitUpdate>& updates, const WholeMatrixNs& ns) override {
    ASSERT_EQ(updates.size(), 1u);
    Tensor full = Tensor::empty(global_);
    kernels::for_tensor(full, "test").muon_momentum(momentum_, whole_grad, 0.95f, true, full);
    // The kernel only reads the momentum; Muon's write pass stores it (here on a scratch master).
    Tensor scratch = Tensor::zeros(global_);
    kernels::for_tensor(full, "test").muon_apply(scratch, momentum_, whole_grad, 0.95f, Tensor::zeros(global_), 1.f);
    // This rank's rows of U are the whole matrix's rows: Muon computed them on its own shard.
    EXPECT_EQ(updates[0].local.to_float_vector(), full.narrow(0, row0_, rows_).contiguous().to_float_vector());
    Tensor batch = full.view({1, global_[0], global_[1]});
    ns(updates[0].matrix, batch);
    updates[0].local.copy_(full.narrow(0, row0_, rows_));
  }

  Tensor whole_grad;
  std::vector<SplitMatrix> planned;
  MuonCommStrategy planned_strategy = MuonCommStrategy::allgather;

 private:
  std::string name_;
  Shape global_;
  int64_t row0_, rows_;
  Tensor momentum_;
};

MuonModelInfo mla(MlaDims dims) {
  MuonModelInfo info;
  info.multi_latent_attention = true;
  info.mla = dims;
  return info;
}

void expect_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i])) << what << " [" << i << "]";
}

}  // namespace

// MindFormers' _estimate_ns_work_for_shape: batch · Σ_pieces (ns_steps·(2·L·s² + s³) + a·b),
// s = min, L = max.
TEST(MuonSharding, NewtonSchulzWorkEstimate) {
  const std::vector<MuonBlock> blocks{{0, 4, 0, 10}, {4, 6, 0, 10}};
  const double piece0 = 5 * (2.0 * 10 * 4 * 4 + 4 * 4 * 4) + 40;
  const double piece1 = 5 * (2.0 * 10 * 6 * 6 + 6 * 6 * 6) + 60;
  EXPECT_DOUBLE_EQ(newton_schulz_work(blocks, 1, 5), piece0 + piece1);
  EXPECT_DOUBLE_EQ(newton_schulz_work(blocks, 3, 5), 3 * (piece0 + piece1));
  // Orientation does not matter: a tall piece costs what its transpose costs.
  EXPECT_DOUBLE_EQ(newton_schulz_work({{0, 10, 0, 4}}, 1, 5), piece0);
}

// Largest first, each to the least loaded candidate; equal work keeps index order, equal loads
// go to the lowest rank.
TEST(MuonSharding, LongestProcessingTimeGreedy) {
  const std::vector<std::vector<int>> both(6, {0, 1});
  OwnerAssignment a = assign_owners({7, 5, 4, 3, 3, 2}, both, 2);
  EXPECT_EQ(a.owner, (std::vector<int>{0, 1, 1, 0, 1, 0}));
  EXPECT_EQ(a.load, (std::vector<double>{12, 12}));
  // Candidates restrict the choice: an item only rank 2 holds goes there, however loaded.
  OwnerAssignment b = assign_owners({1, 9, 1}, {{0, 1, 2}, {2}, {1, 2}}, 3);
  EXPECT_EQ(b.owner, (std::vector<int>{0, 2, 1}));
  EXPECT_EQ(b.load, (std::vector<double>{1, 1, 9}));
  EXPECT_THROW(assign_owners({1}, {{3}}, 2), ValueError);
  EXPECT_THROW(assign_owners({1}, {{}}, 2), ValueError);
  EXPECT_THROW(assign_owners({1, 2}, {{0}}, 2), ValueError);
}

TEST(MuonSharding, CommStrategyNames) {
  EXPECT_EQ(parse_muon_comm_strategy("allgather"), MuonCommStrategy::allgather);
  EXPECT_EQ(parse_muon_comm_strategy("allgather_deredundency"), MuonCommStrategy::allgather_deredundency);
  EXPECT_STREQ(muon_comm_strategy_name(MuonCommStrategy::allgather_deredundency), "allgather_deredundency");
  EXPECT_THROW(parse_muon_comm_strategy("allgather_deredundancy"), ConfigError);
}

// A rank holding rows 4..8 of linear_qb [10, 2] (2 heads of q_nope 3 + q_pe 2 rows: the slice
// cuts head 0's q_pe piece and holds head 1's two pieces, whose scales sqrt(3) and sqrt(2)
// differ). Three steps must leave exactly the rows the whole-matrix Muon leaves.
TEST(MuonSharding, SliceOfASplitMatrixFollowsTheWholeMatrix) {
  const char* name = "decoder.layers.0.self_attention.linear_qb.weight";
  const MlaDims dims{2, 3, 2, 4, 8};
  const int64_t rows = 10, cols = 2, row0 = 4, local_rows = 5;
  const std::vector<float> w0 = random_values(rows * cols, 81);
  Tensor whole = make_param(w0, {rows, cols});
  Tensor slice = make_param(std::vector<float>(w0.begin() + row0 * cols, w0.begin() + (row0 + local_rows) * cols),
                            {local_rows, cols});
  MuonOptions o;
  o.comm_strategy = "allgather_deredundency";
  auto sharding = std::make_shared<RowSliceSharding>(name, Shape{rows, cols}, row0, local_rows);
  Muon one({{name, whole}}, o, mla(dims));
  Muon sharded({{name, slice}}, o, mla(dims), false, {}, sharding);
  ASSERT_EQ(sharding->planned.size(), 1u);
  EXPECT_EQ(sharding->planned[0].name, name);
  // The plan's work is the whole matrix's four pieces, not the slice's.
  EXPECT_DOUBLE_EQ(sharding->planned[0].work,
                   newton_schulz_work({{0, 3, 0, 2}, {3, 2, 0, 2}, {5, 3, 0, 2}, {8, 2, 0, 2}}, 1, 5));
  EXPECT_EQ(sharding->planned_strategy, MuonCommStrategy::allgather_deredundency);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> g = random_values(rows * cols, 90 + step);
    set_grad(whole, g);
    set_grad(slice, std::vector<float>(g.begin() + row0 * cols, g.begin() + (row0 + local_rows) * cols));
    sharding->whole_grad = Tensor::from_vector(g, {rows, cols});
    one.step_with_lr(0.05);
    sharded.step_with_lr(0.05);
    expect_bits(slice.to_float_vector(), whole.narrow(0, row0, local_rows).contiguous().to_float_vector(),
                "step " + std::to_string(step + 1));
    EXPECT_EQ(sharded.last_step_stats().ns_matrices, 1);  // the whole matrix, once here
  }
  // The momentum stays the slice's own (every rank keeps its shard of muon_m).
  expect_bits(sharded.state_dict().at(std::string("muon_m.") + name).to_float_vector(),
              one.state_dict().at(std::string("muon_m.") + name).narrow(0, row0, local_rows).contiguous().to_float_vector(),
              "muon_m");
}
