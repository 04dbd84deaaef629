#include "loom/runtime/cpu/cpu_peak.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace loom::runtime::cpu {

const char* peak_unit_name(PeakUnit unit) {
  switch (unit) {
    case PeakUnit::fp32_fma: return "fp32 FMA";
    case PeakUnit::avx512_bf16: return "AVX512-BF16 dot product";
    case PeakUnit::amx_bf16: return "AMX-BF16 tiles";
  }
  return "?";
}

PeakUnit peak_unit(DType compute_dtype, kernels::cpu::MatrixPath path) {
  if (compute_dtype != DType::bf16) return PeakUnit::fp32_fma;
  switch (path) {
    case kernels::cpu::MatrixPath::amx_bf16: return PeakUnit::amx_bf16;
    case kernels::cpu::MatrixPath::avx512_bf16: return PeakUnit::avx512_bf16;
    case kernels::cpu::MatrixPath::fp32: return PeakUnit::fp32_fma;
  }
  return PeakUnit::fp32_fma;
}

CpuPeak derive_peak_flops(PeakUnit unit, const CpuIdentity& cpu, const kernels::cpu::CpuFeatures& f,
                            const CpuClock& clock, int threads) {
  const bool intel = cpu.vendor.find("Intel") != std::string::npos;
  const bool amd = cpu.vendor.find("AMD") != std::string::npos;
  const bool full_width_512 = f.avx512_core && (intel || (amd && cpu.family >= 0x1A));
  const int fma_pipes = 2;  // assumed (see cpu_peak.h)
  const int lanes = full_width_512 ? 16 : 8;
  const double fp32 = f.avx2_fma || f.avx512_core ? fma_pipes * lanes * 2.0 : 16.0;
  std::string how;
  CpuPeak p;
  p.unit = unit;
  switch (unit) {
    case PeakUnit::fp32_fma:
      p.flop_per_cycle = fp32;
      how = f.avx2_fma || f.avx512_core
                ? std::to_string(fma_pipes) + " FMA pipes × " + std::to_string(lanes) + " fp32 lanes × 2" +
                      (f.avx512_core && !full_width_512 ? ", AVX-512 on 256-bit halves" : "")
                : std::string("no FMA: 8 lanes × (mul + add)");
      break;
    case PeakUnit::avx512_bf16:
      p.flop_per_cycle = 2 * fp32;
      how = "2 × fp32 FMA's " + std::to_string(static_cast<int>(fp32)) + ": vdpbf16ps on " + std::to_string(fma_pipes) +
            " pipes × " + std::to_string(lanes) + " lanes × 4";
      break;
    case PeakUnit::amx_bf16:
      p.flop_per_cycle = 1024;
      how = "TDPBF16PS: 16×16×32 tile product per 16 cycles";
      break;
  }
  const double mhz = clock.mhz > 0 ? clock.mhz : 2000;
  const std::string clock_from = clock.mhz > 0 ? clock.source : "clock unknown, 2 GHz assumed";
  p.gflops = threads * p.flop_per_cycle * mhz / 1000.0;
  char buf[320];
  std::snprintf(buf, sizeof(buf), "%s: %d thread%s × %.0f FLOP/cycle × %.2f GHz = %.1f GFLOP/s (%s; clock: %s)",
                peak_unit_name(unit), threads, threads == 1 ? "" : "s", p.flop_per_cycle, mhz / 1000.0, p.gflops,
                how.c_str(), clock_from.c_str());
  p.description = buf;
  return p;
}

CpuIdentity cpu_identity() {
  std::ifstream in("/proc/cpuinfo");
  CpuIdentity id;
  bool have_family = false;
  for (std::string line; std::getline(in, line);) {
    auto value = [&]() { return line.substr(line.find(':') + 1); };
    if (line.rfind("vendor_id", 0) == 0 && id.vendor.empty()) id.vendor = value();
    else if (line.rfind("cpu family", 0) == 0 && !have_family) {
      id.family = std::atoi(value().c_str());
      have_family = true;
    }
  }
  return id;
}

namespace {

// The clock this core runs at, timed: each iteration is a chain of 8 dependent integer adds, one
// cycle each on every x86-64 core of the last fifteen years, so iterations·8 / seconds is the
// clock. The best of five 5 ms trials, so a preempted trial does not lower it. This is the clock
// the pipes really run at (boost included), which /proc/cpuinfo under a hypervisor is not.
double timed_mhz() {
  double best = 0;
  for (int trial = 0; trial < 5; ++trial) {
    uint64_t x = 0, n = 0;
    const auto t0 = std::chrono::steady_clock::now();
    double seconds = 0;
    do {
      uint64_t iters = 100000;
      __asm__ volatile(
          "1:\n\t"
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
          "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
          "dec %1\n\tjnz 1b"
          : "+r"(x), "+r"(iters));
      n += 100000;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } while (seconds < 0.005);
    best = std::max(best, static_cast<double>(n) * 8.0 / seconds / 1e6);
  }
  return best;
}

}  // namespace

CpuClock cpu_clock() {
  // cpufreq's maximum is the clock the pipes can reach; VMs rarely expose it. Then the timed
  // clock; /proc/cpuinfo's (the host's nominal clock under most hypervisors, below the boost the
  // cores really run at, so MFU would read above 100%) only if timing fails.
  if (std::ifstream max("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); max) {
    double khz = 0;
    if (max >> khz && khz > 0) return {khz / 1000.0, "cpufreq cpuinfo_max_freq"};
  }
  static const double timed = timed_mhz();  // once per process
  if (timed > 0) return {timed, "timed (dependent-add chain)"};
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("cpu MHz", 0) == 0) {
      const double mhz = std::atof(line.substr(line.find(':') + 1).c_str());
      if (mhz > 0) return {mhz, "/proc/cpuinfo cpu MHz"};
    }
  return {};
}

CpuPeak cpu_peak(int threads, DType compute_dtype) {
  const kernels::cpu::MatrixDispatch& dispatch = kernels::cpu::matrix_dispatch();
  const PeakUnit unit = peak_unit(compute_dtype, dispatch.path);
  if (const char* env = std::getenv("LOOM_PEAK_GFLOPS"); env && *env) {
    char* end = nullptr;
    double v = std::strtod(env, &end);
    if (end && *end == '\0' && v > 0) {
      CpuPeak p;
      p.gflops = v;
      p.unit = unit;
      p.description = std::string(peak_unit_name(unit)) + ": LOOM_PEAK_GFLOPS=" + env;
      return p;
    }
  }
  return derive_peak_flops(unit, cpu_identity(), dispatch.features, cpu_clock(), threads);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace loom::runtime::cpu
