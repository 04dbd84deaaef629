// The pipeline schedules' action orders (runtime/pipeline_order.h): the reference's example, and
// for a grid of (p, v, m) a replay of every rank's list against the data dependencies (a forward
// needs the previous virtual stage's forward, a backward the next stage's backward): every list
// runs to the end without a cycle, each micro-batch's forward and backward happen once per
// chunk, backwards go in ascending micro-batch order, and no rank holds more activations than
// the schedule's in-flight bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>

#include "loom/config/parallel_layout.h"
#include "loom/runtime/pipeline_order.h"

namespace loom::runtime {
namespace {

using Kind = PipelineAction::Kind;

std::string render(const std::vector<PipelineAction>& order, int p, int rank) {
  std::string out;
  for (const PipelineAction& a : order)
    out += (out.empty() ? "" : " ") + std::string(a.kind == Kind::forward ? "F" : "B") +
           std::to_string(a.chunk * p + rank) + "." + std::to_string(a.micro_batch);
  return out;
}

TEST(PipelineOrder, MatchesTheReferenceExamples) {
  // The interleaved order of Megatron's schedule table, p = 2, v = 2, m = 4.
  EXPECT_EQ(render(pipeline_order(2, 0, 2, 4), 2, 0),
            "F0.0 F0.1 F2.0 F2.1 F0.2 B2.0 F0.3 B2.1 F2.2 B0.0 F2.3 B0.1 B2.2 B2.3 B0.2 B0.3");
  EXPECT_EQ(render(pipeline_order(2, 1, 2, 4), 2, 1),
            "F1.0 F1.1 F3.0 B3.0 F3.1 B3.1 F1.2 B1.0 F1.3 B1.1 F3.2 B3.2 F3.3 B3.3 B1.2 B1.3");
  // 1F1B (Megatron's non-interleaved schedule): rank r warms up with min(p - r - 1, m) forwards.
  EXPECT_EQ(render(pipeline_order(3, 0, 1, 4), 3, 0), "F0.0 F0.1 F0.2 B0.0 F0.3 B0.1 B0.2 B0.3");
  EXPECT_EQ(render(pipeline_order(3, 2, 1, 4), 3, 2), "F2.0 B2.0 F2.1 B2.1 F2.2 B2.2 F2.3 B2.3");
  EXPECT_EQ(render(pipeline_order(3, 0, 1, 1), 3, 0), "F0.0 B0.0");
}

// Replays every rank's list; returns each rank's peak number of chunk activations in flight. An
// action runs once its input arrived (the previous virtual stage's forward, or the next stage's
// backward, ran). With sends_block, also only once every send this rank posted before it was
// received, i.e. its receiver reached the consuming action (a rank posts an action's receive
// when it reaches the action): the rule PipelineSchedule must not follow, because interleaved
// lists then form a cycle.
std::vector<int64_t> replay(int p, int v, int64_t m, bool sends_block, bool* finished = nullptr,
                            PipelineScheduleKind kind = PipelineScheduleKind::one_f_one_b) {
  using Id = std::tuple<int, int, int64_t>;  // (0 forward / 1 backward, virtual stage, micro)
  std::vector<std::vector<PipelineAction>> orders;
  std::map<Id, size_t> position;
  for (int r = 0; r < p; ++r) {
    orders.push_back(pipeline_order(p, r, v, m, kind));
    for (size_t i = 0; i < orders.back().size(); ++i) {
      const PipelineAction& a = orders.back()[i];
      position[{a.kind == Kind::forward ? 0 : 1, a.chunk * p + r, a.micro_batch}] = i;
    }
  }
  const int last = p * v - 1;
  std::set<Id> done;
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<std::vector<Id>> unmatched_sends(static_cast<size_t>(p));  // consumers of sends in flight
  std::vector<int64_t> live(static_cast<size_t>(p), 0), peak(static_cast<size_t>(p), 0);
  std::map<int, int64_t> last_backward;  // virtual stage -> last micro-batch backed
  auto reached = [&](const Id& consumer) {
    const int rank = std::get<1>(consumer) % p;
    return position.at(consumer) <= next[static_cast<size_t>(rank)];
  };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      auto& i = next[static_cast<size_t>(r)];
      if (i == orders[static_cast<size_t>(r)].size()) continue;
      const PipelineAction& a = orders[static_cast<size_t>(r)][i];
      const int s = a.chunk * p + r;
      const bool forward = a.kind == Kind::forward;
      bool ready = forward ? s == 0 || done.contains({0, s - 1, a.micro_batch})
                           : done.contains({0, s, a.micro_batch}) && (s == last || done.contains({1, s + 1, a.micro_batch}));
      auto& sends = unmatched_sends[static_cast<size_t>(r)];
      if (sends_block) ready = ready && std::all_of(sends.begin(), sends.end(), reached);
      if (!ready) continue;
      sends.clear();
      EXPECT_TRUE(done.insert({forward ? 0 : 1, s, a.micro_batch}).second)
          << "p " << p << " v " << v << " m " << m << ": stage " << s << " micro " << a.micro_batch << " twice";
      if (forward && s < last) sends.push_back({0, s + 1, a.micro_batch});
      if (!forward && s > 0) sends.push_back({1, s - 1, a.micro_batch});
      if (!forward) {
        auto it = last_backward.find(s);
        EXPECT_TRUE(it == last_backward.end() || it->second < a.micro_batch) << "backwards in ascending order";
        last_backward[s] = a.micro_batch;
      }
      live[static_cast<size_t>(r)] += forward ? 1 : -1;
      peak[static_cast<size_t>(r)] = std::max(peak[static_cast<size_t>(r)], live[static_cast<size_t>(r)]);
      ++i;
      progress = true;
    }
  }
  bool all_done = true;
  for (int r = 0; r < p; ++r) all_done = all_done && next[static_cast<size_t>(r)] == orders[static_cast<size_t>(r)].size();
  if (finished) {
    *finished = all_done;
    return peak;
  }
  for (int r = 0; r < p; ++r)
    EXPECT_EQ(next[static_cast<size_t>(r)], orders[static_cast<size_t>(r)].size())
        << "p " << p << " v " << v << " m " << m << ": rank " << r << " is stuck (the lists form a cycle)";
  EXPECT_EQ(static_cast<int64_t>(done.size()), 2 * p * v * m);
  return peak;
}

