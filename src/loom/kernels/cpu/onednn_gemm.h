// Matrix multiply through oneDNN's matmul primitive: the GEMM the bf16 matrix paths of
// kernels/cpu/cpu_isa.h run on (AMX tiles or AVX512-BF16 dot products; fp32 accumulation inside
// the unit). gemm() in cpu/gemm.h routes bf16 operands here when matrix_dispatch() picked such a
// path; everything else stays on OpenBLAS.
//
// Why these choices:
// - Transposes and row pitches are memory strides handed to oneDNN, never copies: a linear's
//   weight [N, K] is read in place as the [K, N] operand, a strided view in place too.
// - One primitive per (shapes, strides, dtypes, alpha, beta), created on first use and cached for
//   the life of the process: creating a primitive descriptor costs tens of microseconds (the
//   implementation search), executing a cached one nothing beyond the product. A training step
//   meets the same few dozen shapes every time (grouped expert GEMMs, whose row counts change
//   every step, are why the cache is bounded and starts over past 1024 primitives).
// - alpha is oneDNN's output scale; beta its `sum` post-op, so c += a·b reads and writes c once
//   (no fp32 temporary): weight grads of bf16 operands land in an fp32 c unrounded.
// - oneDNN is built on the OpenMP runtime (Debian's libdnnl uses libgomp): it threads over the
//   same pool as OpenBLAS and our kernels, and runs serially inside a parallel region (bmm's
//   per-batch loop), never oversubscribing.
#pragma once

#include <string>

#include "loom/core/tensor.h"

namespace loom::kernels::cpu {

// c = alpha · op(a) · op(b) + beta · c for 2-D a, b, c; a and b the same dtype, float32 or
// bfloat16; c float32, or bfloat16 for bf16 operands (rounded once from the fp32 accumulator).
// Requires k = inner size ≥ 1 and positive strides (cpu/gemm.h handles the rest).
void onednn_gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                 double alpha, double beta);

// Whether this oneDNN, on this CPU, has a matmul for `operands` (float32 or bfloat16) operands
// (bf16 needs AVX-512 at least in oneDNN 2.6: on an AVX2 CPU the answer is false).
bool onednn_has_matmul(DType operands);

// Primitives created so far (tests check that a repeated shape reuses its primitive).
size_t onednn_cached_primitives();

// The name of the oneDNN implementation a product of this shape runs, e.g.
// "brg:avx512_core_amx_bf16" or "gemm:jit" (benchmarks print it).
std::string onednn_implementation(DType operands, int64_t m, int64_t n, int64_t k);

}  // namespace loom::kernels::cpu
