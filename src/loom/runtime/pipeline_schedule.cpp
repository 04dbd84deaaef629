#include "loom/runtime/pipeline_schedule.h"

#include <chrono>
#include <set>
#include <string>

#include "loom/autograd/engine.h"
#include "loom/autograd/checkpoint.h"
#include "loom/core/allocator.h"
#include "loom/core/trace.h"
#include "loom/ops/elementwise.h"
#include "loom/ops/reduce.h"

namespace loom::runtime {

namespace {

using Kind = PipelineAction::Kind;

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

// The grad of a cut between two pieces of the model (a stage's input, or a layer's with
// overlap_b_f), in the activation's dtype: the cut is a leaf, and a bf16 leaf accumulates its grad
// in fp32 (the main-grads rule for parameters), while on one process the same grad flows on in
// bf16. Each cut's grad sums its two contributions (the residual and the norm), which rounds the
// same in either dtype.
Tensor activation_grad(const Tensor& cut) {
  const Tensor& g = cut.grad();
  return g.dtype() == cut.dtype() ? g : g.to(cut.dtype());
}

// With overlap_b_f a chunk runs one layer at a time: the embedding goes with its first layer,
// the head with its last.
std::vector<dist::PipelineChunk> chunk_pieces(const dist::PipelineChunk& c, bool per_layer) {
  if (!per_layer || c.last_layer <= c.first_layer) return {c};
  std::vector<dist::PipelineChunk> pieces;
  for (int64_t l = c.first_layer; l <= c.last_layer; ++l) {
    dist::PipelineChunk piece = c;
    piece.first_layer = piece.last_layer = l;
    piece.first = c.first && l == c.first_layer;
    piece.last = c.last && l == c.last_layer;
    pieces.push_back(piece);
  }
  return pieces;
}

}  // namespace

// One micro-batch of one chunk, cut into pieces (one piece without overlap_b_f): each piece's
// input (a leaf whose grad goes back; undefined for the embedding's) and output (the loss on
// the last virtual stage's last piece).
struct InFlight {
  std::vector<Tensor> inputs, outputs;
};

struct PipelineSchedule::Step {
  Mode mode = Mode::train;
  const BatchSource* next_batch = nullptr;
  const std::vector<PipelineAction>* order = nullptr;
  StepResult result;
  std::vector<data::Batch> batches;                  // every rank reads the step's micro-batches in order
  std::map<std::pair<int, int64_t>, InFlight> live;  // (chunk, micro-batch) between forward and backward
  std::map<size_t, PipelineReceive> receives;        // by action index

