#include "loom/autograd/checkpoint.h"

#include "loom/autograd/grad_mode.h"
#include "loom/autograd/saved_tensor.h"
#include "loom/core/rng.h"

namespace loom::autograd {

namespace {

thread_local int t_recompute_depth = 0;

struct RecomputeDepthGuard {
  RecomputeDepthGuard() { ++t_recompute_depth; }
  ~RecomputeDepthGuard() { --t_recompute_depth; }
};

// An operator the policy keeps (reuse_in_recompute): its outputs from the first forward, and how
// many tensors it saved for its own backward (kept too, so the recompute need not make them).
struct KeptOperator {
  std::vector<Tensor> outputs;
  int64_t saves = 0;
};

struct Frame {
  CheckpointFn fn;
  std::vector<Tensor> inputs;        // detached, requires_grad mirrored
  RngState rng;                      // default generator at the start of the forward
  SavePolicy keep;
  int64_t num_saved = 0;             // saves seen during the forward
  bool recomputed = false;
  bool recomputing = false;
  int keeping_operator = 0;          // > 0 while a kept operator runs in the first forward
  std::vector<Tensor> kept;          // by save index: tensors the policy kept
  std::vector<Tensor> regenerated;   // by save index: tensors from the recompute
  std::vector<KeptOperator> kept_operators;  // in the order they ran
  size_t next_kept_operator = 0;     // the recompute's position in kept_operators
};

// The innermost checkpointed function running on this thread, first time or recomputed.
thread_local Frame* t_frame = nullptr;

struct ActiveFrame {
  explicit ActiveFrame(Frame* f) : previous(t_frame) { t_frame = f; }
  ~ActiveFrame() { t_frame = previous; }
  Frame* previous;
};

// What a SavedTensor holds for a checkpointed save. When the node that saved it is done with it
// (its saved tensors are released after its backward ran), the regenerated tensor goes too.
struct Handle {
  int64_t index;
  std::weak_ptr<Frame> frame;
  ~Handle() {
    if (auto f = frame.lock()) {
      if (index < static_cast<int64_t>(f->regenerated.size())) f->regenerated[index] = Tensor();
      if (index < static_cast<int64_t>(f->kept.size())) f->kept[index] = Tensor();
    }
  }
};

// Hooks active while fn runs the first time: drop (or keep) each saved tensor, hand out indices.
class ForwardHooks : public SavedTensorHooks {
 public:
  explicit ForwardHooks(std::shared_ptr<Frame> frame) : frame_(std::move(frame)) {}

  std::shared_ptr<void> pack(const Tensor& t, const char* op) override {
    const int64_t index = frame_->num_saved++;
    if (frame_->keep && (frame_->keeping_operator > 0 || frame_->keep(op))) {
      frame_->kept.resize(index + 1);
      frame_->kept[index] = t;
    }
    auto handle = std::make_shared<Handle>();
    handle->index = index;
    handle->frame = frame_;
    return handle;
  }

  Tensor unpack(const std::shared_ptr<void>& packed) override {
    const int64_t index = static_cast<const Handle*>(packed.get())->index;
    if (index < static_cast<int64_t>(frame_->kept.size()) && frame_->kept[index].defined())
      return frame_->kept[index];
    if (!frame_->recomputed) recompute();
    LOOM_ASSERT(index < static_cast<int64_t>(frame_->regenerated.size()) &&
                    frame_->regenerated[index].defined(),
                "checkpoint: regenerated tensor ", index, " missing");
    return frame_->regenerated[index];
  }

 private:
  void recompute();
  std::shared_ptr<Frame> frame_;
};

// Hooks active during the recompute: record every saved tensor in order.
class RecomputeHooks : public SavedTensorHooks {
 public:
  explicit RecomputeHooks(Frame& frame) : frame_(frame) {}
  std::shared_ptr<void> pack(const Tensor& t, const char*) override {
    frame_.regenerated.push_back(t);
    return nullptr;
  }
  Tensor unpack(const std::shared_ptr<void>&) override {
    LOOM_THROW(AutogradError, "checkpoint: backward inside a recompute is not supported");
  }

