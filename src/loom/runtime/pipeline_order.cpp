#include "loom/runtime/pipeline_order.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "loom/config/parallel_layout.h"
#include "loom/core/error.h"

namespace loom::runtime {

namespace {

using Kind = PipelineAction::Kind;

std::vector<PipelineAction> one_f_one_b(int p, int rank, int64_t m) {
  const int64_t warmup = std::min<int64_t>(p - 1 - rank, m);
  std::vector<PipelineAction> out;
  int64_t f = 0, b = 0;
  for (int64_t k = 0; k < warmup; ++k) out.push_back({Kind::forward, 0, f++});
  for (int64_t k = 0; k < m - warmup; ++k) {
    out.push_back({Kind::forward, 0, f++});
    out.push_back({Kind::backward, 0, b++});
  }
  for (int64_t k = 0; k < warmup; ++k) out.push_back({Kind::backward, 0, b++});
  return out;
}

std::vector<PipelineAction> gpipe(int64_t m) {
  std::vector<PipelineAction> out;
  for (int64_t f = 0; f < m; ++f) out.push_back({Kind::forward, 0, f});
  for (int64_t b = 0; b < m; ++b) out.push_back({Kind::backward, 0, b});
  return out;
}

// The reference's ScheduleInterleaved1F1B._calculate_single_rank_operations, without its idle
// slots (this executor waits on the data instead).
std::vector<PipelineAction> interleaved(int p, int rank, int v, int64_t m) {
  const int64_t rounds = std::max<int64_t>(1, m / p);
  const int64_t per_round = m / rounds;
  const int64_t warmup = std::min<int64_t>((v - 1) * per_round + 2 * (p - 1 - rank), m * v);
  const int64_t forwards = m * v;
  const int64_t steady = forwards - warmup;
  auto forward_chunk = [&](int64_t step) { return static_cast<int>((step / per_round) % v); };
  auto backward_chunk = [&](int64_t step) { return static_cast<int>(v - 1 - ((step - warmup) / per_round) % v); };
  std::vector<int64_t> next_forward(static_cast<size_t>(v), 0), next_backward(static_cast<size_t>(v), 0);
  std::vector<PipelineAction> out;
  auto forward = [&](int64_t step) {
    const int c = forward_chunk(step);
    out.push_back({Kind::forward, c, next_forward[static_cast<size_t>(c)]++});
  };
  auto backward = [&](int64_t step) {
    const int c = backward_chunk(step);
    out.push_back({Kind::backward, c, next_backward[static_cast<size_t>(c)]++});
  };
  for (int64_t op = 0; op < forwards + warmup; ++op) {
    if (op < warmup) {
      forward(op);
    } else if (op < warmup + steady) {
      forward(op);
      backward(op);
    } else {
      backward(op);
    }
  }
  return out;
}

}  // namespace

std::vector<PipelineAction> pipeline_order(int pp, int pp_rank, int chunks, int64_t micro_batches,
                                           PipelineScheduleKind kind) {
  LOOM_ASSERT(pp >= 1 && pp_rank >= 0 && pp_rank < pp && chunks >= 1 && micro_batches >= 1,
              "pipeline_order: pp ", pp, ", rank ", pp_rank, ", chunks ", chunks, ", micro-batches ", micro_batches);
  if (kind == PipelineScheduleKind::gpipe) {
    LOOM_ASSERT(chunks == 1, "pipeline_order: gpipe runs one chunk per rank, got ", chunks);
    return gpipe(micro_batches);
  }
  LOOM_ASSERT(config::interleaved_micro_batch_problem(pp, chunks, micro_batches).empty(),
              config::interleaved_micro_batch_problem(pp, chunks, micro_batches));
  return chunks == 1 ? one_f_one_b(pp, pp_rank, micro_batches) : interleaved(pp, pp_rank, chunks, micro_batches);
}

std::vector<PipelineAction> forward_only_order(int chunks, int64_t micro_batches) {
  // Each micro-batch through every chunk of this rank, in virtual-stage order: the data
  // dependencies (stage s after stage s - 1 of the same micro-batch) hold on every rank, and
  // sends never wait, so no rank waits for one that waits for it.
  std::vector<PipelineAction> out;
  for (int64_t m = 0; m < micro_batches; ++m)
    for (int c = 0; c < chunks; ++c) out.push_back({Kind::forward, c, m});
  return out;
}

std::vector<std::vector<size_t>> pipeline_steps(const std::vector<PipelineAction>& order, bool overlap_b_f) {
  std::vector<std::vector<size_t>> steps;
  for (size_t i = 0; i < order.size(); ++i) {
    const bool pair = overlap_b_f && i + 1 < order.size() && order[i].kind == Kind::backward &&
                      order[i + 1].kind == Kind::forward;
    steps.push_back(pair ? std::vector<size_t>{i, i + 1} : std::vector<size_t>{i});
    if (pair) ++i;
  }
  return steps;
}

PipelineReplay replay_pipeline(int pp, int chunks, int64_t micro_batches,
                               const std::vector<std::vector<double>>& forward_s,
                               const std::vector<std::vector<double>>& backward_s, PipelineScheduleKind kind,
                               bool overlap_b_f, const PipelineReplayCosts& costs) {
  auto per_rank = [](const std::vector<double>& v, size_t r) { return v.empty() ? 0.0 : v.at(r); };
  const int last = pp * chunks - 1;
  std::vector<std::vector<PipelineAction>> orders;
  std::vector<std::vector<std::vector<size_t>>> steps;
  for (int r = 0; r < pp; ++r) {
    orders.push_back(pipeline_order(pp, r, chunks, micro_batches, kind));
    steps.push_back(pipeline_steps(orders.back(), overlap_b_f));
  }
  std::map<std::tuple<int, int, int64_t>, double> end;  // (backward?, virtual stage, micro) -> end time
  std::vector<size_t> next(static_cast<size_t>(pp), 0);
  PipelineReplay out;
  out.finish_s.assign(static_cast<size_t>(pp), 0.0);
  out.idle_s.assign(static_cast<size_t>(pp), 0.0);
  std::vector<double> busy(static_cast<size_t>(pp), 0.0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < pp; ++r) {
      const size_t ri = static_cast<size_t>(r);
      if (next[ri] == steps[ri].size()) continue;
      double ready = out.finish_s[ri], inputs_end = 0, d = 0;
      bool ok = true, receives = false;
      for (size_t i : steps[ri][next[ri]]) {
        const PipelineAction& a = orders[ri][i];
        const int s = a.chunk * pp + r;
        const bool forward = a.kind == Kind::forward;
        std::vector<std::tuple<int, int, int64_t>> needs;
        if (forward && s > 0) needs.push_back({0, s - 1, a.micro_batch});
        if (!forward && s < last) needs.push_back({1, s + 1, a.micro_batch});
        for (const auto& n : needs) {
          auto it = end.find(n);
          if (it == end.end()) ok = false;
          else inputs_end = std::max(inputs_end, it->second);
          receives = true;
        }
        const auto c = static_cast<size_t>(a.chunk);
        d += forward ? forward_s[ri][c] : backward_s[ri][c];
      }
      if (!ok) continue;
      if (receives)
        ready = costs.receives_posted_early ? std::max(ready, inputs_end + costs.transfer_s)
                                            : std::max(ready, inputs_end) + costs.transfer_s;
      const double overhead = per_rank(costs.action_overhead_s, ri) * static_cast<double>(steps[ri][next[ri]].size());
      for (size_t i : steps[ri][next[ri]]) {
        const PipelineAction& a = orders[ri][i];
        end[{a.kind == Kind::forward ? 0 : 1, a.chunk * pp + r, a.micro_batch}] = ready + overhead + d;
      }
      out.finish_s[ri] = ready + overhead + d;
      busy[ri] += d;
      ++next[ri];
      progress = true;
    }
  }
  for (int r = 0; r < pp; ++r) {
    LOOM_ASSERT(next[static_cast<size_t>(r)] == steps[static_cast<size_t>(r)].size(), "replay_pipeline: rank ", r,
                " cannot finish its actions");
    out.finish_s[static_cast<size_t>(r)] += per_rank(costs.tail_s, static_cast<size_t>(r));
    out.idle_s[static_cast<size_t>(r)] = out.finish_s[static_cast<size_t>(r)] - busy[static_cast<size_t>(r)];
  }
  return out;
}

}  // namespace loom::runtime
