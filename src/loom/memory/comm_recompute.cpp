#include "loom/memory/comm_recompute.h"

#include <unordered_map>

#include "loom/autograd/grad_mode.h"
#include "loom/autograd/saved_tensor.h"
#include "loom/core/trace.h"

namespace loom::memory {

namespace {

// How to regenerate one operation output.
struct Recipe {
  nn::TensorFn fn;
  std::vector<Tensor> inputs;  // detached
  size_t output_index;
  std::mutex mutex;
  Tensor regenerated;  // cached while any handle needs it
};

struct Handle {
  Tensor kept;                         // ordinary saved tensor (no outer hooks)
  std::shared_ptr<void> outer_packed;  // saved through the outer hooks
  std::shared_ptr<autograd::SavedTensorHooks> outer;
  std::shared_ptr<Recipe> recipe;      // regenerate instead
  Shape shape, strides;
  int64_t offset = 0;  // element offset of the saved view inside the operation output
};

}  // namespace

class CommRecomputeRegistry : public autograd::SavedTensorHooks {
 public:
  void begin_layer(std::shared_ptr<autograd::SavedTensorHooks> outer) {
    outer_ = std::move(outer);
    outputs_.clear();
  }
  void end_layer() { outputs_.clear(); }

  void record(const nn::TensorFn& fn, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
    std::vector<Tensor> detached;
    for (const Tensor& t : inputs) detached.push_back(t.defined() ? t.detach() : t);
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (!outputs[i].defined()) continue;
      auto r = std::make_shared<Recipe>();
      r->fn = fn;
      r->inputs = detached;
      r->output_index = i;
      outputs_.push_back({outputs[i].storage(), outputs[i].offset(), r});
    }
  }

  std::shared_ptr<void> pack(const Tensor& t, const char* op) override {
    auto h = std::make_shared<Handle>();
    for (auto& o : outputs_) {
      auto s = o.storage.lock();
      if (s && s == t.storage()) {
        h->recipe = o.recipe;
        h->shape = t.shape();
        h->strides = t.strides();
        h->offset = t.offset() - o.base_offset;
        return h;
      }
    }
    if (outer_) {
      h->outer = outer_;
      h->outer_packed = outer_->pack(t, op);
    } else {
      h->kept = t;
    }
    return h;
  }

  Tensor unpack(const std::shared_ptr<void>& packed) override {
    auto h = std::static_pointer_cast<Handle>(packed);
    if (!h->recipe) return h->outer ? h->outer->unpack(h->outer_packed) : h->kept;
    Recipe& r = *h->recipe;
    std::lock_guard<std::mutex> lock(r.mutex);
    if (!r.regenerated.defined()) {
      LOOM_TRACE("recompute", "communication recompute");
      autograd::NoGradGuard no_grad;
      r.regenerated = r.fn(r.inputs).at(r.output_index);
    }
    return r.regenerated.as_strided(h->shape, h->strides, r.regenerated.offset() + h->offset);
  }

 private:
  struct Output {
    std::weak_ptr<Storage> storage;
    int64_t base_offset;
    std::shared_ptr<Recipe> recipe;
  };
  std::vector<Output> outputs_;
  std::shared_ptr<autograd::SavedTensorHooks> outer_;
};

void apply_comm_recompute(nn::Module& layer, const std::vector<std::string>& operations) {
  if (operations.empty()) return;
  auto registry = std::make_shared<CommRecomputeRegistry>();
  for (const auto& path : operations) {
    auto dot = path.rfind('.');
    nn::Module* owner = dot == std::string::npos ? &layer : layer.find_module(path.substr(0, dot));
    LOOM_ASSERT(owner != nullptr, "operation path ", path);
    const std::string op = dot == std::string::npos ? path : path.substr(dot + 1);
    owner->add_operation_wrapper(op, [registry](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
      std::vector<Tensor> out = inner(in);
      if (autograd::grad_enabled()) registry->record(inner, in, out);
      return out;
    });
  }
  layer.add_forward_wrapper([registry](const nn::TensorFn& inner, const std::vector<Tensor>& in) {
    registry->begin_layer(autograd::current_saved_tensor_hooks());
    std::vector<Tensor> out;
    {
      autograd::SavedTensorHooksGuard guard(registry);
      out = inner(in);
    }
    registry->end_layer();
    return out;
  });
}

}  // namespace loom::memory
