#include "loom/memory/swap.h"

#include "loom/core/allocator.h"
#include "loom/core/trace.h"

namespace loom::memory {

struct SwapManager::Handle {
  int64_t layer = 0;
  Tensor kept;        // not swapped (parameters, integer tensors): held as is
  Tensor host;        // the host-pool copy
  std::mutex mutex;
  std::shared_future<Tensor> prefetched;  // valid once a prefetch was scheduled
  bool has_prefetch = false;
};

class LayerSwapHooks : public autograd::SavedTensorHooks {
 public:
  LayerSwapHooks(std::shared_ptr<SwapManager> manager, int64_t layer)
      : manager_(std::move(manager)), layer_(layer) {}

  std::shared_ptr<void> pack(const Tensor& t, const char*) override {
    auto handle = std::make_shared<SwapManager::Handle>();
    handle->layer = layer_;
    if (!is_floating(t.dtype()) || manager_->keep_.count(t.storage().get()) || t.numel() == 0) {
      handle->kept = t;
      return handle;
    }
    LOOM_TRACE("swap", "swap out");
    handle->host = Tensor::empty_in_pool(t.shape(), t.dtype(), host_pool());
    handle->host.copy_(t);
    {
      std::lock_guard<std::mutex> lock(manager_->mutex_);
      ++manager_->stats_.tensors_swapped;
      manager_->stats_.bytes_swapped += static_cast<int64_t>(t.nbytes());
    }
    manager_->register_handle(layer_, handle);
    return handle;
  }

  Tensor unpack(const std::shared_ptr<void>& packed) override {
    auto handle = std::static_pointer_cast<SwapManager::Handle>(packed);
    if (handle->kept.defined()) return handle->kept;
    manager_->on_first_use(layer_);
    return manager_->fetch(handle);
  }

 private:
  std::shared_ptr<SwapManager> manager_;
  int64_t layer_;
};

SwapManager::SwapManager(int64_t prefetch, std::unordered_set<const Storage*> keep)
    : prefetch_(prefetch), keep_(std::move(keep)) {
  LOOM_CHECK(prefetch >= 1, ValueError, "swap.default_prefetch must be >= 1, got ", prefetch);
}

SwapManager::~SwapManager() {
  for (auto& f : pending_)
    if (f.valid()) f.wait();
}

std::shared_ptr<autograd::SavedTensorHooks> SwapManager::hooks_for_layer(int64_t layer) {
  return std::make_shared<LayerSwapHooks>(shared_from_this(), layer);
}

SwapStats SwapManager::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void SwapManager::register_handle(int64_t layer, const std::shared_ptr<Handle>& handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& list = handles_[layer];
  list.push_back(handle);
  started_[layer] = false;  // a new forward: backward has not reached it yet
}

namespace {
Tensor copy_to_device(const Tensor& host) {
  Tensor device = Tensor::empty(host.shape(), host.dtype());
  device.copy_(host);
  return device;
}
}  // namespace

Tensor SwapManager::fetch(const std::shared_ptr<Handle>& handle) {
  std::shared_future<Tensor> fut;
  {
    std::lock_guard<std::mutex> lock(handle->mutex);
    if (handle->has_prefetch) fut = handle->prefetched;
  }
  if (fut.valid()) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.prefetch_hits;
  } else {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.prefetch_misses;
    }
    LOOM_TRACE("swap", "swap in (sync)");
    std::promise<Tensor> p;
    p.set_value(copy_to_device(handle->host));
    std::lock_guard<std::mutex> lock(handle->mutex);
    handle->prefetched = p.get_future().share();
    handle->has_prefetch = true;
    fut = handle->prefetched;
  }
  return fut.get();
}

void SwapManager::on_first_use(int64_t layer) {
  const int64_t target = layer - prefetch_;
  std::vector<std::shared_ptr<Handle>> batch;
  std::vector<std::shared_ptr<std::promise<Tensor>>> promises;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (started_[layer]) return;
    started_[layer] = true;
    std::erase_if(pending_, [](std::future<void>& f) {
      return !f.valid() || f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
    // The first layer of backward also brings back the layers between it and its prefetch target.
    for (int64_t l = std::max<int64_t>(target, 0); l < layer; ++l) {
      auto it = handles_.find(l);
      if (it == handles_.end()) continue;
      for (auto& w : it->second)
        if (auto h = w.lock()) batch.push_back(h);
      it->second.clear();
    }
  }
  if (batch.empty()) return;
  // Claim every handle now (a future it can wait on), so backward never copies one twice; the
  // copies themselves run on a background thread.
  for (auto& h : batch) {
    auto p = std::make_shared<std::promise<Tensor>>();
    std::lock_guard<std::mutex> lock(h->mutex);
    if (h->has_prefetch) {
      promises.push_back(nullptr);
      continue;
    }
    h->prefetched = p->get_future().share();
    h->has_prefetch = true;
    promises.push_back(p);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.push_back(std::async(std::launch::async, [batch, promises, target] {
    LOOM_TRACE("swap", "prefetch from layer " + std::to_string(target));
    for (size_t i = 0; i < batch.size(); ++i)
      if (promises[i]) promises[i]->set_value(copy_to_device(batch[i]->host));
  }));
}

}  // namespace loom::memory
