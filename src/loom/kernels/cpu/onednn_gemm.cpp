#include "loom/kernels/cpu/onednn_gemm.h"

#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

#include "loom/kernels/cpu/cpu_isa.h"

namespace loom::kernels::cpu {

namespace {

using dt = dnnl::memory::data_type;

dt onednn_dtype(DType d) {
  switch (d) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    default: break;
  }
  LOOM_THROW(DTypeError, "onednn_gemm: ", dtype_name(d), " operands are not supported (float32 or bfloat16)");
}

const dnnl::engine& cpu_engine() {
  // The dispatch first: its max-ISA cap must reach oneDNN before any primitive exists.
  matrix_dispatch();
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Logical [rows, cols] of op(t) as oneDNN strides (elements).
dnnl::memory::dims op_strides(const Tensor& t, bool trans) {
  return trans ? dnnl::memory::dims{t.strides()[1], t.strides()[0]}
               : dnnl::memory::dims{t.strides()[0], t.strides()[1]};
}

// Everything a primitive depends on: m, n, k, the three operands' strides, the dtypes, alpha and
// beta (as bits: the key must not compare floats).
using Key = std::array<int64_t, 13>;

// A training step meets a few dozen shapes, but grouped expert GEMMs have a row count per expert
// that changes every step: past this many primitives the cache starts over rather than grow
// for the life of the process.
constexpr size_t kMaxCachedPrimitives = 1024;

struct Cache {
  std::mutex mutex;
  std::map<Key, dnnl::matmul> primitives;
};
Cache& cache() {
  static Cache c;
  return c;
}

int64_t bits_of(double v) {
  int64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}

dnnl::matmul::primitive_desc make_desc(dt operands, dt out, int64_t m, int64_t n, int64_t k,
                                       const dnnl::memory::dims& sa, const dnnl::memory::dims& sb,
                                       const dnnl::memory::dims& sc, double alpha, double beta) {
  dnnl::memory::desc a_md({m, k}, operands, sa), b_md({k, n}, operands, sb), c_md({m, n}, out, sc);
  dnnl::primitive_attr attr;
  if (alpha != 1.0) attr.set_output_scales(0, {static_cast<float>(alpha)});
  if (beta != 0.0) {
    dnnl::post_ops ops;
    ops.append_sum(static_cast<float>(beta));
    attr.set_post_ops(ops);
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, c_md), attr, cpu_engine());
}

}  // namespace

void onednn_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                 double alpha, double beta) {
  LOOM_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2, ShapeError,
             "onednn_gemm: operands must be 2-D, got ", a.shape().str(), ", ", b.shape().str(),
             " and ", c.shape().str());
  check_same_dtype(a, b, "onednn_gemm");
  const int64_t m = c.shape()[0], n = c.shape()[1];
  const int64_t k = trans_a ? a.shape()[0] : a.shape()[1];
  LOOM_CHECK((trans_a ? a.shape()[1] : a.shape()[0]) == m && (trans_b ? b.shape()[1] : b.shape()[0]) == k &&
                 (trans_b ? b.shape()[0] : b.shape()[1]) == n && k >= 1,
             ShapeError, "onednn_gemm: cannot multiply ", a.shape().str(), trans_a ? "ᵀ" : "", " by ",
             b.shape().str(), trans_b ? "ᵀ" : "", " into ", c.shape().str(), " (inner size must be >= 1)");
  LOOM_CHECK(c.dtype() == DType::f32 || c.dtype() == a.dtype(), DTypeError, "onednn_gemm: output ",
             dtype_name(c.dtype()), " cannot hold a product of ", dtype_name(a.dtype()), " operands");
  const dt operands = onednn_dtype(a.dtype()), out = onednn_dtype(c.dtype());
  const dnnl::memory::dims sa = op_strides(a, trans_a), sb = op_strides(b, trans_b),
                           sc = op_strides(c, false);
  for (const auto& s : {sa, sb, sc})
    LOOM_CHECK(s[0] > 0 && s[1] > 0, ValueError, "onednn_gemm: operands need positive strides (",
               "make broadcast or empty-stride views contiguous first)");
  const Key key{m, n, k, sa[0], sa[1], sb[0], sb[1], sc[0], sc[1], static_cast<int64_t>(operands),
                static_cast<int64_t>(out), bits_of(alpha), bits_of(beta)};
  dnnl::matmul prim;
  {
    Cache& cc = cache();
    std::lock_guard<std::mutex> lock(cc.mutex);
    auto it = cc.primitives.find(key);
    if (it == cc.primitives.end() && cc.primitives.size() >= kMaxCachedPrimitives) cc.primitives.clear();
    if (it == cc.primitives.end()) {
      try {
        it = cc.primitives.emplace(key, dnnl::matmul(make_desc(operands, out, m, n, k, sa, sb, sc, alpha, beta))).first;
      } catch (const dnnl::error& e) {
        LOOM_THROW(DeviceError, "onednn_gemm: oneDNN has no ", dtype_name(a.dtype()), " matmul for [", m,
                   ", ", k, "]·[", k, ", ", n, "] on this CPU (", e.what(), "); matrix path ",
                   describe_matrix_path(), ". Set LOOM_MAX_CPU_ISA=fp32 to use OpenBLAS");
      }
    }
    prim = it->second;
  }
  const dnnl::engine& eng = cpu_engine();
  dnnl::memory::desc a_md({m, k}, operands, sa), b_md({k, n}, operands, sb), c_md({m, n}, out, sc);
  dnnl::memory am(a_md, eng, const_cast<void*>(a.raw_data()));
  dnnl::memory bm(b_md, eng, const_cast<void*>(b.raw_data()));
  dnnl::memory cm(c_md, eng, c.raw_data());
  thread_local dnnl::stream stream(eng);
  prim.execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
  stream.wait();
}

bool onednn_has_matmul(DType operands) {
  try {
    const dt d = onednn_dtype(operands);
    make_desc(d, dt::f32, 16, 16, 16, {16, 1}, {16, 1}, {16, 1}, 1.0, 0.0);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

size_t onednn_cached_primitives() {
  Cache& cc = cache();
  std::lock_guard<std::mutex> lock(cc.mutex);
  return cc.primitives.size();
}

std::string onednn_implementation(DType operands, int64_t m, int64_t n, int64_t k) {
  try {
    const dt d = onednn_dtype(operands);
    return make_desc(d, d, m, n, k, {k, 1}, {n, 1}, {n, 1}, 1.0, 0.0).impl_info_str();
  } catch (const dnnl::error&) {
    return "none";
  }
}

}  // namespace loom::kernels::cpu
