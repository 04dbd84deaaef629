// The CPU matrix path (kernels/cpu/cpu_isa.h) every bench prints next to its figures: a bf16
// figure measured on the fp32 path says nothing about AMX, and the other way round. Google
// Benchmark programs put it in their context header (AddCustomContext), the others in their
// RESULT JSON next to "cpu".
#pragma once

#include <string>

#include "loom/kernels/cpu/cpu_isa.h"

namespace loom::bench {

inline std::string cpu_matrix_path() { return kernels::cpu::describe_matrix_path(); }

}  // namespace loom::bench
