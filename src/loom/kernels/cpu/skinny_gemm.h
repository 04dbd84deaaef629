// The product of a few rows with a weight: c[m, n] = alpha · a[m, k] · b[n, k]ᵀ + beta · c, bf16
// operands, m ≤ kSkinnyMaxRows (a decode step: one row per sequence). Such a product is bound
// by reading b once; oneDNN's matmul packs b into its blocked layout on every call, which for a
// single row reads and writes the weights again before multiplying, so it ran a Qwen3-0.6B decode
// step at 15% of the memory-bandwidth bound. Here every row of b streams through once, from
// memory, into m fp32 dot products:
//
//   AVX512-BF16  vdpbf16ps on 32 bf16 per load, the CPUs of the bf16 matrix paths
//   AVX2 + FMA   b widened to fp32 in registers (a shift), the fp32 path's CPUs
//
// AVX512-BF16 reads each row of b front to back with a software prefetch ahead (a thread's rows
// are one contiguous stream); AVX2 reads two rows side by side per load of a. The accumulators
// stay in registers over the whole inner size; rows of c are spread over the threads, so the result does not depend on the
// thread count. gemm (gemm.cpp) calls it when skinny_gemm_applies.
#pragma once

#include <cstdint>
#include <optional>

#include "loom/core/tensor.h"

namespace loom::kernels::cpu {

inline constexpr int64_t kSkinnyMaxRows = 4;

enum class SkinnyKernel { avx512_bf16, avx2_fma };
const char* skinny_kernel_name(SkinnyKernel kernel);

// The process's kernel: AVX512-BF16 on the bf16 matrix paths, AVX2+FMA on the fp32 path of a CPU
// that has it, none otherwise.
std::optional<SkinnyKernel> skinny_kernel();
// Whether the CPU can run `kernel` (tests run every kernel the machine has).
bool skinny_kernel_supported(SkinnyKernel kernel);

// bf16 a (rows contiguous) times bf16 bᵀ (b [n, k], rows contiguous) into fp32 or bf16 c (rows
// contiguous), m ≤ kSkinnyMaxRows, with a kernel for this CPU.
bool skinny_gemm_applies(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c);
void skinny_gemm(const Tensor& a, const Tensor& b, Tensor& c, double alpha, double beta, SkinnyKernel kernel);

}  // namespace loom::kernels::cpu
