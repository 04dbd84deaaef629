// Philox streams: known-answer test, independence from thread count and from how a tensor is
// split into shards.
#include <gtest/gtest.h>

#include <cmath>

#include "loom/core/parallel.h"
#include "loom/core/rng.h"

using namespace loom;

TEST(Rng, PhiloxKnownAnswer) {
  // Random123 known-answer test for philox4x32-10: counter = key = 0.
  auto r = philox4x32(0, 0, 0);
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

TEST(Rng, SameNumbersForAnyThreadCount) {
  const int saved = num_threads();
  Tensor a = Tensor::empty({100003}), b = Tensor::empty({100003});
  set_num_threads(1);
  fill_normal(a, 0.0, 1.0, RngState{42, 7, 0});
  set_num_threads(2);
  fill_normal(b, 0.0, 1.0, RngState{42, 7, 0});
  set_num_threads(saved);
  EXPECT_EQ(a.to_float_vector(), b.to_float_vector());
}

TEST(Rng, ShardInitMatchesTheWholeTensor) {
  // Initialising rows [3, 7) alone with first_index = 3*cols gives exactly those rows of the
  // whole-tensor init: sharded parameters get the same values as on one process.
  Tensor whole = Tensor::empty({10, 13});
  fill_normal(whole, 0.0, 0.02, RngState{1, stream_id("decoder.layers.0.mlp.linear_fc1.weight"), 0});
  Tensor shard = Tensor::empty({4, 13});
  fill_normal(shard, 0.0, 0.02, RngState{1, stream_id("decoder.layers.0.mlp.linear_fc1.weight"), 0}, 3 * 13);
  EXPECT_EQ(shard.to_float_vector(), whole.narrow(0, 3, 4).contiguous().to_float_vector());
}

TEST(Rng, MomentsAreRight) {
  Tensor n = Tensor::empty({200000}, DType::f64), u = Tensor::empty({200000}, DType::f64);
  fill_normal(n, 1.0, 2.0, RngState{3, 1, 0});
  fill_uniform(u, -1.0, 3.0, RngState{3, 2, 0});
  auto nv = n.to_double_vector(), uv = u.to_double_vector();
  double mean = 0, var = 0, umin = 1e9, umax = -1e9, umean = 0;
  for (double v : nv) mean += v;
  mean /= nv.size();
  for (double v : nv) var += (v - mean) * (v - mean);
  var /= nv.size();
  for (double v : uv) { umin = std::min(umin, v); umax = std::max(umax, v); umean += v; }
  umean /= uv.size();
  EXPECT_NEAR(mean, 1.0, 0.02);
  EXPECT_NEAR(std::sqrt(var), 2.0, 0.02);
  EXPECT_GT(umin, -1.0);
  EXPECT_LE(umax, 3.0);
  EXPECT_NEAR(umean, 1.0, 0.02);
}

TEST(Rng, GeneratorAdvancesAndReplays) {
  Generator g(5, 9);
  Tensor a = Tensor::empty({10}), b = Tensor::empty({10});
  RngState start = g.state();
  normal_(a, 0, 1, g);
  normal_(b, 0, 1, g);
  EXPECT_NE(a.to_float_vector(), b.to_float_vector());
  g.set_state(start);
  Tensor c = Tensor::empty({10});
  normal_(c, 0, 1, g);
  EXPECT_EQ(a.to_float_vector(), c.to_float_vector());
}
