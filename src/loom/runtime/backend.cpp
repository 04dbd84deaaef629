#include "loom/runtime/backend.h"

#include "loom/core/error.h"
#include "loom/runtime/cpu/cpu_backend.h"

namespace loom::runtime {

Backend::Backend(std::shared_ptr<dist::ProcessGroup> world)
    : world_(world ? std::move(world) : std::shared_ptr<dist::ProcessGroup>(dist::make_single_rank_group("world"))) {}

const kernels::KernelTable& Backend::kernels() const { return kernels::table(device(), "backend"); }

CachingAllocator& Backend::allocator() const { return device_allocator(device()); }

CachingAllocator& Backend::host_pool() const { return loom::host_pool(); }

std::unique_ptr<Backend> make_backend(const Device& device, std::shared_ptr<dist::ProcessGroup> world) {
  if (device.is_cpu()) return std::make_unique<CpuBackend>(std::move(world));
  LOOM_THROW(DeviceError, "no backend for device ", device.str(), " in this build of Loom (it runs on cpu); set "
             "context.device_target: CPU or pass --device cpu");
}

}  // namespace loom::runtime
