#include "loom/autograd/saved_tensor.h"

#include "loom/autograd/grad_mode.h"

namespace loom::autograd {

namespace {
thread_local bool t_grad_enabled = true;
thread_local std::vector<std::shared_ptr<SavedTensorHooks>> t_hooks;
}  // namespace

bool grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

SavedTensorHooksGuard::SavedTensorHooksGuard(std::shared_ptr<SavedTensorHooks> hooks) {
  t_hooks.push_back(std::move(hooks));
}
SavedTensorHooksGuard::~SavedTensorHooksGuard() { t_hooks.pop_back(); }

std::shared_ptr<SavedTensorHooks> current_saved_tensor_hooks() {
  return t_hooks.empty() ? nullptr : t_hooks.back();
}

NoSavedTensorHooksGuard::NoSavedTensorHooksGuard() { stack_.swap(t_hooks); }
NoSavedTensorHooksGuard::~NoSavedTensorHooksGuard() { stack_.swap(t_hooks); }

SavedTensor::SavedTensor(const Tensor& tensor, const char* op) {
  if (!tensor.defined()) return;
  defined_ = true;
  // Always a fresh handle without autograd state: an op often saves its own output before
  // record() attaches the node to it, and sharing that TensorImpl would make node → saved
  // tensor → autograd meta → node a reference cycle that never frees.
  Tensor plain = tensor.detach();
  hooks_ = current_saved_tensor_hooks();
  if (hooks_) {
    packed_ = hooks_->pack(plain, op);
  } else {
    data_ = std::move(plain);
  }
}

Tensor SavedTensor::unpack() const {
  if (!defined_) return Tensor();
  if (hooks_) return hooks_->unpack(packed_);
  LOOM_CHECK(data_.defined(), AutogradError,
             "a tensor saved for backward was already freed: backward was run twice through the "
             "same graph; pass retain_graph=true to the first backward");
  return data_;
}

void SavedTensor::reset() {
  data_ = Tensor();
  packed_.reset();
  hooks_.reset();
}

}  // namespace loom::autograd
