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
// bf16 inputs on a bf16 matrix path (matrix_dispatch(), cpu_isa.h) of a CPU with AVX512-BF16 run
// every tile product on the bf16 units instead (forward S = Q·Kᵀ and O += P·V; backward the
// recomputed S, dV += Pᵀ·dO, dP = dO·Vᵀ, dQ += dS·K, dK += dSᵀ·Q), with fp32 accumulation. The
// softmax statistics (row max, sum, log-sum-exp), dP, D = rowsum(dO∘O) and every accumulator stay
// fp32; P and dS are rounded to bf16 only as operands of the products, as FlashAttention-2 does on
// GPUs. The inputs are bf16 already, so Q·Kᵀ and dO·Vᵀ lose nothing; the error added is P's and
// dS's rounding (tests/kernels/test_attention_bf16.cpp states the bound). Everything else, and
// every other dtype or path, is the fp32 kernel unchanged, bit for bit.
//
// The products are a small vdpbf16ps micro-kernel (cpu/attention_bf16.h) rather than oneDNN
// matmul on tiles: measured on a Zen 5 (bench_attention, one thread, CPU time) on the flash tiles,
// the micro-kernel takes 4.8 µs for Q·Kᵀ [64,64]·[64,256] and 5.1-5.3 µs for P·V [64,256]·[256,64]
// (~400-440 GFLOP/s), packing from fp32 included; a cached oneDNN primitive takes 6.2-6.5 µs for
// either (~330 GFLOP/s), before the P
// tile's own rounding to bf16 and with a lock per call on the shared primitive cache. At these
// sizes oneDNN's per-call cost (memory objects, the cache lookup, the stream) is what decides; the
// micro-kernel also reads K and V packed once per call instead of once per tile. AMX would need
// its own tile micro-kernel; an AMX CPU runs this AVX512-BF16 one (every AMX CPU has it).
//
// Every mask mode gives each query row one contiguous interval of visible keys, so the kernels
// work on per-row intervals [lo, hi): fully masked tiles are skipped, fully visible tiles are not
// masked at all. Rows with an empty interval produce zeros (and lse = -inf), never NaN. A caller
// may also hand the intervals over directly (AttentionMask::key_ranges): context parallelism's
// ring computes its queries against one K/V block at a time, at positions no offset describes.
//
// The log-sum-exp is part of the result because a softmax over keys split into blocks is the
// merge of the blocks' partial softmaxes by their log-sum-exp (attention_merge), and because the
// backward of each block needs only the final output and log-sum-exp of the whole row.
// Callers (ops::attention) validate shapes and dtypes; doc_ends values are validated here.
#pragma once

#include <cstdint>

#include "loom/core/tensor.h"
#include "loom/kernels/cpu/cpu_isa.h"
#include "loom/kernels/kernel_types.h"

namespace loom::kernels::cpu {

using kernels::AttentionForwardResult;
using kernels::AttentionGrads;
using kernels::AttentionMask;
using kernels::AttentionTiles;

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

// The same on a given matrix path instead of the process's (matrix_dispatch().path), so tests
// run both paths in one process: bf16 inputs take the bf16 tile products when `path` is a bf16
// path and the CPU has AVX512-BF16, fp32 sgemm tiles otherwise; other dtypes ignore `path`.
AttentionForwardResult attention_forward_on(MatrixPath path, const Tensor& q, const Tensor& k,
                                            const Tensor& v, double scale, const AttentionMask& mask,
                                            bool track_max_logits,
                                            const AttentionTiles& tiles = AttentionTiles());
AttentionGrads attention_backward_on(MatrixPath path, const Tensor& dout, const Tensor& q,
                                     const Tensor& k, const Tensor& v, const Tensor& out,
                                     const Tensor& lse, double scale, const AttentionMask& mask,
                                     const AttentionTiles& tiles = AttentionTiles());

// Folds one block's partial attention into a running result, in place: with L = log(e^lse +
// e^block_lse), out = e^(lse-L)·out + e^(block_lse-L)·block_out and lse = L, per (batch, head,
// row). out [B, Sq, H, Dv] and lse [B, H, Sq] are contiguous f32 (f64 for f64); block_out and
// block_lse are a forward's result of the same shapes. A row with lse = -inf on either side
// takes the other side as it is (never -inf - -inf), so rows no block sees stay zero.
void attention_merge(Tensor& out, Tensor& lse, const Tensor& block_out, const Tensor& block_lse);

}  // namespace loom::kernels::cpu
