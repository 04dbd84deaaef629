// Matrix multiply. When the CPU has bf16 matrix units (AMX or AVX512-BF16; cpu/cpu_isa.h picks at
// run time) bf16 operands, and fp32 operands of all but small products, go to oneDNN
// (cpu/onednn_gemm.h: bf16 products summed in fp32; its fp32 kernels outrun OpenBLAS's on those
// CPUs, gemm.cpp has the figures). Everything else runs on OpenBLAS (sgemm/dgemm): bf16/f16
// operands are widened to fp32, multiplied in fp32 and the result rounded back once, as a tensor
// core with fp32 accumulation would. Both round the fp32 sum once; they differ in summation order.
#pragma once

#include <optional>

#include "loom/core/tensor.h"

namespace loom::kernels::cpu {

// c = alpha * op(a) · op(b) + beta * c for 2-D a, b, c (op = transpose when the flag is set).
// a and b may be any 2-D views; c is 2-D of a's dtype, or float32 for bf16/f16 operands (the fp32
// accumulation stays unrounded: weight grads of bf16 parameters use this).
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
          double alpha = 1.0, double beta = 0.0);

// Returns op(a) · op(b) as a new contiguous tensor of `out_dtype` (default: a's dtype).
Tensor matmul_2d(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                 std::optional<DType> out_dtype = std::nullopt);

// Batched: a [B, M, K] (or [B, K, M] with trans_a), b likewise, c [B, M, N] contiguous.
// Small problems run one sgemm per batch entry on each thread; large ones let BLAS thread.
void bmm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
         double alpha = 1.0, double beta = 0.0);

}  // namespace loom::kernels::cpu
