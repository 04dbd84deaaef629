#include "loom/ops/weight_cast.h"

#include <atomic>
#include <vector>

#include "loom/core/storage.h"
#include "loom/core/trace.h"
#include "loom/ops/elementwise.h"

namespace loom::ops {

namespace {

struct Entry {
  std::weak_ptr<Storage> storage;
  const Storage* address;
  int64_t offset;
  Shape shape, strides;
  DType dtype;
  Tensor copy;  // contiguous, in `dtype`, no grad history

  bool matches(const Tensor& w, DType d) const {
    return address == w.storage().get() && !storage.expired() && offset == w.offset() && dtype == d &&
           shape == w.shape() && strides == w.strides();
  }
};

// A model has a few hundred weights at most: a vector scanned per lookup is cheaper than hashing.
struct Cache {
  bool open = false;
  std::vector<Entry> entries;
};
thread_local Cache cache;
std::atomic<int64_t> casts_made{0};

}  // namespace

Tensor cast_weight(const Tensor& weight, DType dtype) {
  if (weight.dtype() == dtype) return weight;
  if (!cache.open || !weight.storage()) {
    casts_made.fetch_add(1, std::memory_order_relaxed);
    return cast(weight, dtype);
  }
  for (const Entry& e : cache.entries)
    if (e.matches(weight, dtype)) return record_cast(weight, e.copy.detach());
  // Weights whose storage is gone (a released FSDP unit) cannot be met again: drop their copies.
  std::erase_if(cache.entries, [](const Entry& e) { return e.storage.expired(); });
  Tensor copy;
  {
    LOOM_TRACE("op", "cast");
    copy = weight.detach().to(dtype);
  }
  casts_made.fetch_add(1, std::memory_order_relaxed);
  cache.entries.push_back({weight.storage(), weight.storage().get(), weight.offset(), weight.shape(),
                           weight.strides(), dtype, copy});
  return record_cast(weight, copy.detach());
}

WeightCastScope::WeightCastScope() : owner_(!cache.open) { cache.open = true; }

WeightCastScope::~WeightCastScope() {
  if (!owner_) return;
  cache.open = false;
  cache.entries.clear();
}

int64_t weight_casts_made() { return casts_made.load(std::memory_order_relaxed); }

}  // namespace loom::ops
