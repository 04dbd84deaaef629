// Newton–Schulz orthogonalisation for Muon (semantics §2.2), emulating the reference's bf16
// tensors on a CPU: values are kept in fp32 buffers that only ever hold bf16-representable
// numbers. Where the reference produces a bf16 tensor we round (nearest-even):
//   input      X0 = bf16(U) (done by the caller)
//   normalise  n = bf16(‖X‖_F) (sum of squares in fp64), d = bf16(n + eps), X = bf16(X / d)
//   per step   A = bf16(X·Xᵀ)                  (fp32 accumulation, like a bf16 GEMM)
//              B = bf16(b·A + c·(A·A))         (addmm: fp32 epilogue, one rounding)
//              X = bf16(a·X + B·X)             (addmm: fp32 epilogue, one rounding)
// GEMMs are cblas (fp32) on bf16-exact inputs: every product is exact in fp32, so the only
// difference from a bf16 tensor-core GEMM is the accumulation order.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace loom::optim {

struct NsCoefficients {
  float a, b, c;
};

// One triplet per iteration.
using NsSchedule = std::vector<NsCoefficients>;

// `ns_coefficients` flat [a, b, c] (repeated ns_steps times) or segmented
// [[[a, b, c], count], ...] (steps = Σ count; ns_steps is then ignored). ConfigError naming
// `path` on malformed input. A null value gives the default quintic (3.4445, -4.7750, 2.0315).
NsSchedule make_ns_schedule(const nlohmann::ordered_json& coefficients, int64_t ns_steps,
                            const std::string& path);

// Scratch buffers reused across calls (one per thread).
struct NsWorkspace {
  std::vector<float> x, a, b, y;
};

// Orthogonalises the rows×cols row-major matrix `x` (bf16-exact values) in place. Wide
// orientation internally (transposed when rows > cols, so the Gram matrix is the small side).
void newton_schulz_bf16(float* x, int64_t rows, int64_t cols, const NsSchedule& schedule,
                        float eps, NsWorkspace& ws);

// Rounds n floats to bf16-representable values in place.
void round_to_bf16_inplace(float* x, int64_t n);

}  // namespace loom::optim
