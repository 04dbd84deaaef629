#include "loom/core/storage.h"

namespace loom {

Storage::Storage(size_t nbytes, Device device, CachingAllocator* pool)
    : nbytes_(nbytes), device_(device) {
  if (device.is_meta()) return;  // shapes only
  pool_ = pool ? pool : &device_allocator(device);
  data_ = pool_->allocate(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> release)
    : data_(data), nbytes_(nbytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  if (pool_) pool_->deallocate(data_, nbytes_);
  else if (release_) release_(data_);
}

}  // namespace loom
