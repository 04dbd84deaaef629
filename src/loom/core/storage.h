// A block of bytes owned by an allocator (or borrowed, e.g. an mmap'ed file, with a deleter).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "loom/core/allocator.h"
#include "loom/core/device.h"

namespace loom {

class Storage {
 public:
  // Allocates nbytes from `pool` (the device allocator by default).
  Storage(size_t nbytes, Device device, CachingAllocator* pool = nullptr);
  // Wraps memory the caller owns; `release` is called when the last tensor lets go.
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  const Device& device() const { return device_; }
  CachingAllocator* pool() const { return pool_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  CachingAllocator* pool_ = nullptr;
  std::function<void(void*)> release_;
};

}  // namespace loom
