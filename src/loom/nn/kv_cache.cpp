#include "loom/nn/kv_cache.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::nn {

KVCache::KVCache(int64_t capacity, std::vector<int64_t> pad) : capacity_(capacity), pad_(std::move(pad)) {
  LOOM_CHECK(capacity_ >= 1 && !pad_.empty(), ValueError, "KVCache: ", pad_.size(), " rows of capacity ", capacity_);
  for (int64_t p : pad_)
    LOOM_CHECK(p >= 0 && p < capacity_, ValueError, "KVCache: a row padded by ", p, " in a capacity of ", capacity_);
}

Tensor KVCache::doc_ends(int64_t keys) const {
  std::vector<int64_t> ends;
  for (int64_t p : pad_) {
    ends.push_back(std::min(p, keys));
    ends.push_back(keys);
  }
  return Tensor::from_vector(ends, {batch(), 2});
}

void KVCache::advance(int64_t n) {
  LOOM_CHECK(n >= 0 && length_ + n <= capacity_, ValueError, "KVCache: ", length_, " + ", n,
             " positions exceed its capacity of ", capacity_);
  length_ += n;
}

void KVCache::truncate(int64_t length) {
  LOOM_CHECK(length >= 0 && length <= length_, ValueError, "KVCache: cannot truncate ", length_, " positions to ",
             length);
  length_ = length;
}

KVCacheSlot& KVCache::slot(size_t layer) {
  if (slots_.size() <= layer) slots_.resize(layer + 1);
  return slots_[layer];
}

Tensor KVCache::positions(int64_t n) const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(batch() * n));
  for (int64_t p : pad_)
    for (int64_t i = 0; i < n; ++i) out.push_back(static_cast<int32_t>(std::max<int64_t>(length_ + i - p, 0)));
  return Tensor::from_vector(out, {batch(), n});
}

int64_t KVCache::bytes() const {
  int64_t total = 0;
  for (const KVCacheSlot& s : slots_)
    for (const Tensor* t : {&s.keys, &s.values})
      if (t->defined()) total += static_cast<int64_t>(t->nbytes());
  return total;
}

}  // namespace loom::nn
