#include "loom/plan/sweep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <tuple>

#include "plan_test_util.h"

namespace loom::plan {
namespace {

using testing::tiny_yaml;

std::tuple<int, int, int, int, int, int, int> key(const Candidate& c) {
  return {c.dp_replicate, c.dp_shard, c.tp, c.cp, c.pp, c.v, c.ep};
}

TEST(Sweep, CandidatesAreEveryFactorisationWithEveryInterleaveAndExpertDegree) {
  // Brute force over every degree 1..N: the sweep must list exactly the tuples whose product is
  // N, v <= max(1, layers / pp) (v = 1 without pipelining), ep dividing dp_shard·cp·tp and the experts.
  const int N = 12, layers = 6, experts = 4;
  std::set<std::tuple<int, int, int, int, int, int, int>> expected;
  for (int r = 1; r <= N; ++r)
    for (int s = 1; s <= N; ++s)
      for (int t = 1; t <= N; ++t)
        for (int c = 1; c <= N; ++c)
          for (int p = 1; p <= N; ++p) {
            if (r * s * t * c * p != N) continue;
            for (int v = 1; v <= (p > 1 ? std::max(1, layers / p) : 1); ++v)
              for (int e = 1; e <= N; ++e)
                if ((s * c * t) % e == 0 && (e == 1 || experts % e == 0)) expected.insert({r, s, t, c, p, v, e});
          }
  std::set<std::tuple<int, int, int, int, int, int, int>> got;
  for (const Candidate& c : sweep_candidates(N, layers, experts)) EXPECT_TRUE(got.insert(key(c)).second);
  EXPECT_EQ(got, expected);
}

TEST(Sweep, KeepsExactlyTheLayoutsTheConfigurationAcceptsThatFitSortedByStepTime) {
  const config::LoadedConfig loaded = testing::load(tiny_yaml(), 1);
  const DeviceProfile device = device_profile("h100");
  const SweepResult r = sweep(loaded.config, 8, device, device.memory_bytes);
  EXPECT_EQ(r.candidates, sweep_candidates(8, 4, 0).size());
  // 4 heads / 2 KV heads: tp 8 is refused by the configuration rules, so not every candidate is valid.
  EXPECT_LT(r.valid, r.candidates);
  EXPECT_GT(r.valid, 0u);
  EXPECT_EQ(r.fitting.size(), r.valid);  // a tiny model fits an H100 in every layout
  for (size_t i = 1; i < r.fitting.size(); ++i) EXPECT_LE(r.fitting[i - 1].step_time_s, r.fitting[i].step_time_s);
  for (const Plan& p : r.fitting) EXPECT_LE(p.dims.tp(), 4);
  // A memory budget below the smallest peak keeps nothing.
  EXPECT_TRUE(sweep(loaded.config, 8, device, 1024).fitting.empty());
}

}  // namespace
}  // namespace loom::plan
