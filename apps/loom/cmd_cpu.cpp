// `loom cpu`: the processor and the matrix path Loom's bf16 GEMMs take on it (AMX-BF16,
// AVX512-BF16 or fp32, after LOOM_MAX_CPU_ISA), as `loom train` would choose it. The bench
// scripts print it next to every figure.
#include <iostream>
#include <string>

#include "command.h"
#include "loom/core/error.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/train/hardware.h"

namespace {

int cpu_command(const std::vector<std::string>& args) {
  if (!args.empty()) {
    std::cerr << "usage: loom cpu   (takes no arguments)\n";
    return 2;
  }
  try {
    const std::string path = loom::kernels::cpu::describe_matrix_path();  // raises on a bad LOOM_MAX_CPU_ISA
    std::cout << "cpu: " << loom::train::cpu_model_name() << "\ncpu matrix path: " << path << "\n";
  } catch (const loom::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

LOOM_COMMAND("cpu", "print the CPU and the matrix path (AMX-BF16, AVX512-BF16, fp32) Loom takes on it", cpu_command);
