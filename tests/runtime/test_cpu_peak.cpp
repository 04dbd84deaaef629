// The MFU peak (runtime/cpu/cpu_peak.h) as a pure function of the CPU's identity, features, clock and
// threads: each unit's FLOP/cycle, the vendor/family rules for 512-bit width, the clock's source
// and the fallbacks, all stated in the description.
#include <gtest/gtest.h>

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

TEST(Hardware, ThisMachinesPeakMatchesTheDerivationOfItsOwnFacts) {
  if (std::getenv("LOOM_PEAK_GFLOPS")) GTEST_SKIP() << "LOOM_PEAK_GFLOPS overrides the derivation";
  const auto& dispatch = kernels::cpu::matrix_dispatch();
  for (DType d : {DType::f32, DType::bf16}) {
    const CpuPeak p = cpu_peak(2, d);
    const CpuPeak expected = derive_peak_flops(peak_unit(d, dispatch.path), cpu_identity(), dispatch.features,
                                                 cpu_clock(), 2);
    EXPECT_EQ(p.description, expected.description);
    EXPECT_GT(p.gflops, 0);
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
