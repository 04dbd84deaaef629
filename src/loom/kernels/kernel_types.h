// The value types kernels exchange with the layers above, whatever the device: operation codes,
// attention masks and results, MoE routing, optimizer scalars. Every device's kernels take and
// return these (kernel_table.h); the CPU implementations in kernels/cpu/ re-export them so tests
// and benches that call a CPU kernel directly keep their names.
#pragma once

#include <cstdint>
#include <functional>

#include "loom/core/tensor.h"

namespace loom::kernels {

// ---- Elementwise --------------------------------------------------------------------------------

enum class BinaryOp { add, sub, mul, div, maximum, minimum };
enum class UnaryOp { neg, exp, log, sqrt, rsqrt, square, abs, sigmoid, silu, tanh, relu, reciprocal };

// ---- Attention ----------------------------------------------------------------------------------

struct AttentionMask {
  bool causal = true;
  // Position of query row 0 relative to key row 0: query row i sits at position i + q_offset.
  int64_t q_offset = 0;
  // Optional int32/int64 [B, K]: ascending exclusive document ends in key positions (the compressed
  // actual_seq_len of MindFormers' create_compressed_eod_mask, padded with Sk). Document d spans
  // [ends[d-1], ends[d]) (ends[-1] = 0). A query at position p sees only keys of the document
  // holding p; positions at or past the last end, or before 0, belong to no document and see
  // nothing (as packed-sequence flash attention leaves tokens past actual_seq_len out).
  Tensor doc_ends;
  // Optional int64 [B, Sq, 2]: the keys [lo, hi) each query row sees, given outright. When
  // defined it is the whole mask (causal, q_offset and doc_ends are not read): context
  // parallelism's ring passes one per K/V block, from the global sequence positions of its
  // queries and of the block's keys, which no offset of a contiguous range can describe.
  Tensor key_ranges;
};

// Tile sizes; the defaults are tuned for fp32 sgemm. Tests shrink them to exercise tile edges.
struct AttentionTiles {
  int64_t fwd_q_block = 64;
  int64_t fwd_k_block = 256;
  int64_t bwd_q_block = 128;
  int64_t bwd_k_block = 128;
};

struct AttentionForwardResult {
  Tensor out;         // [B, Sq, H, Dv], dtype of q
  Tensor lse;         // [B, H, Sq]: f32 (f64 for f64 inputs); -inf for rows that see no key
  Tensor max_logits;  // f32 [H] when requested: max of scale·q·k over batch, rows, visible keys
};

struct AttentionGrads {
  Tensor dq, dk, dv;  // shapes and dtypes of q, k, v (contiguous)
};

// ---- Cross-entropy ------------------------------------------------------------------------------

// An output head split over the vocabulary (tensor parallelism): this rank holds rows
// [begin, begin + local rows) of a head of `size` rows. The fused loss kernels reduce their
// per-token statistics (row max, Σ exp, the target logit) across the ranks holding the other rows
// through `all_reduce`, so no rank ever holds a token's full logits.
struct VocabShard {
  int64_t begin = 0;
  int64_t size = 0;
  // In place over `count` elements of `dtype` (f32 or f64), elementwise over the vocabulary
  // ranks: the maximum when `max`, else the sum. Every rank calls it the same number of times.
  std::function<void(void* data, int64_t count, DType dtype, bool max)> all_reduce;
};

// ---- MoE ----------------------------------------------------------------------------------------

struct MoeRouting {
  Tensor row_map;            // int64 [T, K]: the permuted row holding copy k of token t
  Tensor tokens_per_expert;  // int64 [E]
};

// ---- Optimizer updates --------------------------------------------------------------------------

// Per-step AdamW scalars, computed once in double from the hyper-parameters and rounded to fp32
// (optim::adamw_scalars).
struct AdamWScalars {
  float decay = 1.f;            // 1 - lr*wd (decoupled decay on the pre-update weight)
  float beta1 = 0.9f, one_minus_beta1 = 0.1f;
  float beta2 = 0.95f, one_minus_beta2 = 0.05f;
  float bias_correction2 = 1.f;  // 1 - beta2^t
  float step_size = 0.f;         // lr / (1 - beta1^t)
  float eps = 1e-8f;
};

// One Newton–Schulz iteration X ← a·X + (b·A + c·A²)·X with A = X·Xᵀ.
struct NsCoefficients {
  float a, b, c;
};

// A rectangle of a matrix that Muon orthogonalises on its own, and the factor its orthogonalised
// values are multiplied by (Muon's lr·sqrt(max(rows, cols))·matched_adamw_rms).
struct MuonPiece {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
  float scale = 1.f;
};

}  // namespace loom::kernels
