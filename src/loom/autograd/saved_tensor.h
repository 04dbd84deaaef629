// Tensors an op keeps for its backward. With pack/unpack hooks installed (scoped, per thread),
// saving hands the tensor to the hooks instead: checkpoint() drops it and recomputes it later,
// swap moves it to the host pool and brings it back. Saved tensors never keep autograd history
// (no reference cycles between a node and its own outputs).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/core/tensor.h"

namespace loom::autograd {

class SavedTensorHooks {
 public:
  virtual ~SavedTensorHooks() = default;
  // `op` is the name of the op saving the tensor ("linear", "attention", ...).
  virtual std::shared_ptr<void> pack(const Tensor& tensor, const char* op) = 0;
  virtual Tensor unpack(const std::shared_ptr<void>& packed) = 0;
};

// Installs hooks for the current thread until the guard dies (guards nest; innermost wins).
class SavedTensorHooksGuard {
 public:
  explicit SavedTensorHooksGuard(std::shared_ptr<SavedTensorHooks> hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;
};

// The innermost active hooks, or null.
std::shared_ptr<SavedTensorHooks> current_saved_tensor_hooks();

// Temporarily hides all installed hooks (e.g. while a checkpoint recomputes).
class NoSavedTensorHooksGuard {
 public:
  NoSavedTensorHooksGuard();
  ~NoSavedTensorHooksGuard();
  NoSavedTensorHooksGuard(const NoSavedTensorHooksGuard&) = delete;
  NoSavedTensorHooksGuard& operator=(const NoSavedTensorHooksGuard&) = delete;

 private:
  std::vector<std::shared_ptr<SavedTensorHooks>> stack_;
};

class SavedTensor {
 public:
  SavedTensor() = default;
  // Saves `tensor` (an undefined tensor saves nothing) on behalf of op `op`.
  SavedTensor(const Tensor& tensor, const char* op);
  Tensor unpack() const;
  bool defined() const { return defined_; }
  // Frees what is held (after backward has used it).
  void reset();

 private:
  bool defined_ = false;
  Tensor data_;
  std::shared_ptr<SavedTensorHooks> hooks_;
  std::shared_ptr<void> packed_;
};

}  // namespace loom::autograd
