#include "loom/train/pipeline_schedule.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <map>
#include <set>

#include "loom/autograd/engine.h"
#include "loom/config/parallel_layout.h"
#include "loom/core/allocator.h"
#include "loom/core/trace.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/reduce.h"

namespace loom::train {

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

// Tags of the pp group's messages: by receiving virtual stage and direction, so that each
// channel's messages match in micro-batch order.
int activation_tag(int to_stage) { return 2 * to_stage; }
int grad_tag(int to_stage) { return 2 * to_stage + 1; }

// The first message of an activation channel: rank, dims, dtype.
constexpr size_t kHeaderSize = 2 + Shape::kMaxDims;

// The union of every rank's extras names, sorted (stages log different ones: only the last has
// MTP's, only stages with MoE layers a balance loss), so that every rank reduces the same list.
std::vector<std::string> all_extras_keys(dist::ProcessGroup& world, const std::vector<std::string>& keys) {
  std::string joined;
  for (const std::string& k : keys) joined += k + '\n';
  const int64_t longest = world.all_reduce_scalar(static_cast<int64_t>(joined.size()), dist::ReduceOp::max);
  std::vector<int32_t> mine(static_cast<size_t>(longest), 0), all(static_cast<size_t>(longest * world.size()), 0);
  for (size_t i = 0; i < joined.size(); ++i) mine[i] = static_cast<unsigned char>(joined[i]);
  if (longest > 0) world.all_gather(std::span<const int32_t>(mine), std::span<int32_t>(all));
  std::set<std::string> names;
  std::string name;
  for (int32_t c : all) {
    if (c == 0) continue;
    if (c == '\n') {
      names.insert(name);
      name.clear();
    } else {
      name += static_cast<char>(c);
    }
  }
  return {names.begin(), names.end()};
}

dist::PipelineStage& split_model(dist::ParallelModel& parallel) {
  LOOM_ASSERT(parallel.pipeline() != nullptr, "PipelineSchedule needs a model split into pipeline stages");
  return *parallel.pipeline();
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
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

// Point-to-point state of the run: the agreed activation shapes and the transfers in flight.
struct PipelineSchedule::Channels {
  std::map<int, std::pair<Shape, DType>> agreed;  // activation tag -> shape and dtype
  std::set<int> announced;                        // activation tags whose header was sent
  std::deque<std::vector<int64_t>> headers;       // header buffers (sent once per channel)
  std::vector<dist::WorkHandle> sends;            // sends not yet waited on
};

PipelineSchedule::PipelineSchedule(TrainModel& model, dist::ParallelModel& parallel, int64_t micro_batches,
                                   PipelineScheduleOptions options)
    : model_(model), parallel_(parallel), stage_(split_model(parallel)), micro_batches_(micro_batches),
      options_(options), channels_(std::make_unique<Channels>()) {
  order_ = pipeline_order(stage_.pp_size(), stage_.pp_rank(), stage_.num_chunks(), micro_batches, options_.kind);
  steps_ = pipeline_steps(order_, options_.overlap_b_f);
  // With overlap_b_f a chunk runs one layer at a time: the embedding goes with its first layer,
  // the head with its last.
  for (const dist::PipelineChunk& c : stage_.chunks()) {
    std::vector<dist::PipelineChunk> pieces;
    if (!options_.overlap_b_f || c.last_layer <= c.first_layer) {
      pieces.push_back(c);
    } else {
      for (int64_t l = c.first_layer; l <= c.last_layer; ++l) {
        dist::PipelineChunk piece = c;
        piece.first_layer = piece.last_layer = l;
        piece.first = c.first && l == c.first_layer;
        piece.last = c.last && l == c.last_layer;
        pieces.push_back(piece);
      }
    }
    pieces_.push_back(std::move(pieces));
  }
}

PipelineSchedule::~PipelineSchedule() {
  // Every transfer must end before the process group does.
  for (auto& w : channels_->sends) {
    try {
      w->wait();
    } catch (...) {
    }
  }
}

StepResult PipelineSchedule::run_step(const BatchSource& next_batch) {
  const auto step_start = std::chrono::steady_clock::now();
  const int64_t A = micro_batches_;
  const double sense = parallel_.backward_scale();
  const int v = stage_.num_chunks();
  dist::ProcessGroup& pp = stage_.pp_group();
  Channels& ch = *channels_;
  StepResult result;
  parallel_.zero_grad();

  std::vector<data::Batch> batches;  // every rank reads the step's micro-batches in order
  auto batch = [&](int64_t micro) -> const data::Batch& {
    while (static_cast<int64_t>(batches.size()) <= micro) {
      LOOM_TRACE("step", "next batch");
      data::Batch b = next_batch();
      result.epoch = b.epoch;
      result.tokens += b.input_ids.numel();
      result.loss_tokens += b.loss_mask.defined() ? static_cast<int64_t>(ops::sum(b.loss_mask).item())
                                                  : b.input_ids.numel();
      ++result.micro_batches;
      batches.push_back(std::move(b));
    }
    return batches[static_cast<size_t>(micro)];
  };

  // One micro-batch of one chunk, cut into pieces_ (one piece without overlap_b_f): each piece's
  // input (a leaf whose grad goes back; undefined for the embedding's) and output (the loss on
  // the last virtual stage's last piece).
  struct InFlight {
    std::vector<Tensor> inputs, outputs;
  };
  std::map<std::pair<int, int64_t>, InFlight> live;
  struct Receive {
    Tensor buffer;
    dist::WorkHandle work;
  };
  std::map<size_t, Receive> receives;  // by action index

  auto send = [&](const Tensor& t, int to_stage, int tag) {
    Tensor c = t.contiguous();
    const int peer = stage_.rank_of_stage(to_stage);
    if (tag == activation_tag(to_stage) && !ch.announced.contains(tag)) {
      std::vector<int64_t> header(kHeaderSize, 0);
      header[0] = c.dim();
      header[1] = static_cast<int64_t>(c.dtype());
      for (int d = 0; d < c.dim(); ++d) header[2 + static_cast<size_t>(d)] = c.size(d);
      ch.headers.push_back(std::move(header));
      ch.sends.push_back(pp.isend(std::span<const int64_t>(ch.headers.back()), peer, tag));
      ch.announced.insert(tag);
    }
    ch.sends.push_back(pp.isend(c, peer, tag));
  };
  // Posts the receive action i needs (if any). The first activation of a channel brings its
  // shape: that header is read blocking, only when the action is about to run (allow_block);
  // a backward's grad buffer needs its forward's output, so it is not posted before that ran.
  auto post_receive = [&](size_t i, bool allow_block) {
    if (i >= order_.size() || receives.contains(i)) return;
    const PipelineAction& a = order_[i];
    const dist::PipelineChunk& c = stage_.chunks()[static_cast<size_t>(a.chunk)];
    if (a.kind == Kind::forward && !c.first) {
      const int tag = activation_tag(c.virtual_stage);
      const int peer = stage_.rank_of_stage(c.virtual_stage - 1);
      if (!ch.agreed.contains(tag)) {
        if (!allow_block) return;
        std::vector<int64_t> header(kHeaderSize);
        pp.recv(std::span<int64_t>(header), peer, tag);
        Shape shape;
        for (int64_t d = 0; d < header[0]; ++d) shape.push_back(header[2 + static_cast<size_t>(d)]);
        ch.agreed[tag] = {shape, static_cast<DType>(header[1])};
      }
      const auto& [shape, dtype] = ch.agreed.at(tag);
      Tensor buffer = Tensor::empty(shape, dtype);
      receives[i] = {buffer, pp.irecv(buffer, peer, tag)};
    } else if (a.kind == Kind::backward && !c.last) {
      auto it = live.find({a.chunk, a.micro_batch});
      if (it == live.end()) {
        LOOM_ASSERT(!allow_block, "pipeline backward of micro-batch ", a.micro_batch, " before its forward");
        return;
      }
      const Tensor& out = it->second.outputs.back();
      Tensor buffer = Tensor::empty(out.shape(), out.dtype());
      receives[i] = {buffer, pp.irecv(buffer, stage_.rank_of_stage(c.virtual_stage + 1), grad_tag(c.virtual_stage))};
    }
  };

  // An action in progress: runs its chunk's pieces one call at a time (forward: first to last;
  // backward: last to first), so a step of two actions can alternate their layers.
  struct Run {
    size_t index = 0;
    InFlight f;
    Tensor received;
    size_t next = 0;         // pieces done
    std::map<std::string, double> extras;  // the forward's, summed over its pieces
  };
  auto piece_of = [&](const PipelineAction& a, size_t k) -> const dist::PipelineChunk& {
    return pieces_[static_cast<size_t>(a.chunk)][k];
  };
  // Runs the next piece of `run`; returns whether pieces are left.
  auto advance = [&](Run& run) {
    const PipelineAction& a = order_[run.index];
    const dist::PipelineChunk& c = stage_.chunks()[static_cast<size_t>(a.chunk)];
    const size_t n = pieces_[static_cast<size_t>(a.chunk)].size();
    if (a.kind == Kind::forward) {
      LOOM_TRACE("step", "forward");
      const size_t k = run.next;
      const dist::PipelineChunk& piece = piece_of(a, k);
      Tensor input;
      if (k > 0) input = run.f.outputs[k - 1].detach();
      else if (!c.first) input = run.received;
      if (input.defined()) input.set_requires_grad(true);
      // The last stage's backward follows at once under 1F1B (not GPipe): the head forms its grads now.
      const bool backward_follows = piece.last && v == 1 && options_.kind != PipelineScheduleKind::gpipe;
      ForwardResult r = model_.forward_chunk(batch(a.micro_batch), piece, input, {backward_follows});
      for (const auto& [k2, x] : r.extras) run.extras[k2] += x;
      run.f.inputs.push_back(input);
      run.f.outputs.push_back(piece.last ? r.loss : r.hidden);
      if (++run.next < n) return true;
      for (const auto& [k2, x] : run.extras) result.extras[k2] += x / static_cast<double>(A);
      if (c.last) result.loss += r.loss.item() / static_cast<double>(A);
      else send(r.hidden, c.virtual_stage + 1, activation_tag(c.virtual_stage + 1));
      live[{a.chunk, a.micro_batch}] = std::move(run.f);
      return false;
    }
    LOOM_TRACE("step", "backward");
    if (run.next == 0) {
      auto it = live.find({a.chunk, a.micro_batch});
      LOOM_ASSERT(it != live.end(), "pipeline backward of micro-batch ", a.micro_batch, " before its forward");
      run.f = std::move(it->second);
      live.erase(it);
    }
    const size_t k = n - 1 - run.next;
    // FSDP reduces a chunk's grads once, in the backward of its last micro-batch.
    parallel_.set_requires_gradient_sync(a.micro_batch == A - 1);
    const Tensor& out = run.f.outputs[k];
    if (k + 1 < n) {
      LOOM_ASSERT(run.f.inputs[k + 1].grad().defined(), "pipeline stage ", c.virtual_stage, ": layer ",
                  piece_of(a, k + 1).first_layer, " got no input grad");
      autograd::backward(out, run.f.inputs[k + 1].grad());
      run.f.inputs[k + 1] = Tensor();
    } else if (c.last) {
      // backward(loss / A) seeded with `sense`, as the plain schedule.
      Tensor scaled = A > 1 ? ops::scale(out, 1.0 / static_cast<double>(A)) : out;
      if (sense == 1.0) autograd::backward(scaled);
      else autograd::backward(scaled, Tensor::full(scaled.shape(), sense, scaled.dtype()));
    } else {
      autograd::backward(out, run.received);
    }
    run.f.outputs[k] = Tensor();
    if (++run.next < n) return true;
    if (!c.first) {
      LOOM_ASSERT(run.f.inputs[0].grad().defined(), "pipeline stage ", c.virtual_stage, ": its input got no grad");
      send(run.f.inputs[0].grad(), c.virtual_stage - 1, grad_tag(c.virtual_stage - 1));
    }
    return false;
  };

  times_.compute_s.assign(order_.size(), 0.0);
  times_.wait_s.assign(order_.size(), 0.0);
  times_.live_bytes.assign(order_.size(), 0);
  times_.start_bytes = memory_stats().current_bytes;
  for (size_t s = 0; s < steps_.size(); ++s) {
    const std::vector<size_t>& step = steps_[s];
    const auto wait_start = std::chrono::steady_clock::now();
    for (size_t i : step) post_receive(i, true);
    // Overlap: the next step's receives are in flight while this one computes.
    if (options_.overlap_p2p && s + 1 < steps_.size())
      for (size_t i : steps_[s + 1]) post_receive(i, false);
    // Sends that completed need no handle (their tensors are released as they complete).
    std::erase_if(ch.sends, [](const dist::WorkHandle& w) { return w->is_completed(); });
    std::vector<Run> runs(step.size());
    for (size_t j = 0; j < step.size(); ++j) {
      runs[j].index = step[j];
      if (auto it = receives.find(step[j]); it != receives.end()) {
        LOOM_TRACE("step", "pipeline receive");
        it->second.work->wait();
        runs[j].received = it->second.buffer;
        receives.erase(it);
      }
    }
    times_.wait_s[step.front()] = seconds(wait_start);

    // The step's actions alternate piece by piece (one action: its pieces in a row).
    std::vector<bool> pending(runs.size(), true);
    for (bool any = true; any;) {
      any = false;
      for (size_t j = 0; j < runs.size(); ++j) {
        if (!pending[j]) continue;
        const auto compute_start = std::chrono::steady_clock::now();
        pending[j] = advance(runs[j]);
        times_.compute_s[runs[j].index] += seconds(compute_start);
        any = any || pending[j];
      }
    }
    for (size_t i : step) times_.live_bytes[i] = memory_stats().current_bytes;
  }
  const auto tail_start = std::chrono::steady_clock::now();
  {
    LOOM_TRACE("step", "pipeline send wait");
    for (auto& w : ch.sends) w->wait();
    ch.sends.clear();
    ch.headers.clear();
  }
  LOOM_ASSERT(live.empty() && receives.empty(), "the pipeline schedule left micro-batches in flight");
  parallel_.set_requires_gradient_sync(true);
  parallel_.finish_backward();
  times_.tail_s = seconds(tail_start);
  times_.step_s = seconds(step_start);

  // The loss comes from the last stage; every rank logs the mean over the data-parallel ranks.
  dist::ProcessGroup& world = parallel_.mesh().world();
  const double replicas = static_cast<double>(world.size() / stage_.pp_size());
  result.loss = world.all_reduce_scalar(stage_.holds_loss() ? result.loss : 0.0) / replicas;
  // Balance losses are summed over the stages; the names every rank reduces are agreed first.
  std::vector<std::string> keys;
  for (const auto& [k, x] : result.extras) keys.push_back(k);
  std::map<std::string, double> extras;
  for (const std::string& k : all_extras_keys(world, keys)) {
    auto it = result.extras.find(k);
    extras[k] = world.all_reduce_scalar(it == result.extras.end() ? 0.0 : it->second) / replicas;
  }
  result.extras = std::move(extras);
  return result;
}

}  // namespace loom::train
