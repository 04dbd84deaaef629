// The MFU peak (runtime/cpu/cpu_peak.h) as a pure function of the CPU's identity, features, clock and
// threads: each unit's FLOP/cycle, the vendor/family rules for 512-bit width, the clock's source
// and the fallbacks, all stated in the description.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include "loom/runtime/cpu/cpu_peak.h"

using namespace loom;
using namespace loom::runtime::cpu;
using kernels::cpu::CpuFeatures;
using kernels::cpu::MatrixPath;

namespace {

CpuFeatures features(bool avx2, bool avx512, bool bf16, bool amx) {
  CpuFeatures f;
  f.avx2_fma = avx2;
  f.avx512_core = avx512;
  f.avx512_bf16 = bf16;
  f.amx_bf16 = amx;
  return f;
}

const CpuIdentity zen5{" AuthenticAMD", 26}, zen4{" AuthenticAMD", 25}, zen3{" AuthenticAMD", 25},
    sapphire_rapids{" GenuineIntel", 6};
const CpuClock proc_clock{2596.12, "/proc/cpuinfo cpu MHz"};

}  // namespace

TEST(Hardware, PeakUnitFollowsComputeDtypeAndMatrixPath) {
  EXPECT_EQ(peak_unit(DType::bf16, MatrixPath::amx_bf16), PeakUnit::amx_bf16);
  EXPECT_EQ(peak_unit(DType::bf16, MatrixPath::avx512_bf16), PeakUnit::avx512_bf16);
  // bf16 widened to fp32 runs at the fp32 rate; fp32 compute never touches the bf16 units.
  EXPECT_EQ(peak_unit(DType::bf16, MatrixPath::fp32), PeakUnit::fp32_fma);
  EXPECT_EQ(peak_unit(DType::f32, MatrixPath::amx_bf16), PeakUnit::fp32_fma);
  EXPECT_EQ(peak_unit(DType::f32, MatrixPath::avx512_bf16), PeakUnit::fp32_fma);
}

TEST(Hardware, Zen5FullWidthAvx512AndBf16DotProductsAtTwiceTheFmaRate) {
  const CpuFeatures f = features(true, true, true, false);
  CpuPeak fp32 = derive_peak_flops(PeakUnit::fp32_fma, zen5, f, proc_clock, 2);
  EXPECT_EQ(fp32.flop_per_cycle, 64);  // 2 pipes × 16 lanes × 2
  EXPECT_DOUBLE_EQ(fp32.gflops, 2 * 64 * 2.59612);
  CpuPeak bf16 = derive_peak_flops(PeakUnit::avx512_bf16, zen5, f, proc_clock, 2);
  EXPECT_EQ(bf16.flop_per_cycle, 128);
  EXPECT_DOUBLE_EQ(bf16.gflops, 2 * fp32.gflops);
  EXPECT_NE(bf16.description.find("AVX512-BF16"), std::string::npos) << bf16.description;
  EXPECT_NE(bf16.description.find("2 threads × 128 FLOP/cycle × 2.60 GHz"), std::string::npos) << bf16.description;
  EXPECT_NE(bf16.description.find("clock: /proc/cpuinfo cpu MHz"), std::string::npos) << bf16.description;
}

TEST(Hardware, Zen4RunsAvx512OnHalfWidthPipes) {
  const CpuFeatures f = features(true, true, true, false);
  EXPECT_EQ(derive_peak_flops(PeakUnit::fp32_fma, zen4, f, proc_clock, 1).flop_per_cycle, 32);
  EXPECT_EQ(derive_peak_flops(PeakUnit::avx512_bf16, zen4, f, proc_clock, 1).flop_per_cycle, 64);
  EXPECT_NE(derive_peak_flops(PeakUnit::fp32_fma, zen4, f, proc_clock, 1).description.find("256-bit halves"),
            std::string::npos);
}

TEST(Hardware, Avx2OnlyAndNoFma) {
  EXPECT_EQ(derive_peak_flops(PeakUnit::fp32_fma, zen3, features(true, false, false, false), proc_clock, 1).flop_per_cycle, 32);
  const CpuPeak none = derive_peak_flops(PeakUnit::fp32_fma, zen3, features(false, false, false, false), proc_clock, 1);
  EXPECT_EQ(none.flop_per_cycle, 16);
  EXPECT_NE(none.description.find("no FMA"), std::string::npos) << none.description;
}

