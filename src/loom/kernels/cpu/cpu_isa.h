// Which matrix unit bf16 GEMMs run on, chosen once, at run time, from what the processor reports
// (never at build time: one binary serves a Zen 3 with AVX2 only, a Zen 5 with AVX512-BF16 and a
// Xeon with AMX).
//
//   amx_bf16     AMX tiles (TMUL, bf16 dot products into fp32 tiles)     → oneDNN matmul
//   avx512_bf16  AVX512-BF16 (vdpbf16ps: bf16 pairs into fp32 lanes)     → oneDNN matmul
//   fp32         neither: bf16 operands widened to fp32, OpenBLAS sgemm, result rounded once
// On the two bf16 paths fp32 GEMMs go to oneDNN as well (cpu/gemm.cpp says why); on the fp32
// path they stay on OpenBLAS.
//
// The highest path the CPU supports is taken; LOOM_MAX_CPU_ISA=avx512_bf16 or =fp32 caps it (so
// tests and benchmarks can run every path the machine has), and the cap is handed to oneDNN as
// its max-ISA control (dnnl::set_max_cpu_isa), so oneDNN never uses an instruction set above the
// chosen path either. Features come from CPUID (and XGETBV / the Linux AMX permission request:
// the OS must save the vector and tile state, or the instructions fault); oneDNN then confirms it
// can use the path (an older oneDNN may not know a newer CPU), else the next lower one is taken
// and the reason recorded.
//
// The chosen path is printed at start-up, written to metrics.jsonl's run header and printed by
// every bench program (describe_matrix_path).
#pragma once

#include <optional>
#include <string>

namespace loom::kernels::cpu {

// Ordered: a higher value is a faster path.
enum class MatrixPath { fp32 = 0, avx512_bf16 = 1, amx_bf16 = 2 };

const char* matrix_path_name(MatrixPath path);  // "fp32", "avx512_bf16", "amx_bf16"

// What the processor (and the OS) allow. avx512_core: AVX-512 F+BW+VL+DQ with the OS saving the
// ZMM state; amx_bf16: AMX-TILE+AMX-BF16 with the tile data permission granted.
struct CpuFeatures {
  bool avx2_fma = false;
  bool avx512_core = false;
  bool avx512_bf16 = false;
  bool amx_bf16 = false;
};

CpuFeatures detect_cpu_features();

// The highest path `features` allow.
MatrixPath best_matrix_path(const CpuFeatures& features);

// Parses LOOM_MAX_CPU_ISA's value ("amx_bf16", "avx512_bf16", "fp32"; case-insensitive); empty
// means no cap (nullopt). Anything else raises ConfigError naming the variable and the accepted
// values.
std::optional<MatrixPath> parse_max_cpu_isa(const std::string& value);

// min(best_matrix_path(features), cap).
MatrixPath select_matrix_path(const CpuFeatures& features, std::optional<MatrixPath> cap);

struct MatrixDispatch {
  MatrixPath path = MatrixPath::fp32;
  CpuFeatures features;
  std::optional<MatrixPath> cap;  // from LOOM_MAX_CPU_ISA
  std::string note;               // why the path is below what the CPU reports, when it is
};

// The process's dispatch: CPUID, LOOM_MAX_CPU_ISA, oneDNN's confirmation. Resolved on the first
// call (thread-safe) and fixed for the life of the process; a bad LOOM_MAX_CPU_ISA raises
// ConfigError on that first call (the trainer and the benches make it at start-up).
const MatrixDispatch& matrix_dispatch();

// Whether this process multiplies bf16 operands on bf16 matrix units (AMX or AVX512-BF16), the
// one test every bf16 kernel asks; false on the fp32 path.
inline bool bf16_matrix_units() { return matrix_dispatch().path != MatrixPath::fp32; }

// One line for logs and bench output, e.g.
//   "amx_bf16 (bf16 GEMMs on oneDNN, AMX tiles; CPU: avx2 avx512 avx512_bf16 amx_bf16)"
//   "fp32 (bf16 widened to fp32 on OpenBLAS: the CPU has neither AMX-BF16 nor AVX512-BF16; CPU: avx2)"
std::string describe_matrix_path(const MatrixDispatch& dispatch);
inline std::string describe_matrix_path() { return describe_matrix_path(matrix_dispatch()); }

}  // namespace loom::kernels::cpu
