// A device as every driver (train, eval, generate, plan) sees it: where tensors live, the kernel
// table ops reach it through, its memory, how bytes cross between it and the host, the peak its
// MFU is measured against, and the world of processes that compute on it together.
//
//   backend   = make_backend(resolved.device, world)      one per process, chosen by
//                                                          context.device_target (or --device)
//   runtime   = ModelRuntime(config, resolved, backend)   the parallel model on it
//   trainer / evaluator / generator drive the runtime
//
// Nothing above this file names a concrete device: a second device is a second implementation
// (runtime/<device>/), registered in make_backend, with its kernel table (kernels/<device>/).
// Today there is the CPU (runtime/cpu/cpu_backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/allocator.h"
#include "loom/core/device.h"
#include "loom/core/dtype.h"
#include "loom/core/tensor.h"
#include "loom/dist/process_group.h"
#include "loom/kernels/kernel_table.h"

namespace loom::runtime {

// The peak FLOP/s a process's MFU divides by.
struct PeakFlops {
  double gflops = 0;
  std::string description;  // how it was derived ("AVX512-BF16 dot product: 2 threads × ...")
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // The device the model's parameters and activations live on.
  virtual Device device() const = 0;
  // One line for logs: what runs the matrix products ("CPU matrix path: avx512_bf16 (...)").
  virtual std::string description() const = 0;
  // Facts a run records beside its metrics, e.g. {"cpu_matrix_path", "avx512_bf16"}.
  virtual std::vector<std::pair<std::string, std::string>> run_fields() const = 0;
  // The peak of this process computing in `compute_dtype` on `threads` host threads (a CPU's
  // peak scales with its threads; an accelerator's does not).
  virtual PeakFlops peak_flops(DType compute_dtype, int threads) const = 0;
  // Bytes of the memory its tensors live in (the CPU: the host's RAM, shared by the host's ranks);
  // 0 when unknown.
  virtual int64_t memory_bytes() const = 0;
  // Copies src into dst (same shape and dtype) between this device and the host, either way.
  virtual void copy(const Tensor& src, Tensor& dst) const = 0;
  // Returns when every operation queued on the device has completed.
  virtual void synchronize() const = 0;

  // The kernel table ops reach this device through (kernels/kernel_table.h).
  const kernels::KernelTable& kernels() const;
  // Device memory, whose statistics are the run's memory figures, and the host pool that takes
  // swapped activations and offloaded state (not counted as device memory).
  CachingAllocator& allocator() const;
  CachingAllocator& host_pool() const;

  // Every process of the run, in rank order; the mesh's groups are split from it.
  dist::ProcessGroup& world() const { return *world_; }
  const std::shared_ptr<dist::ProcessGroup>& world_ptr() const { return world_; }
  int rank() const { return world_->rank(); }
  int world_size() const { return world_->size(); }

 protected:
  // A null world means one process: a one-rank group is made.
  explicit Backend(std::shared_ptr<dist::ProcessGroup> world);

 private:
  std::shared_ptr<dist::ProcessGroup> world_;
};

// The backend of `device` over `world` (null: this process alone). `device` comes resolved from
// the configuration (config::ResolvedConfig::device), which already refused devices this build
// cannot run; DeviceError names the device otherwise.
std::unique_ptr<Backend> make_backend(const Device& device, std::shared_ptr<dist::ProcessGroup> world = nullptr);

}  // namespace loom::runtime
