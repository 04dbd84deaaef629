// Optimizer-step kernels on CPU: the fused AdamW update, the rounded master → model copy, Muon's
// momentum and final update, and the sum of squares behind the global grad norm.
//
// The non-finite guard (optim/optimizer.h) splits each update into a decision and a write: the
// `*_is_finite` passes and muon_momentum only read the persistent state (masters, moments) and
// say whether the write pass would store inf or nan anywhere, the model copy included (a finite
// fp32 master can round to inf in bf16/f16); the write pass runs only when no rank found any.
// Both passes evaluate the same inline expressions, so the verdict is about the exact values.
//
// The arithmetic follows the reference's fp32 operation order (mindformers
// pynative/optimizer/adamw.py::_run_adamw_opt, Muon in pynative/optimizer/muon.py), and this file
// is compiled with -ffp-contract=off (kernels/CMakeLists.txt) so every operation rounds like the
// reference's separate ops: GCC's default would fuse a*b+c into FMAs and change the last bit.
//
// All tensors are contiguous; fp32 unless stated. Chunks run in parallel and never reduce across
// threads, so results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "loom/core/tensor.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels::cpu {

using kernels::AdamWScalars;

// One AdamW step in one pass over n = master.numel() elements, in place on master, exp_avg and
// exp_avg_sq:  p' = p·decay;  m = m·β1 + g·(1−β1);  v = v·β2 + g²·(1−β2);
//              p = p' − (m / (sqrt(v / bc2) + eps)) · step_size.
// `param` (bf16/f16, when given) receives the round-to-nearest-even copy of the new master in the
// same pass; fp32 parameters are their own master (param = nullptr).
void adamw_update(Tensor& master, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                  Tensor* param, const AdamWScalars& scalars);
// Whether adamw_update with these arguments would leave the master (and its copy in
// `param_dtype`; f32 when the master is the parameter), exp_avg and exp_avg_sq finite. Reads only.
bool adamw_update_is_finite(const Tensor& master, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, DType param_dtype, const AdamWScalars& scalars);

// param (bf16/f16) = round-to-nearest-even(master): after QK-clip or a checkpoint load.
void copy_master_to_param(const Tensor& master, Tensor& param);

// Muon's momentum without storing it: with M' = μ·M + G, update = bf16(G + μ·M') (Nesterov) or
// bf16(M'), the bf16-exact input of Newton–Schulz. `momentum` is only read (muon_apply stores
// M'); returns whether M' is finite everywhere.
bool muon_momentum(const Tensor& momentum, const Tensor& grad, float mu, bool nesterov, Tensor& update);

// Whether muon_apply would leave master·decay − update finite (in `param_dtype` too). Reads only.
bool muon_apply_is_finite(const Tensor& master, const Tensor& update, float decay, DType param_dtype);

// Muon's write pass: momentum = μ·momentum + grad (the M' muon_momentum computed) and the
// decoupled decay and step master = master·decay − update.
void muon_apply(Tensor& master, Tensor& momentum, const Tensor& grad, float mu, const Tensor& update,
                float decay);

// Σ x² of any floating dtype and layout, in fp64. Deterministic: fixed 16K-element chunks, each
// summed over eight fixed lanes (vectorisable without reassociating anything the order depends
// on), the chunk partials added in chunk order — the same value for any thread count.
double sum_squares(const Tensor& x);

// Branch-free fp32 -> bf16 rounding (ties to even, NaN stays NaN) that compilers vectorise.
inline uint16_t bf16_bits_rne(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}
inline float round_bf16_rne(float f) {
  uint32_t u = static_cast<uint32_t>(bf16_bits_rne(f)) << 16;
  float out;
  __builtin_memcpy(&out, &u, 4);
  return out;
}

}  // namespace loom::kernels::cpu