TEST(PipelineOrder, EveryRunnableCountReplaysWithinTheInFlightBound) {
  for (int p = 2; p <= 5; ++p)
    for (int v = 1; v <= 3; ++v)
      for (int64_t m = 1; m <= 12; ++m) {
        if (!config::interleaved_micro_batch_problem(p, v, m).empty()) continue;
        SCOPED_TRACE("p " + std::to_string(p) + " v " + std::to_string(v) + " m " + std::to_string(m));
        const std::vector<int64_t> peak = replay(p, v, m, /*sends_block=*/false);
        const int64_t rounds = std::max<int64_t>(1, m / p), per_round = m / rounds;
        for (int r = 0; r < p; ++r) {
          // 1F1B: min(p - r, m) micro-batches; interleaved: the warm-up forwards plus the one
          // forward before each steady backward, never all m·v.
          const int64_t bound = v == 1 ? std::min<int64_t>(p - r, m)
                                       : std::min<int64_t>((v - 1) * per_round + 2 * (p - 1 - r) + 1, m * v);
          EXPECT_LE(peak[static_cast<size_t>(r)], bound) << "rank " << r;
        }
        if (v == 1 && m >= p) {
          EXPECT_EQ(peak[0], p);
        }
      }
}

TEST(PipelineOrder, BlockingSendsWouldDeadlockTheInterleavedSchedule) {
  bool finished = true;
  replay(2, 1, 8, /*sends_block=*/true, &finished);
  EXPECT_TRUE(finished) << "1F1B survives blocking sends";
  replay(2, 2, 4, /*sends_block=*/true, &finished);
  EXPECT_FALSE(finished) << "interleaved 1F1B needs its sends in flight";
}

