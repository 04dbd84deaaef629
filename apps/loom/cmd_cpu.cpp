// `loom cpu`: the processor and the matrix path Loom's bf16 GEMMs take on it (AMX-BF16,
// AVX512-BF16 or fp32, after LOOM_MAX_CPU_ISA), as `loom train` would choose it, and the peak
// FLOP/s its MFU is measured against for fp32 and bf16 compute. The bench scripts print the path
// next to every figure.
#include <iostream>
#include <string>

#include "command.h"
#include "loom/core/error.h"
#include "loom/core/parallel.h"
#include "loom/runtime/cpu/cpu_backend.h"
#include "loom/runtime/cpu/cpu_peak.h"

namespace {

int cpu_command(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::cerr << "usage: loom cpu   (takes no arguments)\n";
    return 2;
  }
  try {
    const loom::runtime::CpuBackend cpu;  // raises on a bad LOOM_MAX_CPU_ISA
    std::cout << "cpu: " << loom::runtime::cpu::cpu_model_name() << "\ncpu matrix path: " << cpu.matrix_path() << "\n";
    // The peaks `loom train` measures MFU against with its default threads, per compute dtype.
    for (loom::DType d : {loom::DType::f32, loom::DType::bf16})
      std::cout << "mfu peak (" << loom::dtype_name(d) << " compute): "
                << cpu.peak_flops(d, loom::num_threads()).description << "\n";
  } catch (const loom::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

LOOM_COMMAND("cpu", "print the CPU and the matrix path (AMX-BF16, AVX512-BF16, fp32) Loom takes on it", cpu_command);
