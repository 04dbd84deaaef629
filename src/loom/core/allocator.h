// Size-binned caching allocator with memory statistics, one per device, plus a separate host
// pool that receives swapped-out activations. Freed blocks stay cached in their size class and
// are reused by the next request of that class: a training step allocates the same sizes every
// step, so after step one no memory is requested from the OS (and no page is faulted in again).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "loom/core/device.h"

namespace loom {

struct MemoryStats {
  int64_t current_bytes = 0;    // bytes in live blocks (size-class rounded)
  int64_t peak_bytes = 0;       // max of current_bytes since the last reset_peak()
  int64_t reserved_bytes = 0;   // live + cached bytes obtained from the system
  int64_t requested_bytes = 0;  // bytes asked for by live allocations (before rounding)
  int64_t num_allocs = 0;       // allocation calls
  int64_t num_cache_hits = 0;   // allocations served from the cache
};

class CachingAllocator {
 public:
  static constexpr size_t kAlignment = 64;

  explicit CachingAllocator(std::string name) : name_(std::move(name)) {}
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns a 64-byte aligned block of at least nbytes (nullptr for 0 bytes).
  void* allocate(size_t nbytes);
  void deallocate(void* ptr, size_t nbytes);

  MemoryStats stats() const;
  void reset_peak();
  // Returns every cached (free) block to the system.
  void empty_cache();
  const std::string& name() const { return name_; }

  // The size class a request is rounded up to: multiples of 64 B up to 4 KiB, then 8 classes per
  // power of two (at most 12.5% rounding waste).
  static size_t size_class(size_t nbytes);

 private:
  std::string name_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;
  MemoryStats stats_;
};

// The allocator for a device (cpu: the device pool whose numbers are "device memory").
CachingAllocator& device_allocator(const Device& device);
// The pool that holds swapped-out activations; its bytes do not count as device bytes.
CachingAllocator& host_pool();

MemoryStats memory_stats(const Device& device = Device::cpu());
void reset_peak_memory(const Device& device = Device::cpu());

}  // namespace loom
