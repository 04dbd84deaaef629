// The CPU as a Loom device: tensors in host memory through the caching allocator, the CPU kernel
// table (kernels/cpu/), matrix products on the fastest unit the processor has (AMX-BF16,
// AVX512-BF16 or fp32 FMA, chosen at start-up: kernels/cpu/cpu_isa.h), and MFU against the peak
// of that unit (cpu_peak.h). Copies between "device" and host are plain copies and there is
// nothing to wait for.
#pragma once

#include "loom/runtime/backend.h"

namespace loom::runtime {

class CpuBackend final : public Backend {
 public:
  // Resolves the matrix path now, so a bad LOOM_MAX_CPU_ISA stops the process before any work.
  explicit CpuBackend(std::shared_ptr<dist::ProcessGroup> world = nullptr);

  Device device() const override { return Device::cpu(); }
  std::string description() const override;
  std::vector<std::pair<std::string, std::string>> run_fields() const override;
  PeakFlops peak_flops(DType compute_dtype, int threads) const override;
  int64_t memory_bytes() const override;
  void copy(const Tensor& src, Tensor& dst) const override;
  void synchronize() const override {}

  // The matrix path and why ("avx512_bf16 (bf16 GEMMs on oneDNN, ...; CPU: avx2 avx512 ...)").
  std::string matrix_path() const;
};

}  // namespace loom::runtime
