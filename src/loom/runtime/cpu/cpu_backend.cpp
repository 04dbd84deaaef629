#include "loom/runtime/cpu/cpu_backend.h"

#include "loom/config/memory_estimate.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/runtime/cpu/cpu_peak.h"

namespace loom::runtime {

CpuBackend::CpuBackend(std::shared_ptr<dist::ProcessGroup> world) : Backend(std::move(world)) {
  (void)kernels::cpu::matrix_dispatch();
}

std::string CpuBackend::description() const { return "CPU matrix path: " + matrix_path(); }

std::string CpuBackend::matrix_path() const { return kernels::cpu::describe_matrix_path(); }

std::vector<std::pair<std::string, std::string>> CpuBackend::run_fields() const {
  return {{"cpu_matrix_path", kernels::cpu::matrix_path_name(kernels::cpu::matrix_dispatch().path)}};
}

PeakFlops CpuBackend::peak_flops(DType compute_dtype, int threads) const {
  const cpu::CpuPeak p = cpu::cpu_peak(threads, compute_dtype);
  return {p.gflops, p.description};
}

int64_t CpuBackend::memory_bytes() const {
  const auto host = config::host_memory();
  return host ? host->bytes : 0;
}

void CpuBackend::copy(const Tensor& src, Tensor& dst) const { dst.copy_(src); }

}  // namespace loom::runtime
