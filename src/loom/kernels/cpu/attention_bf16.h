// The flash kernel's tile products on AVX512-BF16 (vdpbf16ps): bf16 operands, fp32 accumulation.
// Called by cpu/attention.cpp only after the run-time dispatch found the instructions
// (matrix_dispatch(), cpu_isa.h); the functions are compiled with target attributes in their own
// file, so the rest of the build (and the binary on an AVX2-only CPU) never uses AVX-512.
//
// vdpbf16ps multiplies bf16 *pairs*: each fp32 lane gains a[2p]·b[2p] + a[2p+1]·b[2p+1]. So the
// operands are handed over as 32-bit words, each holding two bf16 that are neighbours along the
// product's inner dimension (low half first, a zero pads an odd inner size):
//   A(r, p) = word a[r·a_row + p·a_inner]   (rows of A; any layout: it is broadcast word by word)
//   B(p, c) = word b[p·ldb + c]             (16 columns of B per vector load)
// The pack_* functions write those words from fp32 rows (the kernel's operands are fp32 copies of
// bf16 tensors, so rounding them is exact; P and dS are rounded to bf16 here, once, as operands).
#pragma once

#include <cstdint>

namespace loom::kernels::cpu::bf16_tiles {

// dst[r·ceil(k/2) + p] = (src[r][2p], src[r][2p+1]): rows of a row-major [rows, k] (leading dim
// ld) as A words (a_row = ceil(k/2), a_inner = 1).
void pack_rows(const float* src, int64_t ld, int64_t rows, int64_t k, uint32_t* dst);

// dst[p·ldd + c] = (src[2p][c], src[2p+1][c]): a row-major [k, n] as B words, or the transpose of
// a row-major [k, m] as A words (a_row = 1, a_inner = ldd).
void pack_pairs(const float* src, int64_t ld, int64_t k, int64_t n, uint32_t* dst, int64_t ldd);

// dst[p·ldd + j] = (src[j][2p], src[j][2p+1]): the transpose of a row-major [n, k] (K or V rows for
// Q·Kᵀ and dO·Vᵀ) as B words.
void pack_cols(const float* src, int64_t ld, int64_t n, int64_t k, uint32_t* dst, int64_t ldd);

// c[m, n] = alpha · A·B + beta · c over `pairs` inner words; beta 0 never reads c.
void gemm(int64_t m, int64_t n, int64_t pairs, float alpha, const uint32_t* a, int64_t a_row,
          int64_t a_inner, const uint32_t* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace loom::kernels::cpu::bf16_tiles