// The bubble of Narayanan et al. 2021 (arXiv 2104.04473): the first rank, which ends the step,
// idles (p - 1)(t_f + t_b) under 1F1B and (p - 1)(t_f + t_b)/v interleaved when each chunk takes
// 1/v of the stage's time; the last rank only waits for the first forward to reach it (and finishes
// before the last backward has travelled back).
TEST(PipelineOrder, ReplayGivesTheBubble) {
  const PipelineReplay one = replay_pipeline(2, 1, 8, {{1.0}, {1.0}}, {{2.0}, {2.0}});
  EXPECT_DOUBLE_EQ(one.finish_s[0], 8 * 3.0 + 3.0);
  EXPECT_DOUBLE_EQ(one.idle_s[0], 3.0);
  EXPECT_DOUBLE_EQ(one.idle_s[1], 1.0);
  const PipelineReplay two = replay_pipeline(2, 2, 8, {{0.5, 0.5}, {0.5, 0.5}}, {{1.0, 1.0}, {1.0, 1.0}});
  EXPECT_DOUBLE_EQ(two.idle_s[0], 1.5);
  EXPECT_DOUBLE_EQ(two.idle_s[1], 0.5);
}

// GPipe: all forwards, then all backwards in micro-batch order. It runs any count, even with
// blocking sends, holds all m micro-batches on every rank, and has 1F1B's bubble.
TEST(PipelineOrder, GpipeRunsEveryForwardFirst) {
  EXPECT_EQ(render(pipeline_order(3, 1, 1, 3, PipelineScheduleKind::gpipe), 3, 1), "F1.0 F1.1 F1.2 B1.0 B1.1 B1.2");
  for (int p = 2; p <= 5; ++p)
    for (int64_t m = 1; m <= 12; ++m) {
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      const std::vector<int64_t> peak = replay(p, 1, m, /*sends_block=*/false, nullptr, PipelineScheduleKind::gpipe);
      for (int r = 0; r < p; ++r) EXPECT_EQ(peak[static_cast<size_t>(r)], m) << "rank " << r;
      bool finished = false;
      replay(p, 1, m, /*sends_block=*/true, &finished, PipelineScheduleKind::gpipe);
      EXPECT_TRUE(finished);
    }
  const PipelineReplay g = replay_pipeline(2, 1, 8, {{1.0}, {1.0}}, {{2.0}, {2.0}}, PipelineScheduleKind::gpipe);
  EXPECT_DOUBLE_EQ(g.finish_s[0], 8 * 3.0 + 3.0);
  EXPECT_DOUBLE_EQ(g.idle_s[0], 3.0);
  EXPECT_DOUBLE_EQ(g.idle_s[1], 1.0);
}

// overlap_b_f: each backward the order follows with a forward runs with it as one step (the
// steady state's pairs, backward first); the steps of every runnable count replay without a
// cycle (a step waits for both inputs and sends both outputs at its end).
TEST(PipelineOrder, OverlapPairsEachBackwardWithTheNextForward) {
  const std::vector<PipelineAction> order = pipeline_order(2, 0, 1, 4);  // F0 F1 B0 F2 B1 F3 B2 B3
  const std::vector<std::vector<size_t>> want = {{0}, {1}, {2, 3}, {4, 5}, {6}, {7}};
  EXPECT_EQ(pipeline_steps(order, true), want);
  EXPECT_EQ(pipeline_steps(order, false).size(), order.size());
  for (int p = 2; p <= 5; ++p)
    for (int v = 1; v <= 3; ++v)
      for (int64_t m = 1; m <= 12; ++m) {
        if (!config::interleaved_micro_batch_problem(p, v, m).empty()) continue;
        SCOPED_TRACE("p " + std::to_string(p) + " v " + std::to_string(v) + " m " + std::to_string(m));
        const std::vector<std::vector<double>> f(static_cast<size_t>(p), std::vector<double>(static_cast<size_t>(v), 1.0));
        const std::vector<std::vector<double>> b(static_cast<size_t>(p), std::vector<double>(static_cast<size_t>(v), 2.0));
        EXPECT_NO_THROW(replay_pipeline(p, v, m, f, b, PipelineScheduleKind::one_f_one_b, true));
        for (int r = 0; r < p; ++r) {
          const std::vector<PipelineAction> o = pipeline_order(p, r, v, m);
          for (const std::vector<size_t>& step : pipeline_steps(o, true))
            if (step.size() == 2) {
              EXPECT_EQ(o[step[0]].kind, Kind::backward);
              EXPECT_EQ(o[step[1]].kind, Kind::forward);
            }
        }
      }
}

