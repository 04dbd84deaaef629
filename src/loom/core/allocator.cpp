#include "loom/core/allocator.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include "loom/core/error.h"

namespace loom {

size_t CachingAllocator::size_class(size_t nbytes) {
  if (nbytes == 0) return 0;
  if (nbytes <= 4096) return (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  // 8 classes per doubling: step = 2^(floor(log2(n)) - 3)
  size_t top = size_t{1} << (63 - __builtin_clzll(nbytes));
  size_t step = top / 8;
  return (nbytes + step - 1) / step * step;
}

CachingAllocator::~CachingAllocator() { empty_cache(); }

void* CachingAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  void* ptr = nullptr;
  auto it = free_blocks_.find(cls);
  if (it != free_blocks_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    ++stats_.num_cache_hits;
  } else {
    ptr = std::aligned_alloc(kAlignment, cls);
    if (!ptr) {  // give the cache back and try once more before failing
      for (auto& [size, blocks] : free_blocks_) {
        for (void* p : blocks) std::free(p);
        stats_.reserved_bytes -= static_cast<int64_t>(size * blocks.size());
        blocks.clear();
      }
      ptr = std::aligned_alloc(kAlignment, cls);
    }
    LOOM_CHECK(ptr != nullptr, Error, "out of memory in the ", name_, " pool: could not allocate ",
               cls, " bytes (", stats_.current_bytes, " in use, ", stats_.reserved_bytes,
               " reserved); reduce local_batch_size or seq_length, or enable recompute/swap");
    stats_.reserved_bytes += static_cast<int64_t>(cls);
  }
  ++stats_.num_allocs;
  stats_.current_bytes += static_cast<int64_t>(cls);
  stats_.requested_bytes += static_cast<int64_t>(nbytes);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  size_t cls = size_class(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  free_blocks_[cls].push_back(ptr);
  stats_.current_bytes -= static_cast<int64_t>(cls);
  stats_.requested_bytes -= static_cast<int64_t>(nbytes);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_blocks_) {
    for (void* p : blocks) std::free(p);
    stats_.reserved_bytes -= static_cast<int64_t>(size * blocks.size());
  }
  free_blocks_.clear();
}

CachingAllocator& device_allocator(const Device& device) {
  // Function-local statics outlive every tensor that static objects may hold.
  static CachingAllocator* cpu = new CachingAllocator("cpu");
  check_device_supported(device, "allocate");
  return *cpu;
}

CachingAllocator& host_pool() {
  static CachingAllocator* host = new CachingAllocator("host (swap)");
  return *host;
}

MemoryStats memory_stats(const Device& device) { return device_allocator(device).stats(); }
void reset_peak_memory(const Device& device) { device_allocator(device).reset_peak(); }

}  // namespace loom
