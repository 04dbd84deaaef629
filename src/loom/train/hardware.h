// The peak FLOP/s MFU is measured against. LOOM_PEAK_GFLOPS (total for the process) overrides;
// otherwise threads × fp32 FLOP/cycle × the clock in /proc/cpuinfo, with 32 FLOP/cycle for AVX2+FMA
// cores (two 256-bit FMA pipes: shared/bench/README.md's 2 × 32 × 2.45 GHz = 156.8 GFLOP/s) and
// 64 where 512-bit FMA runs at full width (Intel AVX-512, AMD family >= 0x1A / Zen 5), because
// OpenBLAS's GEMM uses it there and an AVX2 figure would report MFU above 100%.
#pragma once

#include <string>

namespace loom::train {

struct PeakFlops {
  double gflops = 0;        // for the threads this process uses
  std::string description;  // "2 threads × 32 FLOP/cycle × 2.45 GHz" or "LOOM_PEAK_GFLOPS"
};

PeakFlops peak_flops(int threads);

// The processor's "model name" from /proc/cpuinfo (benchmarks print it); "unknown" if absent.
std::string cpu_model_name();

}  // namespace loom::train
