// Placements (loom/nn/placement.h): local shapes and pieces of composed shards (block-sharded
// fused tensors, a second strategy sharding the local tensor again), and the two things every
// layout relies on: a slice initialised alone gets the whole tensor's numbers at its positions,
// and whole tensors load into the pieces a rank owns.
#include <gtest/gtest.h>

#include "loom/nn/linear.h"

using namespace loom;
using namespace loom::nn;

namespace {

// fc1 of a gated MLP with ffn 4: rows 0..3 gate, 4..7 up; tensor-parallel rank `r` of 2 holds
// gate rows [2r, 2r+2) and up rows [4+2r, 4+2r+2), like the two separate tensors it fuses.
AxisPlacement fc1_rank(int r) { return AxisPlacement::shard("tp", 0, {{2 * r, 2}, {4 + 2 * r, 2}}); }

std::vector<int64_t> v(std::initializer_list<int64_t> x) { return x; }

class Fused : public Module {
 public:
  Fused() : Module("Fused") {
    LinearOptions o;
    o.init = Init::normal(1.0);
    fc1 = register_module("fc1", std::make_shared<Linear>(3, 8, o));
  }
  std::shared_ptr<Linear> fc1;
};

// The local slice of the whole tensor `full` that `p` owns, assembled from its pieces.
Tensor gather_pieces(const Tensor& full, const Parameter& p) {
  Tensor out = Tensor::zeros(p.local_shape(), full.dtype());
  for (const Piece& piece : p.pieces()) {
    Tensor dst = out, src = full;
    for (int d = 0; d < piece.shape.ndim(); ++d) {
      dst = dst.narrow(d, piece.local_offset[static_cast<size_t>(d)], piece.shape[d]);
      src = src.narrow(d, piece.global_offset[static_cast<size_t>(d)], piece.shape[d]);
    }
    dst.copy_(src);
  }
  return out;
}

void expect_equal(const Tensor& a, const Tensor& b) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.contiguous().to_float_vector(), y = b.contiguous().to_float_vector();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], y[i]) << "element " << i;
}

}  // namespace

TEST(Placement, NothingShardedIsOneWholePiece) {
  Placement p;
  const auto pieces = p.pieces({4, 3});
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].global_offset, v({0, 0}));
  EXPECT_EQ(pieces[0].shape, Shape({4, 3}));
  EXPECT_EQ(p.local_shape({4, 3}), Shape({4, 3}));
  EXPECT_FALSE(p.is_sharded());
  EXPECT_EQ(Placement().pieces(Shape{}).size(), 1u);  // a scalar is one element
}

TEST(Placement, BlockShardOfAFusedTensorGivesOnePiecePerBlock) {
  Placement p;
  p.add({8, 3}, fc1_rank(1));
  EXPECT_EQ(p.local_shape({8, 3}), Shape({4, 3}));
  const auto pieces = p.pieces({8, 3});
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].local_offset, v({0, 0}));
  EXPECT_EQ(pieces[0].global_offset, v({2, 0}));
  EXPECT_EQ(pieces[1].local_offset, v({2, 0}));
  EXPECT_EQ(pieces[1].global_offset, v({6, 0}));
  EXPECT_EQ(pieces[1].shape, Shape({2, 3}));
}

TEST(Placement, AnOuterShardSplitsTheLocalTensorAgain) {
  // TP inside (blocks), FSDP outside: FSDP rank 0 of 2 holds local rows [0, 2) = gate rows 2..3
  // only; an uneven 3-row FSDP block straddles the gate/up boundary and gives two pieces.
  Placement even;
  even.add({8, 3}, fc1_rank(1));
  even.add({8, 3}, AxisPlacement::shard("fsdp", 0, {{0, 2}}));
  auto pieces = even.pieces({8, 3});
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].global_offset, v({2, 0}));
  Placement straddling;
  straddling.add({8, 3}, fc1_rank(0));
  straddling.add({8, 3}, AxisPlacement::shard("fsdp", 0, {{1, 3}}));
  pieces = straddling.pieces({8, 3});
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].global_offset, v({1, 0}));  // gate row 1
  EXPECT_EQ(pieces[0].shape, Shape({1, 3}));
  EXPECT_EQ(pieces[1].local_offset, v({1, 0}));
  EXPECT_EQ(pieces[1].global_offset, v({4, 0}));  // up rows 0..1
  EXPECT_EQ(pieces[1].shape, Shape({2, 3}));
  EXPECT_EQ(straddling.local_shape({8, 3}), Shape({3, 3}));
}

