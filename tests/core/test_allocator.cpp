// Caching allocator: 64-byte alignment, size classes, current/peak/reserved stats, reuse, and the
// separate host pool.
#include <gtest/gtest.h>

#include "loom/core/allocator.h"
#include "loom/core/tensor.h"

using namespace loom;

TEST(Allocator, SizeClassesRoundUpWithBoundedWaste) {
  EXPECT_EQ(CachingAllocator::size_class(1), 64u);
  EXPECT_EQ(CachingAllocator::size_class(64), 64u);
  EXPECT_EQ(CachingAllocator::size_class(65), 128u);
  EXPECT_EQ(CachingAllocator::size_class(4096), 4096u);
  for (size_t n : {4097ul, 10000ul, 123457ul, 1ul << 20, (1ul << 20) + 1, 987654321ul}) {
    size_t c = CachingAllocator::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(static_cast<double>(c), n * 1.125 + 1) << n;
  }
}

TEST(Allocator, StatsFollowTensorLifetimes) {
  CachingAllocator& pool = device_allocator(Device::cpu());
  pool.reset_peak();
  const int64_t base = pool.stats().current_bytes;
  int64_t one_mb;
  {
    Tensor a = Tensor::empty({1 << 18}, DType::f32);  // 1 MiB
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.raw_data()) % 64, 0u);
    one_mb = pool.stats().current_bytes - base;
    EXPECT_EQ(one_mb, 1 << 20);
    {
      Tensor b = Tensor::empty({1 << 18}, DType::f32);
      EXPECT_EQ(pool.stats().current_bytes - base, 2 << 20);
    }
    EXPECT_EQ(pool.stats().current_bytes - base, 1 << 20);
    EXPECT_GE(pool.stats().peak_bytes - base, 2 << 20);
  }
  EXPECT_EQ(pool.stats().current_bytes, base);
  pool.reset_peak();
  EXPECT_EQ(pool.stats().peak_bytes, base);
  // A view does not allocate.
  Tensor c = Tensor::empty({1 << 18}, DType::f32);
  const int64_t with_c = pool.stats().current_bytes;
  Tensor v = c.view({512, 512}).transpose(0, 1);
  EXPECT_EQ(pool.stats().current_bytes, with_c);
}

TEST(Allocator, FreedBlocksAreReusedFromTheCache) {
  CachingAllocator pool("test");
  void* p = pool.allocate(100000);
  pool.deallocate(p, 100000);
  const auto before = pool.stats();
  void* q = pool.allocate(99000);  // same size class
  EXPECT_EQ(q, p);
  EXPECT_EQ(pool.stats().num_cache_hits, before.num_cache_hits + 1);
  EXPECT_EQ(pool.stats().reserved_bytes, before.reserved_bytes);
  pool.deallocate(q, 99000);
  pool.empty_cache();
  EXPECT_EQ(pool.stats().reserved_bytes, 0);
}

TEST(Allocator, HostPoolIsSeparateFromDeviceCount) {
  const int64_t device_before = memory_stats().current_bytes;
  const int64_t host_before = host_pool().stats().current_bytes;
  Tensor h = Tensor::empty_in_pool({1 << 16}, DType::f32, host_pool());
  EXPECT_EQ(memory_stats().current_bytes, device_before);
  EXPECT_EQ(host_pool().stats().current_bytes - host_before, 1 << 18);
}

TEST(Allocator, MetaTensorsAllocateNothing) {
  const int64_t before = memory_stats().current_bytes;
  Tensor m = Tensor::empty({1 << 20, 1 << 10}, DType::f32, Device::meta());
  EXPECT_EQ(memory_stats().current_bytes, before);
  EXPECT_TRUE(m.is_meta());
  EXPECT_EQ(m.numel(), int64_t{1} << 30);
  EXPECT_THROW(m.raw_data(), DeviceError);
  EXPECT_EQ(m.transpose(0, 1).shape(), Shape({1 << 10, 1 << 20}));
}
