#include "loom/kernels/cpu/cpu_isa.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>

#include "loom/core/error.h"

namespace loom::kernels::cpu {

namespace {

constexpr const char* kAccepted = "amx_bf16, avx512_bf16 or fp32";

bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Linux keeps AMX tile data off until a process asks (arch_prctl ARCH_REQ_XCOMP_PERM); without
// the permission the first tile instruction faults. oneDNN asks too; asking twice is harmless.
bool request_amx_permission() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// The oneDNN ISA cap for a path: the highest instruction set the path may use.
dnnl::cpu_isa onednn_isa(MatrixPath path) {
  switch (path) {
    case MatrixPath::amx_bf16: return dnnl::cpu_isa::avx512_core_amx;
    case MatrixPath::avx512_bf16: return dnnl::cpu_isa::avx512_core_bf16;
    case MatrixPath::fp32: break;
  }
  return dnnl::cpu_isa::avx512_core_vnni;  // fp32 work only: no bf16 instructions
}

// The path oneDNN's effective ISA (after the cap) can run.
MatrixPath path_of_onednn_isa(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx:
    case dnnl::cpu_isa::all: return MatrixPath::amx_bf16;
    case dnnl::cpu_isa::avx512_core_bf16: return MatrixPath::avx512_bf16;
    default: return MatrixPath::fp32;
  }
}

}  // namespace

const char* matrix_path_name(MatrixPath path) {
  switch (path) {
    case MatrixPath::amx_bf16: return "amx_bf16";
    case MatrixPath::avx512_bf16: return "avx512_bf16";
    case MatrixPath::fp32: return "fp32";
  }
  return "?";
}

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(1, 0, &a, &b, &c, &d)) return f;
  const bool osxsave = bit(c, 27), avx = bit(c, 28), fma = bit(c, 12);
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool os_ymm = (xcr0 & 0x6) == 0x6;      // SSE + AVX state
  const bool os_zmm = (xcr0 & 0xE6) == 0xE6;    // + opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_tile = (xcr0 & 0x60000) == 0x60000;  // XTILECFG + XTILEDATA
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0, a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7);
  if (a7 >= 1) __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71);
  f.avx2_fma = os_ymm && bit(b7, 5) && fma;
  f.avx512_core = os_zmm && bit(b7, 16) && bit(b7, 17) && bit(b7, 30) && bit(b7, 31);
  f.avx512_bf16 = f.avx512_core && bit(a71, 5);
  f.amx_bf16 = f.avx512_core && os_tile && bit(d7, 22) && bit(d7, 24) && request_amx_permission();
  return f;
}

MatrixPath best_matrix_path(const CpuFeatures& f) {
  if (f.amx_bf16) return MatrixPath::amx_bf16;
  if (f.avx512_bf16) return MatrixPath::avx512_bf16;
  return MatrixPath::fp32;
}

std::optional<MatrixPath> parse_max_cpu_isa(const std::string& value) {
  std::string v = value;
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (v.empty()) return std::nullopt;
  for (MatrixPath p : {MatrixPath::amx_bf16, MatrixPath::avx512_bf16, MatrixPath::fp32})
    if (v == matrix_path_name(p)) return p;
  LOOM_THROW(ConfigError, "LOOM_MAX_CPU_ISA=", value, " is not a CPU matrix path: use ", kAccepted,
             " (the highest path the bf16 GEMMs may take), or unset it to take the best the CPU has");
}

MatrixPath select_matrix_path(const CpuFeatures& features, std::optional<MatrixPath> cap) {
  const MatrixPath best = best_matrix_path(features);
  return cap ? std::min(best, *cap) : best;
}

const MatrixDispatch& matrix_dispatch() {
  static const MatrixDispatch dispatch = [] {
    MatrixDispatch d;
    d.features = detect_cpu_features();
    const char* env = std::getenv("LOOM_MAX_CPU_ISA");
    d.cap = parse_max_cpu_isa(env ? env : "");
    d.path = select_matrix_path(d.features, d.cap);
    if (d.cap && *d.cap < best_matrix_path(d.features))
      d.note = std::string("capped by LOOM_MAX_CPU_ISA=") + matrix_path_name(*d.cap);
    // Hand the cap to oneDNN before it creates any primitive (the call fails afterwards), then
    // check that this oneDNN can run the path: its CPU detection is what its kernels obey.
    try {
      dnnl::set_max_cpu_isa(onednn_isa(d.path));
    } catch (const dnnl::error&) {
      // Already fixed (ONEDNN_MAX_CPU_ISA in the environment, or a primitive made before us):
      // oneDNN's effective ISA below still decides.
    }
    const MatrixPath onednn = path_of_onednn_isa(dnnl::get_effective_cpu_isa());
    if (onednn < d.path) {
      d.note = std::string("the CPU reports ") + matrix_path_name(d.path) + " but oneDNN " +
               std::to_string(dnnl::version()->major) + "." + std::to_string(dnnl::version()->minor) +
               " cannot use it";
      d.path = onednn;
    }
    return d;
  }();
  return dispatch;
}

std::string describe_matrix_path(const MatrixDispatch& d) {
  std::string s = matrix_path_name(d.path);
  switch (d.path) {
    case MatrixPath::amx_bf16: s += " (bf16 GEMMs on oneDNN, AMX tiles; fp32 GEMMs on oneDNN"; break;
    case MatrixPath::avx512_bf16: s += " (bf16 GEMMs on oneDNN, AVX512-BF16; fp32 GEMMs on oneDNN"; break;
    case MatrixPath::fp32:
      s += " (bf16 widened to fp32 and fp32 GEMMs on OpenBLAS";
      if (best_matrix_path(d.features) == MatrixPath::fp32)
        s += ": the CPU has neither AMX-BF16 nor AVX512-BF16";
      break;
  }
  if (!d.note.empty()) s += "; " + d.note;
  s += "; CPU:";
  if (d.features.avx2_fma) s += " avx2";
  if (d.features.avx512_core) s += " avx512";
  if (d.features.avx512_bf16) s += " avx512_bf16";
  if (d.features.amx_bf16) s += " amx_bf16";
  if (!d.features.avx2_fma && !d.features.avx512_core) s += " baseline x86-64";
  return s + ")";
}

}  // namespace loom::kernels::cpu