TEST(Hardware, AmxTilesAtIntelsPublishedRateAndFullWidthFmaOnIntel) {
  const CpuFeatures f = features(true, true, true, true);
  const CpuClock sysfs{3800, "cpufreq cpuinfo_max_freq"};
  const CpuPeak amx = derive_peak_flops(PeakUnit::amx_bf16, sapphire_rapids, f, sysfs, 4);
  EXPECT_EQ(amx.flop_per_cycle, 1024);
  EXPECT_DOUBLE_EQ(amx.gflops, 4 * 1024 * 3.8);
  EXPECT_NE(amx.description.find("cpufreq cpuinfo_max_freq"), std::string::npos) << amx.description;
  EXPECT_EQ(derive_peak_flops(PeakUnit::fp32_fma, sapphire_rapids, f, sysfs, 4).flop_per_cycle, 64);
}

TEST(Hardware, UnknownClockIsAssumedAndSaysSo) {
  const CpuPeak p = derive_peak_flops(PeakUnit::fp32_fma, zen5, features(true, true, true, false), CpuClock{}, 3);
  EXPECT_DOUBLE_EQ(p.gflops, 3 * 64 * 2.0);
  EXPECT_NE(p.description.find("2 GHz assumed"), std::string::npos) << p.description;
}

TEST(Hardware, DescriptionOfAZen5CoreIsTheHandDerivedOne) {
  // A Zen 5 core (AMD family 0x1A: AVX-512 on full-width pipes, AVX512-BF16) timed at 3.59 GHz,
  // 2 threads. By hand: fp32 FMA 2 pipes × 16 lanes × 2 = 64 FLOP/cycle, 2 × 64 × 3.59 = 459.52
  // GFLOP/s; VDPBF16PS twice that, 128 FLOP/cycle and 919.04 GFLOP/s.
  const CpuFeatures f = features(true, true, true, false);
  const CpuClock timed{3590, "timed (dependent-add chain)"};
  const CpuPeak fp32 = derive_peak_flops(PeakUnit::fp32_fma, zen5, f, timed, 2);
  EXPECT_DOUBLE_EQ(fp32.gflops, 459.52);
  EXPECT_EQ(fp32.description, "fp32 FMA: 2 threads × 64 FLOP/cycle × 3.59 GHz = 459.5 GFLOP/s (2 FMA pipes × 16 fp32 "
                              "lanes × 2; clock: timed (dependent-add chain))");
  const CpuPeak bf16 = derive_peak_flops(PeakUnit::avx512_bf16, zen5, f, timed, 2);
  EXPECT_DOUBLE_EQ(bf16.gflops, 919.04);
  EXPECT_EQ(bf16.description, "AVX512-BF16 dot product: 2 threads × 128 FLOP/cycle × 3.59 GHz = 919.0 GFLOP/s (2 × "
                              "fp32 FMA's 64: vdpbf16ps on 2 pipes × 16 lanes × 4; clock: timed (dependent-add chain))");
}

namespace {

// This machine as the kernel reports it in /proc/cpuinfo (cpu_peak reads the features through
// CPUID and the vendor and family through its own parser): the first processor's vendor_id, cpu
// family and flags.
struct CpuinfoFacts {
  std::string vendor;
  int family = -1;
  std::set<std::string> flags;
};

CpuinfoFacts read_cpuinfo() {
  CpuinfoFacts c;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::istringstream value(line.substr(colon + 1));
    if (key == "vendor_id" && c.vendor.empty()) value >> c.vendor;
    else if (key == "cpu family" && c.family < 0) value >> c.family;
    else if (key == "flags" && c.flags.empty())
      for (std::string flag; value >> flag;) c.flags.insert(flag);
  }
  return c;
}

