// The compute copy of a weight under mixed precision: fp32 master weights, bf16 (or f16)
// products. A weight is cast to the compute dtype once per optimizer step, not once per use.
//
// A training step runs its micro-batches (and, under activation recompute, the recomputed
// forwards) against weights that do not change until the optimizer writes them. While a
// WeightCastScope is open, cast_weight keeps each weight's converted copy and hands the same
// values to every later use; the scope is closed before the optimizer step, so the next step
// converts the updated weights afresh. Outside a scope cast_weight is ops::cast.
//
// Why these choices:
// - The copy is keyed by the weight's storage (held weakly), offset, shape, strides and target
//   dtype. A weight whose storage goes away (FSDP frees a gathered unit after its forward and
//   gathers a new buffer for backward) loses its entry at the next insertion, so the cache never
//   keeps a gathered unit's copy alive longer than autograd would, and never mistakes a new
//   buffer at a reused address for the old one.
// - Every use still records its own cast node on a fresh handle of the copy, so gradients flow
//   back to the fp32 weight exactly as with ops::cast (the grad arrives in fp32 from the
//   fp32-accumulated weight-grad GEMM; the cast's backward does not round it).
// - Only weights go through here (the modules call it for their parameters): activations change
//   every call and must never be cached.
#pragma once

#include <memory>

#include "loom/core/tensor.h"

namespace loom::ops {

// ops::cast(weight, dtype), reusing the converted values while a WeightCastScope is open.
Tensor cast_weight(const Tensor& weight, DType dtype);

// Opens the cache for this thread's casts until destroyed (scopes do not nest: an inner scope is
// a no-op). Conversions made, for tests: weight_casts_made().
class WeightCastScope {
 public:
  WeightCastScope();
  ~WeightCastScope();
  WeightCastScope(const WeightCastScope&) = delete;
  WeightCastScope& operator=(const WeightCastScope&) = delete;

 private:
  bool owner_;
};

// Conversions cast_weight performed (hits excluded) since the process started.
int64_t weight_casts_made();

}  // namespace loom::ops
