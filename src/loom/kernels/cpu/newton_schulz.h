// Newton–Schulz orthogonalisation for Muon (Keller Jordan's quintic iteration, as MindFormers'
// muon.py runs it), emulating the reference's bf16 tensors on a CPU: values are kept in fp32
// buffers that only ever hold bf16-representable numbers. Where the reference produces a bf16
// tensor we round (nearest-even):
//   input      X0 = bf16(U) (done by muon_momentum)
//   normalise  n = bf16(‖X‖_F) (sum of squares in fp64), d = bf16(n + eps), X = bf16(X / d)
//   per step   A = bf16(X·Xᵀ)                  (fp32 accumulation, like a bf16 GEMM)
//              B = bf16(b·A + c·(A·A))         (addmm: fp32 epilogue, one rounding)
//              X = bf16(a·X + B·X)             (addmm: fp32 epilogue, one rounding)
// GEMMs are cblas (fp32) on bf16-exact inputs: every product is exact in fp32, so the only
// difference from a bf16 tensor-core GEMM is the accumulation order. Compiled with
// -ffp-contract=off like the other optimizer kernels (optimizer.h).
#pragma once

#include <cstdint>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels::cpu {

using kernels::MuonPiece;
using kernels::NsCoefficients;

// Scratch buffers reused across calls (one per thread).
struct NsWorkspace {
  std::vector<float> x, a, b, y;
};

// Orthogonalises the rows×cols row-major matrix `x` (bf16-exact values) in place, one iteration
// per schedule entry. Wide orientation internally (transposed when rows > cols, so the Gram
// matrix is the small side).
void newton_schulz_bf16(float* x, int64_t rows, int64_t cols,
                        const std::vector<NsCoefficients>& schedule, float eps, NsWorkspace& ws);

// update: fp32 [matrices, rows, cols], contiguous. Every piece of every matrix is replaced by
// piece.scale · NewtonSchulz(piece); pieces must tile the matrix (values outside every piece are
// left as they are). Small pieces run in parallel with single-threaded BLAS, large ones one at a
// time with multi-threaded BLAS.
void muon_orthogonalize(Tensor& update, const std::vector<MuonPiece>& pieces,
                        const std::vector<NsCoefficients>& schedule, float eps);

}  // namespace loom::kernels::cpu
