// Flash-style scaled dot-product attention on CPU (forward and FlashAttention-2 backward).
//
// Layouts: q [B, Sq, H, D], k [B, Sk, KV, D], v [B, Sk, KV, Dv], out [B, Sq, H, Dv]; H % KV == 0
// and query head h reads key/value head h / (H / KV) (GQA without repeating K/V). Any strides
// work; views with unit stride in the last dim are read in place (f32/f64), others are copied.
//
// The forward walks q blocks × k blocks with an online softmax and keeps only O(block²) scratch
// per thread; it saves the per-row log-sum-exp for the backward, which recomputes P per tile.
// f32/bf16/f16 compute in fp32 on sgemm tiles (bf16/f16 widened once, results rounded once);
// f64 runs the same tiled algorithm on dgemm, exactly, for finite-difference tests.
//
// Every mask mode gives each query row one contiguous interval of visible keys, so the kernels
// work on per-row intervals [lo, hi): fully masked tiles are skipped, fully visible tiles are not
// masked at all. Rows with an empty interval produce zeros (and lse = -inf), never NaN.
// Callers (ops::attention) validate shapes and dtypes; doc_ends values are validated here.
#pragma once

#include <cstdint>

#include "loom/core/tensor.h"

namespace loom::kernels::cpu {

struct AttentionMask {
  bool causal = true;
  // Position of query row 0 relative to key row 0: query row i sits at position i + q_offset.
  int64_t q_offset = 0;
  // Optional int32/int64 [B, K]: ascending exclusive document ends in key positions (the
  // compressed actual_seq_len of semantics.md §5.4, padded with Sk). Document d spans
  // [ends[d-1], ends[d]) (ends[-1] = 0). A query at position p sees only keys of the document
  // holding p; positions at or past the last end, or before 0, belong to no document and see
  // nothing (as packed-sequence flash attention leaves tokens past actual_seq_len out).
  Tensor doc_ends;
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

AttentionForwardResult attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                         double scale, const AttentionMask& mask,
                                         bool track_max_logits,
                                         const AttentionTiles& tiles = AttentionTiles());

// Bitwise identical for any thread count: each dK/dV row has one owner, and dQ partial sums (one
// per key chunk, the chunking fixed by the shape) are added in a fixed order.
AttentionGrads attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  double scale, const AttentionMask& mask,
                                  const AttentionTiles& tiles = AttentionTiles());

}  // namespace loom::kernels::cpu
