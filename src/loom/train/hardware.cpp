#include "loom/train/hardware.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace loom::train {

PeakFlops peak_flops(int threads) {
  if (const char* env = std::getenv("LOOM_PEAK_GFLOPS"); env && *env) {
    char* end = nullptr;
    double v = std::strtod(env, &end);
    if (end && *end == '\0' && v > 0) return {v, "LOOM_PEAK_GFLOPS=" + std::string(env)};
  }
  std::ifstream in("/proc/cpuinfo");
  std::string line, vendor, flags;
  double mhz = 0;
  int family = 0;
  while (std::getline(in, line)) {
    auto value = [&]() { return line.substr(line.find(':') + 1); };
    if (line.rfind("vendor_id", 0) == 0 && vendor.empty()) vendor = value();
    else if (line.rfind("cpu family", 0) == 0 && family == 0) family = std::atoi(value().c_str());
    else if (line.rfind("cpu MHz", 0) == 0 && mhz == 0) mhz = std::atof(value().c_str());
    else if (line.rfind("flags", 0) == 0 && flags.empty()) flags = value() + " ";
  }
  const bool fma = flags.find(" fma ") != std::string::npos;
  const bool avx512 = flags.find(" avx512f ") != std::string::npos;
  const bool intel = vendor.find("Intel") != std::string::npos;
  // Full-width 512-bit FMA (Intel AVX-512, AMD Zen 5 = family 0x1A) doubles the AVX2 peak, and
  // OpenBLAS uses it; Zen 4 runs AVX-512 at AVX2 width.
  const int per_cycle = avx512 && (intel || family >= 0x1A) ? 64 : fma ? 32 : 16;
  if (mhz <= 0) mhz = 2000;  // unknown clock: a conservative guess, stated in the description
  PeakFlops p;
  p.gflops = threads * per_cycle * mhz / 1000.0;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%d thread%s × %d FLOP/cycle × %.2f GHz", threads, threads == 1 ? "" : "s",
                per_cycle, mhz / 1000.0);
  p.description = buf;
  return p;
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace loom::train
