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
  std::string line, flags;
  double mhz = 0;
  while (std::getline(in, line)) {
    auto value = [&]() { return line.substr(line.find(':') + 1); };
    if (line.rfind("cpu MHz", 0) == 0 && mhz == 0) mhz = std::atof(value().c_str());
    else if (line.rfind("flags", 0) == 0 && flags.empty()) flags = value() + " ";
  }
  const bool fma = flags.find(" fma ") != std::string::npos;
  const int per_cycle = fma ? 32 : 16;
  if (mhz <= 0) mhz = 2000;  // unknown clock: a conservative guess, stated in the description
  PeakFlops p;
  p.gflops = threads * per_cycle * mhz / 1000.0;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%d thread%s × %d FLOP/cycle × %.2f GHz", threads, threads == 1 ? "" : "s",
                per_cycle, mhz / 1000.0);
  p.description = buf;
  return p;
}

}  // namespace loom::train
