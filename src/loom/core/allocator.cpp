#include "loom/core/allocator.h"

#include <sys/mman.h>

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

namespace {
constexpr size_t kHugePage = size_t{2} << 20;

// Large blocks are 2 MiB aligned and advised as transparent huge pages: first touch then faults
// once per 2 MiB instead of once per 4 KiB (page faults are expensive in a VM), and big GEMM
// operands need far fewer TLB entries.
void* system_allocate(size_t bytes) {
  if (bytes < kHugePage) return std::aligned_alloc(CachingAllocator::kAlignment, bytes);
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, rounded);
  if (p) ::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing
  return p;
}
}  // namespace

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
    ptr = system_allocate(cls);
    if (!ptr) {  // give the cache back and try once more before failing
      for (auto& [size, blocks] : free_blocks_) {
        for (void* p : blocks) std::free(p);
        stats_.reserved_bytes -= static_cast<int64_t>(size * blocks.size());
        blocks.clear();
      }
      ptr = system_allocate(cls);
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