// Replay costs: a receive posted when its step starts copies after both the producer's end and
// the receiver's previous step (rendezvous); bookkeeping per action and the tail count as idle.
TEST(PipelineOrder, ReplayAddsMeasuredCosts) {
  PipelineReplayCosts costs;
  costs.transfer_s = 0.5;
  costs.action_overhead_s = {0.1, 0.1};
  costs.tail_s = {0.2, 0.2};
  // rank 0 F 0.1..1.1; rank 1 F 1.6 + 0.1..2.7, B ..4.8; rank 0 B 5.3 + 0.1..7.4; tails 0.2.
  const PipelineReplay r = replay_pipeline(2, 1, 1, {{1.0}, {1.0}}, {{2.0}, {2.0}},
                                           PipelineScheduleKind::one_f_one_b, false, costs);
  EXPECT_DOUBLE_EQ(r.finish_s[0], 7.6);
  EXPECT_DOUBLE_EQ(r.idle_s[0], 4.6);
  EXPECT_DOUBLE_EQ(r.finish_s[1], 5.0);
  EXPECT_DOUBLE_EQ(r.idle_s[1], 2.0);
  // Posted a step early, rank 1's second forward's copy runs during its first backward.
  costs.receives_posted_early = true;
  const PipelineReplay late = replay_pipeline(2, 1, 2, {{1.0}, {1.0}}, {{2.0}, {2.0}},
                                              PipelineScheduleKind::one_f_one_b, false, {0.5, false, {}, {}});
  const PipelineReplay early = replay_pipeline(2, 1, 2, {{1.0}, {1.0}}, {{2.0}, {2.0}},
                                               PipelineScheduleKind::one_f_one_b, false, {0.5, true, {}, {}});
  EXPECT_LT(early.finish_s[1], late.finish_s[1]);
}

TEST(PipelineOrder, CountsTheReferenceCannotRunAreNamed) {
  EXPECT_EQ(config::interleaved_micro_batch_problem(2, 1, 5), "");  // 1F1B runs any count
  EXPECT_EQ(config::interleaved_micro_batch_problem(2, 2, 3), "");  // one round of 3
  EXPECT_EQ(config::interleaved_micro_batch_problem(4, 2, 2), "");  // fewer than p: one round
  EXPECT_NE(config::interleaved_micro_batch_problem(2, 2, 5).find("multiple of 2"), std::string::npos);
  EXPECT_NE(config::interleaved_micro_batch_problem(4, 3, 9).find("multiple of 2"), std::string::npos);
}

// Evaluation's forward-only order: every rank's list replays against the forward dependencies
// (virtual stage s of a micro-batch after s - 1) without a cycle, with non-blocking sends, and
// runs each (chunk, micro-batch) once, micro-batches in ascending order.
TEST(PipelineOrder, ForwardOnlyOrdersReplayWithoutACycle) {
  for (int p : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int64_t m : {1, 2, 5}) {
        std::vector<std::vector<PipelineAction>> orders;
        for (int r = 0; r < p; ++r) orders.push_back(forward_only_order(v, m));
        EXPECT_EQ(render(orders[0], p, 0).substr(0, 4), "F0.0");
        std::set<std::pair<int, int64_t>> done;  // (virtual stage, micro-batch)
        std::vector<size_t> next(static_cast<size_t>(p), 0);
        for (bool progress = true; progress;) {
          progress = false;
          for (int r = 0; r < p; ++r) {
            size_t& i = next[static_cast<size_t>(r)];
            if (i == orders[static_cast<size_t>(r)].size()) continue;
            const PipelineAction& a = orders[static_cast<size_t>(r)][i];
            ASSERT_EQ(a.kind, Kind::forward);
            const int s = a.chunk * p + r;
            if (s > 0 && !done.contains({s - 1, a.micro_batch})) continue;
            EXPECT_TRUE(done.insert({s, a.micro_batch}).second) << "stage " << s << " micro-batch " << a.micro_batch;
            ++i;
            progress = true;
          }
        }
        EXPECT_EQ(done.size(), static_cast<size_t>(p * v * m)) << "p " << p << " v " << v << " m " << m;
      }
  EXPECT_EQ(render(forward_only_order(2, 2), 2, 1), "F1.0 F3.0 F1.1 F3.1");
}

}  // namespace
}  // namespace loom::runtime
