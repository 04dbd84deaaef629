// Activation swap: saved activations of the selected layers (or modules) are copied into the
// host pool during forward, so they leave the device count, and come back during backward.
// When backward first needs layer l, layer l − prefetch is fetched back on a background thread,
// so by the time backward reaches it the copy is (usually) done.
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "loom/autograd/saved_tensor.h"
#include "loom/core/storage.h"

namespace loom::memory {

struct SwapStats {
  int64_t tensors_swapped = 0;
  int64_t bytes_swapped = 0;
  int64_t prefetch_hits = 0;    // unpacks served by a finished or running prefetch
  int64_t prefetch_misses = 0;  // unpacks that copied back synchronously
};

class SwapManager : public std::enable_shared_from_this<SwapManager> {
 public:
  // `keep` lists storages that must never be swapped (parameters). `prefetch` ≥ 1.
  SwapManager(int64_t prefetch, std::unordered_set<const Storage*> keep);
  ~SwapManager();

  // Hooks that swap every floating activation saved while they are installed, for layer `layer`.
  std::shared_ptr<autograd::SavedTensorHooks> hooks_for_layer(int64_t layer);
  SwapStats stats() const;

  struct Handle;

 private:
  friend class LayerSwapHooks;
  void register_handle(int64_t layer, const std::shared_ptr<Handle>& handle);
  Tensor fetch(const std::shared_ptr<Handle>& handle);
  void on_first_use(int64_t layer);

  int64_t prefetch_;
  std::unordered_set<const Storage*> keep_;
  mutable std::mutex mutex_;
  std::map<int64_t, std::vector<std::weak_ptr<Handle>>> handles_;
  std::map<int64_t, bool> started_;  // backward reached this layer
  std::vector<std::future<void>> pending_;
  SwapStats stats_;
};

}  // namespace loom::memory