// fp32 FMA FLOP per cycle per core from the vendors' optimization manuals: two FMA pipes of 2
// FLOP per lane; 16 fp32 lanes where AVX-512 runs at full width (every Intel AVX-512 core; AMD
// from Zen 5, family 0x1A), 8 where it runs on 256-bit halves (Zen 4) or only AVX2+FMA exists;
// without FMA a separate multiply and add on 8 lanes.
double manual_fp32_flop_per_cycle(const CpuinfoFacts& c) {
  if (!c.flags.count("fma") || !c.flags.count("avx2")) return 16;
  const bool avx512 = c.flags.count("avx512f") && c.flags.count("avx512dq") && c.flags.count("avx512bw") &&
                      c.flags.count("avx512vl");
  const bool full_width = avx512 && (c.vendor == "GenuineIntel" || (c.vendor == "AuthenticAMD" && c.family >= 26));
  return full_width ? 64 : 32;
}

// Unsets LOOM_PEAK_GFLOPS (or sets it) for one test, then restores the caller's value.
class PeakOverride {
 public:
  explicit PeakOverride(const char* value) {
    if (const char* v = std::getenv("LOOM_PEAK_GFLOPS")) saved_ = v;
    if (value) ::setenv("LOOM_PEAK_GFLOPS", value, 1);
    else ::unsetenv("LOOM_PEAK_GFLOPS");
  }
  ~PeakOverride() {
    if (saved_) ::setenv("LOOM_PEAK_GFLOPS", saved_->c_str(), 1);
    else ::unsetenv("LOOM_PEAK_GFLOPS");
  }

 private:
  std::optional<std::string> saved_;
};

}  // namespace

TEST(Hardware, ThisMachinesPeakFollowsWhatProcCpuinfoSaysOfIt) {
  const CpuinfoFacts facts = read_cpuinfo();
  if (facts.flags.empty() || facts.family < 0) GTEST_SKIP() << "no /proc/cpuinfo flags and cpu family";
  const PeakOverride derived(nullptr);  // the derivation, whatever the caller's environment says
  const double fp32 = manual_fp32_flop_per_cycle(facts);
  const double ghz = cpu_clock().mhz / 1000.0;  // measured once per process: the same clock cpu_peak uses
  const CpuPeak p = cpu_peak(2, DType::f32);
  EXPECT_EQ(p.flop_per_cycle, fp32) << p.description;
  EXPECT_NEAR(p.gflops, 2 * fp32 * ghz, 1e-9 * p.gflops) << p.description;
  // bf16 runs on the unit the process's matrix dispatch chose (LOOM_MAX_CPU_ISA may lower it):
  // AMX tiles at Intel's published 1024 FLOP/cycle, VDPBF16PS at twice the FMA rate, else fp32.
  const kernels::cpu::MatrixPath path = kernels::cpu::matrix_dispatch().path;
  const double bf16 = path == kernels::cpu::MatrixPath::amx_bf16      ? 1024
                      : path == kernels::cpu::MatrixPath::avx512_bf16 ? 2 * fp32
                                                                      : fp32;
  if (path != kernels::cpu::MatrixPath::fp32) {
    EXPECT_TRUE(facts.flags.count("avx512_bf16")) << "a bf16 matrix path on a CPU whose flags lack avx512_bf16";
  }
  EXPECT_EQ(cpu_peak(2, DType::bf16).flop_per_cycle, bf16) << cpu_peak(2, DType::bf16).description;
}

TEST(Hardware, PeakGflopsOverridesTheDerivationWhenItIsAPositiveNumber) {
  {
    const PeakOverride given("100");
    const CpuPeak p = cpu_peak(2, DType::f32);
    EXPECT_EQ(p.gflops, 100);
    EXPECT_EQ(p.description, "fp32 FMA: LOOM_PEAK_GFLOPS=100");
  }
  for (const char* ignored : {"0", "-5", "fast", ""}) {
    const PeakOverride given(ignored);
    const CpuPeak p = cpu_peak(2, DType::f32);
    EXPECT_EQ(p.description.find("LOOM_PEAK_GFLOPS"), std::string::npos) << ignored << ": " << p.description;
    EXPECT_GT(p.flop_per_cycle, 0) << ignored;
  }
}

TEST(Hardware, ThisMachinesClockIsAPlausibleOne) {
  // Timed (or read from cpufreq): a miscounted chain would put it far outside what any x86-64
  // core runs at.
  const CpuClock c = cpu_clock();
  EXPECT_GT(c.mhz, 500) << c.source;
  EXPECT_LT(c.mhz, 7000) << c.source;
  EXPECT_FALSE(c.source.empty());
}
