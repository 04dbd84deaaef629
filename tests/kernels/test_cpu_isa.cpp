// kernels/cpu/cpu_isa.h: the path is the best the CPU reports, capped by LOOM_MAX_CPU_ISA; bad
// values name the variable and the accepted values; detection agrees with the kernel's
// /proc/cpuinfo flags; the process's dispatch is one oneDNN can run.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "loom/core/error.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/kernels/cpu/onednn_gemm.h"

using namespace loom;
using namespace loom::kernels::cpu;

namespace {
std::string cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("flags", 0) == 0) return line.substr(line.find(':') + 1) + " ";
  return "";
}
bool has_flag(const std::string& flags, const std::string& f) { return flags.find(" " + f + " ") != std::string::npos; }
}  // namespace

TEST(CpuIsa, BestPathIsTheHighestUnitTheCpuHas) {
  CpuFeatures none{true, false, false, false};
  CpuFeatures avx512bf16{true, true, true, false};
  CpuFeatures amx{true, true, true, true};
  EXPECT_EQ(best_matrix_path(none), MatrixPath::fp32);
  EXPECT_EQ(best_matrix_path(CpuFeatures{true, true, false, false}), MatrixPath::fp32);  // AVX-512 without BF16
  EXPECT_EQ(best_matrix_path(avx512bf16), MatrixPath::avx512_bf16);
  EXPECT_EQ(best_matrix_path(amx), MatrixPath::amx_bf16);
}

TEST(CpuIsa, MaxCpuIsaCapsThePathAndNeverRaisesIt) {
  CpuFeatures none{true, false, false, false};
  CpuFeatures avx512bf16{true, true, true, false};
  CpuFeatures amx{true, true, true, true};
  EXPECT_EQ(select_matrix_path(amx, std::nullopt), MatrixPath::amx_bf16);
  EXPECT_EQ(select_matrix_path(amx, MatrixPath::avx512_bf16), MatrixPath::avx512_bf16);
  EXPECT_EQ(select_matrix_path(amx, MatrixPath::fp32), MatrixPath::fp32);
  EXPECT_EQ(select_matrix_path(avx512bf16, MatrixPath::amx_bf16), MatrixPath::avx512_bf16);
  EXPECT_EQ(select_matrix_path(avx512bf16, MatrixPath::fp32), MatrixPath::fp32);
  EXPECT_EQ(select_matrix_path(none, MatrixPath::amx_bf16), MatrixPath::fp32);
}

TEST(CpuIsa, ParsesTheAcceptedValuesAndNamesThemOnABadOne) {
  EXPECT_EQ(parse_max_cpu_isa(""), std::nullopt);
  EXPECT_EQ(parse_max_cpu_isa("fp32"), MatrixPath::fp32);
  EXPECT_EQ(parse_max_cpu_isa("AVX512_BF16"), MatrixPath::avx512_bf16);
  EXPECT_EQ(parse_max_cpu_isa("amx_bf16"), MatrixPath::amx_bf16);
  for (const char* bad : {"avx2", "amx", "bf16", "fp16"}) {
    try {
      parse_max_cpu_isa(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(std::string("LOOM_MAX_CPU_ISA=") + bad), std::string::npos) << msg;
      EXPECT_NE(msg.find("amx_bf16, avx512_bf16 or fp32"), std::string::npos) << msg;
    }
  }
  EXPECT_STREQ(matrix_path_name(MatrixPath::avx512_bf16), "avx512_bf16");
}

TEST(CpuIsa, DetectionAgreesWithTheKernelsFlags) {
  const std::string flags = cpuinfo_flags();
  if (flags.empty()) GTEST_SKIP() << "no /proc/cpuinfo flags line";
  const CpuFeatures f = detect_cpu_features();
  EXPECT_EQ(f.avx2_fma, has_flag(flags, "avx2") && has_flag(flags, "fma"));
  EXPECT_EQ(f.avx512_core, has_flag(flags, "avx512f") && has_flag(flags, "avx512bw") &&
                               has_flag(flags, "avx512vl") && has_flag(flags, "avx512dq"));
  EXPECT_EQ(f.avx512_bf16, f.avx512_core && has_flag(flags, "avx512_bf16"));
  // AMX also needs the OS's tile-data permission, which a sandbox may refuse: only one way.
  if (f.amx_bf16) {
    EXPECT_TRUE(has_flag(flags, "amx_bf16") && has_flag(flags, "amx_tile"));
  }
}

TEST(CpuIsa, ProcessDispatchIsCappedAndRunnable) {
  const MatrixDispatch& d = matrix_dispatch();
  EXPECT_EQ(&d, &matrix_dispatch()) << "resolved once";
  const char* env = std::getenv("LOOM_MAX_CPU_ISA");
  const MatrixPath wanted = select_matrix_path(d.features, parse_max_cpu_isa(env ? env : ""));
  EXPECT_LE(static_cast<int>(d.path), static_cast<int>(wanted));
  if (d.path != wanted) {
    EXPECT_FALSE(d.note.empty()) << "a path below the CPU's must say why";
  }
  // A bf16 path is chosen only where oneDNN has a bf16 matmul.
  if (d.path != MatrixPath::fp32) {
    EXPECT_TRUE(onednn_has_matmul(DType::bf16));
  }
  const std::string line = describe_matrix_path(d);
  EXPECT_EQ(line.rfind(matrix_path_name(d.path), 0), 0u) << line;
  EXPECT_NE(line.find("CPU:"), std::string::npos) << line;
}
