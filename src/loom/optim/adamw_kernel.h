// The fused AdamW update: one pass reads p, g, m, v once and writes p, m, v (and, for bf16/f16
// parameters, the rounded model copy in the same pass). fp32 arithmetic in the reference's
// operation order (mindformers pynative/optimizer/adamw.py::_run_adamw_opt); this library is
// compiled with -ffp-contract=off so every operation rounds like the reference's separate ops.
#pragma once

#include <cstdint>

#include "loom/core/dtype.h"

namespace loom::optim {

// Per-step scalars, computed once in double from the hyper-parameters and rounded to fp32.
struct AdamWScalars {
  float decay = 1.f;            // 1 - lr*wd (decoupled decay on the pre-update weight)
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.95f, one_minus_beta2 = 0.05f;
  float bias_correction2 = 1.f;  // 1 - beta2^t
  float step_size = 0.f;         // lr / (1 - beta1^t)
  float eps = 1e-8f;

  // t = the optimizer step after the increment (1 on the first update).
  static AdamWScalars make(double lr, double weight_decay, double beta1, double beta2, double eps,
                           int64_t t);
};

// master/m/v are updated in place over n elements; `param` (when given) receives the rounded
// (round-to-nearest-even) copy of the new master. Chunks run in parallel; the result does not
// depend on the thread count (elementwise).
void adamw_update(float* master, const float* grad, float* m, float* v, int64_t n,
                  const AdamWScalars& s);
void adamw_update(float* master, const float* grad, float* m, float* v, bf16* param, int64_t n,
                  const AdamWScalars& s);
void adamw_update(float* master, const float* grad, float* m, float* v, f16* param, int64_t n,
                  const AdamWScalars& s);

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

// Master -> model copy with rounding (after QK-clip or a checkpoint load).
void copy_master_to_param(const float* master, bf16* param, int64_t n);
void copy_master_to_param(const float* master, f16* param, int64_t n);

}  // namespace loom::optim