 private:
  Frame& frame_;
};

void ForwardHooks::recompute() {
  Frame& f = *frame_;
  f.regenerated.clear();
  f.regenerated.reserve(static_cast<size_t>(f.num_saved));
  const RngState outer_rng = default_generator().state();
  default_generator().set_state(f.rng);
  {
    NoSavedTensorHooksGuard hide_outer;
    SavedTensorHooksGuard record(std::make_shared<RecomputeHooks>(f));
    EnableGradGuard grad_on;  // ops save tensors only when they record history
    RecomputeDepthGuard recomputing;
    ActiveFrame active(&f);
    f.recomputing = true;
    std::vector<Tensor> inputs;
    inputs.reserve(f.inputs.size());
    for (const Tensor& t : f.inputs) {
      if (!t.defined()) { inputs.push_back(t); continue; }
      Tensor d = t.detach();
      if (t.requires_grad()) d.set_requires_grad(true);
      inputs.push_back(d);
    }
    f.fn(inputs);
    f.recomputing = false;
  }
  default_generator().set_state(outer_rng);
  LOOM_CHECK(f.next_kept_operator == f.kept_operators.size(), AutogradError, "checkpoint: the recompute ran ",
             f.next_kept_operator, " of the ", f.kept_operators.size(), " kept operators of the forward; the "
             "checkpointed function must be deterministic in its control flow");
  f.kept_operators.clear();
  LOOM_CHECK(static_cast<int64_t>(f.regenerated.size()) == f.num_saved, AutogradError,
             "checkpoint: the recompute saved ", f.regenerated.size(), " tensors but the forward "
             "saved ", f.num_saved, "; the checkpointed function must be deterministic in its "
             "control flow");
  f.recomputed = true;
  f.inputs.clear();  // the recompute is done once; the regenerated tensors replace the inputs
}

}  // namespace

bool is_recomputing() { return t_recompute_depth > 0; }

namespace {
thread_local bool t_evaluating = false;
}  // namespace

EvaluationGuard::EvaluationGuard() : previous_(t_evaluating) { t_evaluating = true; }
EvaluationGuard::~EvaluationGuard() { t_evaluating = previous_; }
bool is_evaluating() { return t_evaluating; }

bool records_training_statistics() { return !is_recomputing() && !t_evaluating; }

std::vector<Tensor> checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs,
                               SavePolicy keep) {
  if (!grad_enabled()) return fn(inputs);  // nothing will be saved anyway
  auto frame = std::make_shared<Frame>();
  frame->fn = fn;
  frame->keep = std::move(keep);
  frame->rng = default_generator().state();
  for (const Tensor& t : inputs) {
    if (!t.defined()) { frame->inputs.push_back(t); continue; }
    Tensor d = t.detach();
    if (t.requires_grad()) d.autograd_meta().requires_grad = true;  // mirror (for the recompute)
    frame->inputs.push_back(d);
  }
  SavedTensorHooksGuard guard(std::make_shared<ForwardHooks>(frame));
  ActiveFrame active(frame.get());
  return fn(inputs);
}

bool keeps_operator(const char* name) {
  const Frame* f = t_frame;
  return f != nullptr && f->keep && f->keep(name);
}

std::vector<Tensor> run_kept_operator(const char* name, const std::function<std::vector<Tensor>()>& op) {
  Frame* f = t_frame;
  LOOM_ASSERT(keeps_operator(name), "run_kept_operator outside a checkpoint that keeps ", name);
  if (f->recomputing) {
    LOOM_CHECK(f->next_kept_operator < f->kept_operators.size(), AutogradError, "checkpoint: the recompute runs a ",
               name, " the forward did not; the checkpointed function must be deterministic in its control flow");
    KeptOperator& k = f->kept_operators[f->next_kept_operator++];
    // Its saves were kept in the forward (the placeholders keep the save indices aligned).
    f->regenerated.resize(f->regenerated.size() + static_cast<size_t>(k.saves));
    return std::move(k.outputs);
  }
  const int64_t saves_before = f->num_saved;
  ++f->keeping_operator;
  std::vector<Tensor> outputs;
  try {
    outputs = op();
  } catch (...) {
    --f->keeping_operator;
    throw;
  }
  --f->keeping_operator;
  f->kept_operators.push_back({outputs, f->num_saved - saves_before});
  return outputs;
}

}  // namespace loom::autograd
