// The peak FLOP/s MFU is measured against: the peak of the unit the step's matrix products run on.
//
//   bf16 compute on a bf16 matrix path (kernels/cpu/cpu_isa.h):
//     amx_bf16     1024 FLOP/cycle per core (TDPBF16PS: a 16×16×32 tile product, 16 384 FLOP,
//                  issued once per 16 cycles: Intel's published AMX-BF16 rate)
//     avx512_bf16  2 × the fp32 FMA rate (VDPBF16PS: each fp32 lane takes two bf16 products and
//                  their sums, 4 FLOP where an FMA does 2, on the same pipes)
//   everything else (fp32 compute, or bf16 widened to fp32 on the fp32 path): the fp32 FMA rate,
//     2 FMA pipes × lanes × 2 FLOP, with 16 lanes where 512-bit FMA runs at full width (Intel
//     AVX-512, AMD family >= 0x1A / Zen 5; Zen 4 runs AVX-512 on 256-bit halves) and 8 for
//     AVX2+FMA (a 2-core Zen 3: 2 × 32 × 2.45 GHz); 16 FLOP/cycle without FMA.
//
// Assumed, because no flag says it: two FMA pipes per core (some Xeon Silver/Gold parts have one
// 512-bit FMA unit, Zen 5 laptops split 512-bit FMA in two: their MFU reads low), and that the
// threads used are physical cores (hyperthreads of one core share its pipes). The clock is
// cpufreq's cpuinfo_max_freq where the kernel exposes it, else timed at start-up (a chain of
// dependent adds, one per cycle: the clock the cores really run at, boost included, where a VM's
// /proc/cpuinfo shows the host's nominal one and MFU would read above 100%), else /proc/cpuinfo's
// "cpu MHz", else 2 GHz, and the description says which. LOOM_PEAK_GFLOPS (total for the process) overrides all of it.
#pragma once

#include <string>

#include "loom/core/dtype.h"
#include "loom/kernels/cpu/cpu_isa.h"

namespace loom::runtime::cpu {

// The unit the step's matrix products run on.
enum class PeakUnit { fp32_fma, avx512_bf16, amx_bf16 };
const char* peak_unit_name(PeakUnit unit);  // "fp32 FMA", "AVX512-BF16 dot product", "AMX-BF16 tiles"

// bf16 matrix units only when the products are bf16 (compute_dtype) and the dispatch put them on
// such a unit; bf16 widened to fp32 runs at the fp32 rate.
PeakUnit peak_unit(DType compute_dtype, kernels::cpu::MatrixPath path);

// What the peak is derived from.
struct CpuClock {
  double mhz = 0;      // <= 0: unknown
  std::string source;  // "cpufreq cpuinfo_max_freq", "timed (dependent-add chain)", "/proc/cpuinfo cpu MHz"
};
struct CpuIdentity {
  std::string vendor;  // /proc/cpuinfo vendor_id: "AuthenticAMD", "GenuineIntel"
  int family = 0;      // /proc/cpuinfo "cpu family" (decimal; Zen 5 is 26 = 0x1A)
};

struct CpuPeak {
  double gflops = 0;          // for the threads this process uses
  double flop_per_cycle = 0;  // per core, for `unit`
  PeakUnit unit = PeakUnit::fp32_fma;
  std::string description;    // "AVX512-BF16 dot product: 2 threads × 128 FLOP/cycle × 2.60 GHz (...)"
};

// The derivation above, a pure function of the CPU's identity, features and clock.
CpuPeak derive_peak_flops(PeakUnit unit, const CpuIdentity& cpu, const kernels::cpu::CpuFeatures& features,
                            const CpuClock& clock, int threads);

// This machine: /proc/cpuinfo, the process's matrix dispatch (CPUID) and clock, or LOOM_PEAK_GFLOPS.
CpuPeak cpu_peak(int threads, DType compute_dtype);

CpuIdentity cpu_identity();
CpuClock cpu_clock();

// The processor's "model name" from /proc/cpuinfo (benchmarks print it); "unknown" if absent.
std::string cpu_model_name();

}  // namespace loom::runtime::cpu