TEST(Placement, TwoShardedDimsGiveTheProductOfTheirRuns) {
  // Row-parallel (dim 1) inside, FSDP rows outside: a 2-D shard.
  Placement p;
  p.add({4, 6}, AxisPlacement::shard("tp", 1, {{3, 3}}));
  p.add({4, 6}, AxisPlacement::shard("fsdp", 0, {{2, 2}}));
  const auto pieces = p.pieces({4, 6});
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].global_offset, v({2, 3}));
  EXPECT_EQ(pieces[0].shape, Shape({2, 3}));
}

TEST(Placement, ReplicatedAndPartialAxesDoNotChangeTheLocalTensor) {
  Placement p;
  p.add({5}, AxisPlacement::partial("tp"));
  EXPECT_EQ(p.local_shape({5}), Shape({5}));
  EXPECT_EQ(p.on("tp")->kind, AxisPlacement::Kind::partial);
  EXPECT_EQ(p.on("fsdp"), nullptr);
  EXPECT_EQ(p.pieces({5}).size(), 1u);
  // An empty shard (a rank past the end of uneven rows) holds no piece.
  Placement empty;
  empty.add({5}, AxisPlacement::shard("fsdp", 0, {{5, 0}}));
  EXPECT_TRUE(empty.pieces({5}).empty());
}

TEST(Placement, BadShardsNameTheAxisAndTheExtent) {
  Placement p;
  p.add({8, 3}, fc1_rank(0));
  try {
    p.add({8, 3}, AxisPlacement::shard("fsdp", 0, {{2, 3}}));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("mesh axis 'fsdp' takes indices [2, 5) of dim 0, which holds 4 locally"),
              std::string::npos) << e.what();
  }
  EXPECT_THROW(p.add({8, 3}, AxisPlacement::replicate("tp")), ValueError);  // already placed on tp
  EXPECT_THROW(Placement().add({8, 3}, AxisPlacement::shard("tp", 2, {{0, 1}})), ValueError);
}

TEST(Placement, ASliceInitialisedAloneGetsTheWholeTensorsNumbers) {
  // Philox by global index: the pieces of any layout hold exactly the one-process values.
  Fused whole;
  whole.materialize(11);
  const Tensor full = whole.fc1->weight().tensor;
  for (int r = 0; r < 2; ++r) {
    Fused shard;
    Parameter& w = shard.fc1->weight();
    w.placement.add(w.global_shape, fc1_rank(r));
    w.placement.add(w.global_shape, AxisPlacement::shard("fsdp", 0, {{1, 3}}));
    shard.materialize(11);
    EXPECT_EQ(w.tensor.shape(), Shape({3, 3}));
    expect_equal(w.tensor, gather_pieces(full, w));
  }
  // A column shard: runs shorter than a row.
  Fused cols;
  Parameter& w = cols.fc1->weight();
  w.placement.add(w.global_shape, AxisPlacement::shard("tp", 1, {{1, 2}}));
  cols.materialize(11);
  expect_equal(w.tensor, full.narrow(1, 1, 2));
}

TEST(Placement, WholeTensorsLoadIntoThePiecesARankOwns) {
  Fused whole;
  whole.materialize(3);
  Fused shard;
  Parameter& w = shard.fc1->weight();
  w.placement.add(w.global_shape, fc1_rank(1));
  shard.load_state_dict(whole.state_dict(), true, "whole");
  expect_equal(w.tensor, gather_pieces(whole.fc1->weight().tensor, w));
  EXPECT_EQ(shard.state_dict().at("fc1.weight").shape(), Shape({4, 3}));  // the local tensor
  // The source must hold the global shape.
  auto wrong = whole.state_dict();
  wrong["fc1.weight"] = Tensor::zeros({4, 3});
  try {
    shard.load_state_dict(wrong, true, "wrong");
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("shape mismatch: fc1.weight is [4, 3] in the source but [8, 3] in the model"),
              std::string::npos) << e.what();
  }
}
