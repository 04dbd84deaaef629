// The peak FLOP/s MFU is measured against. LOOM_PEAK_GFLOPS (total for the process) overrides;
// otherwise the nominal AVX2+FMA peak: threads × 32 fp32 FLOP/cycle (two 256-bit FMA pipes) ×
// the clock in /proc/cpuinfo — the definition of shared/bench/README.md (2 × 32 × 2.45 GHz =
// 156.8 GFLOP/s), which is what Loom (built for x86-64-v3) and the PyTorch reference both target.
// CPUs with full-width AVX-512 can exceed it; set LOOM_PEAK_GFLOPS to measure against theirs.
#pragma once

#include <string>

namespace loom::train {

struct PeakFlops {
  double gflops = 0;        // for the threads this process uses
  std::string description;  // "2 threads × 32 FLOP/cycle × 2.45 GHz" or "LOOM_PEAK_GFLOPS"
};

PeakFlops peak_flops(int threads);

}  // namespace loom::train