  const data::Batch& batch(int64_t micro) {
    while (static_cast<int64_t>(batches.size()) <= micro) {
      LOOM_TRACE("step", "next batch");
      data::Batch b = (*next_batch)();
      result.epoch = b.epoch;
      result.tokens += b.input_ids.numel();
      result.loss_tokens += b.loss_mask.defined() ? static_cast<int64_t>(ops::sum(b.loss_mask).item())
                                                  : b.input_ids.numel();
      ++result.micro_batches;
      batches.push_back(std::move(b));
    }
    return batches[static_cast<size_t>(micro)];
  }
};

// An action in progress: runs its chunk's pieces one call at a time (forward: first to last;
// backward: last to first), so a step of two actions can alternate their layers.
struct PipelineSchedule::Action {
  size_t index = 0;
  InFlight f;
  Tensor received;
  size_t next = 0;                       // pieces done
  std::map<std::string, double> extras;  // the forward's, summed over its pieces
};

PipelineSchedule::PipelineSchedule(LanguageModel& model, dist::ParallelModel& parallel, int64_t micro_batches,
                                   PipelineScheduleOptions options)
    : model_(model), parallel_(parallel), stage_(split_model(parallel)), options_(options),
      channels_(std::make_unique<PipelineChannels>(stage_)) {
  set_micro_batches(micro_batches);
  for (const dist::PipelineChunk& c : stage_.chunks()) pieces_.push_back(chunk_pieces(c, options_.overlap_b_f));
}

void PipelineSchedule::set_micro_batches(int64_t micro_batches) {
  if (micro_batches == micro_batches_) return;
  order_ = pipeline_order(stage_.pp_size(), stage_.pp_rank(), stage_.num_chunks(), micro_batches, options_.kind);
  steps_ = pipeline_steps(order_, options_.overlap_b_f);
  eval_order_ = forward_only_order(stage_.num_chunks(), micro_batches);
  eval_steps_ = pipeline_steps(eval_order_, false);
  micro_batches_ = micro_batches;
}

PipelineSchedule::~PipelineSchedule() = default;

StepResult PipelineSchedule::run(const BatchSource& next_batch, Mode mode) {
  const auto step_start = std::chrono::steady_clock::now();
  Step step;
  step.mode = mode;
  step.next_batch = &next_batch;
  if (mode == Mode::train) {
    parallel_.zero_grad();
    run_actions(step, order_, steps_);
  } else {
    autograd::EvaluationGuard evaluating;
    run_actions(step, eval_order_, eval_steps_);
  }
  LOOM_ASSERT(step.live.empty() && step.receives.empty(), "the pipeline schedule left micro-batches in flight");
  if (mode == Mode::train) {
    const auto tail_start = std::chrono::steady_clock::now();
    parallel_.set_requires_gradient_sync(true);
    parallel_.finish_backward();
    times_.tail_s += seconds(tail_start);
  }
  times_.step_s = seconds(step_start);
  step.result.local_loss = step.result.loss;
  step.result.holds_loss = stage_.holds_loss();
  average_over_replicas(step.result);
  if (mode == Mode::eval) {
    dist::ProcessGroup& world = parallel_.mesh().world();
    const int shards = parallel_.mesh().dims().num_dataset_shards();
    sum_over_shards(world, static_cast<double>(world.size() / stage_.pp_size() / shards), step.result);
    parallel_.release_gathered();
  }
  return step.result;
}

Tensor PipelineSchedule::logits(const data::Batch& batch) {
  autograd::EvaluationGuard evaluating;
  dist::ProcessGroup& pp = stage_.pp_group();
  // Tags above every step channel's (2 · virtual stages), one per receiving stage.
  const int tag_base = 2 * stage_.pp_size() * stage_.num_chunks() + 2;
  Tensor logits;
  for (const dist::PipelineChunk& c : stage_.chunks()) {
    Tensor input;
    if (!c.first) {
      std::vector<int64_t> header(2 + Shape::kMaxDims);
      pp.recv(std::span<int64_t>(header), stage_.rank_of_stage(c.virtual_stage - 1), tag_base + c.virtual_stage);
      Shape shape;
      for (int64_t d = 0; d < header[0]; ++d) shape.push_back(header[2 + static_cast<size_t>(d)]);
      input = Tensor::empty(shape, static_cast<DType>(header[1]));
      pp.irecv(input, stage_.rank_of_stage(c.virtual_stage - 1), tag_base + c.virtual_stage)->wait();
    }
    nn::ForwardOptions options;
    options.logits = c.last;
    ForwardResult r = model_.forward_chunk(batch, c, input, options);
    if (c.last) {
      logits = r.logits.contiguous();
      continue;
    }
    // Blocking sends cannot wait on each other: one batch's stages form a chain, and each rank
    // runs its chunks in stage order, so the receiver's next action is this receive.
    const Tensor out = r.hidden.contiguous();
    std::vector<int64_t> header(2 + Shape::kMaxDims, 0);
    header[0] = out.dim();
    header[1] = static_cast<int64_t>(out.dtype());
    for (int d = 0; d < out.dim(); ++d) header[2 + static_cast<size_t>(d)] = out.size(d);
    const int to = stage_.rank_of_stage(c.virtual_stage + 1);
    pp.send(std::span<const int64_t>(header), to, tag_base + c.virtual_stage + 1);
    pp.isend(out, to, tag_base + c.virtual_stage + 1)->wait();
  }
  // Every stage learns the logits' shape and values from the last one.
  const int last = stage_.rank_of_stage(stage_.pp_size() * stage_.num_chunks() - 1);
  std::vector<int64_t> header(2 + Shape::kMaxDims, 0);
  if (stage_.holds_loss()) {
    header[0] = logits.dim();
    header[1] = static_cast<int64_t>(logits.dtype());
    for (int d = 0; d < logits.dim(); ++d) header[2 + static_cast<size_t>(d)] = logits.size(d);
  }
  pp.broadcast(std::span<int64_t>(header), last);
  if (!stage_.holds_loss()) {
    Shape shape;
    for (int64_t d = 0; d < header[0]; ++d) shape.push_back(header[2 + static_cast<size_t>(d)]);
    logits = Tensor::empty(shape, static_cast<DType>(header[1]));
  }
  pp.broadcast(logits, last);
  return logits;
}

void PipelineSchedule::run_actions(Step& step, const std::vector<PipelineAction>& order,
                                   const std::vector<std::vector<size_t>>& steps) {
  step.order = &order;
  times_.compute_s.assign(order.size(), 0.0);
  times_.wait_s.assign(order.size(), 0.0);
  times_.live_bytes.assign(order.size(), 0);
  times_.start_bytes = memory_stats().current_bytes;
  for (size_t s = 0; s < steps.size(); ++s) {
    const std::vector<size_t>& actions = steps[s];
    const auto wait_start = std::chrono::steady_clock::now();
    for (size_t i : actions) post_receive(step, i, true);
    // Overlap: the next step's receives are in flight while this one computes.
    if (options_.overlap_p2p && s + 1 < steps.size())
      for (size_t i : steps[s + 1]) post_receive(step, i, false);
    channels_->drop_completed_sends();
    std::vector<Action> runs(actions.size());
    for (size_t j = 0; j < actions.size(); ++j) {
      runs[j].index = actions[j];
      if (auto it = step.receives.find(actions[j]); it != step.receives.end()) {
        LOOM_TRACE("step", "pipeline receive");
        it->second.work->wait();
        runs[j].received = it->second.buffer;
        step.receives.erase(it);
      }
    }
    times_.wait_s[actions.front()] = seconds(wait_start);

    // The step's actions alternate piece by piece (one action: its pieces in a row).
    std::vector<bool> pending(runs.size(), true);
    for (bool any = true; any;) {
      any = false;
      for (size_t j = 0; j < runs.size(); ++j) {
        if (!pending[j]) continue;
        const auto compute_start = std::chrono::steady_clock::now();
        const bool forward = order[runs[j].index].kind == Kind::forward;
        pending[j] = forward ? forward_piece(step, runs[j]) : backward_piece(step, runs[j]);
        times_.compute_s[runs[j].index] += seconds(compute_start);
        any = any || pending[j];
      }
    }
    for (size_t i : actions) times_.live_bytes[i] = memory_stats().current_bytes;
  }
  const auto tail_start = std::chrono::steady_clock::now();
  channels_->wait_for_sends();
  times_.tail_s = seconds(tail_start);
}

void PipelineSchedule::post_receive(Step& step, size_t i, bool may_block) {
  const std::vector<PipelineAction>& order = *step.order;
  if (i >= order.size() || step.receives.contains(i)) return;
  const PipelineAction& a = order[i];
  const dist::PipelineChunk& c = stage_.chunks()[static_cast<size_t>(a.chunk)];
  if (a.kind == Kind::forward && !c.first) {
    if (auto r = channels_->receive_activation(c.virtual_stage, may_block)) step.receives[i] = std::move(*r);
  } else if (a.kind == Kind::backward && !c.last) {
    if (auto r = channels_->receive_grad(c.virtual_stage, may_block)) step.receives[i] = std::move(*r);
  }
}

bool PipelineSchedule::forward_piece(Step& step, Action& run) {
  LOOM_TRACE("step", "forward");
  const PipelineAction& a = (*step.order)[run.index];
  const dist::PipelineChunk& c = stage_.chunks()[static_cast<size_t>(a.chunk)];
  const std::vector<dist::PipelineChunk>& pieces = pieces_[static_cast<size_t>(a.chunk)];
  const size_t k = run.next;
  const dist::PipelineChunk& piece = pieces[k];
  const bool train = step.mode == Mode::train;
  Tensor input;
  if (k > 0) input = run.f.outputs[k - 1].detach();
  else if (!c.first) input = run.received;
  if (input.defined() && train) input.set_requires_grad(true);
  // The last stage's backward follows at once under 1F1B (not GPipe): the head forms its grads now.
  const bool backward_follows =
      train && piece.last && stage_.num_chunks() == 1 && options_.kind != PipelineScheduleKind::gpipe;
  ForwardResult r = model_.forward_chunk(step.batch(a.micro_batch), piece, input, {backward_follows});
  for (const auto& [key, x] : r.extras) run.extras[key] += x;
  run.f.inputs.push_back(input);
  run.f.outputs.push_back(piece.last ? r.loss : r.hidden);
  if (++run.next < pieces.size()) return true;
  const double A = static_cast<double>(micro_batches_);
  for (const auto& [key, x] : run.extras) step.result.extras[key] += x / A;
  if (c.last) {
    step.result.loss += r.loss.item() / A;
    if (!train) add_token_totals(step.batch(a.micro_batch), r.loss.item(), model_.vocab_size(), step.result);
  }
  else channels_->send_activation(r.hidden, c.virtual_stage + 1);
  if (train) step.live[{a.chunk, a.micro_batch}] = std::move(run.f);
  return false;
}

bool PipelineSchedule::backward_piece(Step& step, Action& run) {
  LOOM_TRACE("step", "backward");
  const PipelineAction& a = (*step.order)[run.index];
  const dist::PipelineChunk& c = stage_.chunks()[static_cast<size_t>(a.chunk)];
  const std::vector<dist::PipelineChunk>& pieces = pieces_[static_cast<size_t>(a.chunk)];
  const size_t n = pieces.size();
  if (run.next == 0) {
    auto it = step.live.find({a.chunk, a.micro_batch});
    LOOM_ASSERT(it != step.live.end(), "pipeline backward of micro-batch ", a.micro_batch, " before its forward");
    run.f = std::move(it->second);
    step.live.erase(it);
  }
  const size_t k = n - 1 - run.next;
  // FSDP reduces a chunk's grads once, in the backward of its last micro-batch.
  parallel_.set_requires_gradient_sync(a.micro_batch == micro_batches_ - 1);
  const Tensor& out = run.f.outputs[k];
  if (k + 1 < n) {
    LOOM_ASSERT(run.f.inputs[k + 1].grad().defined(), "pipeline stage ", c.virtual_stage, ": layer ",
                pieces[k + 1].first_layer, " got no input grad");
    autograd::backward(out, activation_grad(run.f.inputs[k + 1]));
    run.f.inputs[k + 1] = Tensor();
  } else if (c.last) {
    // backward(loss / A) seeded with `sense`, as the plain schedule.
    const double sense = parallel_.backward_scale();
    Tensor scaled = micro_batches_ > 1 ? ops::scale(out, 1.0 / static_cast<double>(micro_batches_)) : out;
    if (sense == 1.0) autograd::backward(scaled);
    else autograd::backward(scaled, Tensor::full(scaled.shape(), sense, scaled.dtype()));
  } else {
    autograd::backward(out, run.received);
  }
  run.f.outputs[k] = Tensor();
  if (++run.next < n) return true;
  if (!c.first) {
    LOOM_ASSERT(run.f.inputs[0].grad().defined(), "pipeline stage ", c.virtual_stage, ": its input got no grad");
    channels_->send_grad(activation_grad(run.f.inputs[0]), c.virtual_stage - 1);
  }
  return false;
}

void PipelineSchedule::average_over_replicas(StepResult& result) {
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
}

}  // namespace loom::runtime
