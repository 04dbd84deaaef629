// Context parallelism (spec parallel_training.md §3; MindFormers' context_parallel.py), applied to
// a built CausalLM from outside over the mesh axis "cp", after tensor parallelism. Every sequence
// of a micro-batch is split over the c ranks of the cp group, so each rank's activations and
// attention work fall by c. The model files know nothing of it: this file wraps the model's inputs,
// its core attentions and its head loss.
//
// Input preparation (where the sequence is cut). The embedding, the decoder and the head loss
// receive the whole batch, [B, S]; their wrappers keep this rank's tokens of input_ids, of
// position_ids (0..S-1 made explicit when the batch has none: RoPE must see global positions)
// and of labels and loss_mask. Every rank holds exactly S/c tokens of every sample, ascending.
// Two splits (SequenceSplit):
//   load-balanced (default)  each document of the sample (the segments between its doc_ends, and
//                            the tokens after the last end; the whole sample when it has no
//                            doc_ends) of L tokens is cut into 2c pieces of ⌊L/2c⌋ tokens, of
//                            which L mod 2c get one token more; rank r holds pieces r and 2c-1-r
//                            of every document. The +1 pieces are dealt round-robin over the 2c
//                            piece slots, continuing from one document to the next: the
//                            remainders of a sample add up to S - 2c·Σ⌊L/2c⌋, a multiple of 2c
//                            (S is), so every slot gets as many +1 pieces as every other and every
//                            rank holds S/c tokens. Under the causal document mask every rank then
//                            does the same attention work in every document: exactly when 2c
//                            divides its length, within its remainder tokens otherwise (a
//                            contiguous cut gives rank r a share ∝ 2r+1; the same cut per sequence
//                            is only balanced when documents are long). Unpacked data is one
//                            document: chunks r and 2c-1-r of S/(2c), in that order.
//                            Loom's default; the reference cuts contiguously.
//   contiguous               rank r holds [r·S/c, (r+1)·S/c), the reference's split, documents
//                            or not.
// (parallelism.context_parallel_load_balance, a Loom extension: the spec has no such field.)
// The split of a sample depends on its doc_ends, so every wrapper receives them (the embedding
// and the head loss take them for this). The compressed mask (document_ends, global sequence
// indices) is passed whole to every rank, and each rank derives its queries' key ranges from the
// global indices of its tokens, so no document attends across its boundary.
//
// Multi-token prediction needs no exchange: depth k shifts the whole batch's ids, labels, mask
// and positions (CausalLM::head) before the wrappers split them, so each rank's shifted tokens
// are those of its own rows; its hidden rows are the decoder's, unshifted, as in one process.
// The MTP layers' positions are made local like the decoder's.
//
// Core attention ("colossal", the ring). The reference all-gathers K and V over the cp group
// and runs one attention call; Loom passes the K/V blocks round a ring instead (a deliberate
// departure: the same result without holding every rank's K/V at once, with each transfer
// hidden behind a block's compute). With c ranks, at step s = 0..c-1 rank r holds the K/V block
// of rank j = (r - s) mod c:
//   1. post irecv of the next block from r-1 and isend of the current one to r+1,
//   2. attention of the local queries against block j, with per-row key ranges computed from
//      the global indices of both sides (kernels AttentionMask::key_ranges); a block every row of
//      which is masked (causal or document) is skipped without a kernel call,
//   3. merge the block's output into the running one by log-sum-exp (kernels attention_merge,
//      in fp32: bf16 inputs are widened once and the output rounded once at the end),
//   4. wait for the transfers.
// Because each rank's indices are ascending, the keys a query sees in any block (an interval of
// global indices) are one interval of the block's rows: the kernel's per-row ranges suffice.
// Backward runs the ring again: K/V travel the same way, every block's grads come from the final
// output and log-sum-exp (never a block's own), dQ accumulates locally, and the dK/dV of block j
// travel with it, one hop behind: each rank adds its part and forwards the running sum, and the
// c-th hop brings block j's complete dK/dV home to rank j. Per layer and rank the ring sends
// (c-1)·(K+V) bytes forward and (c-1)·(K+V) + c·(dK+dV) backward. Under activation
// checkpointing the ring simply runs again in the recomputed forward.
//
// Loss and gradients. Each rank's head loss is its tokens' share of the one-process token mean,
// Σ_local ce / N with N the loss tokens of the whole sequence (summed over cp), and the shares
// are summed over cp (forward: all-reduce; backward: identity, every rank holds the one loss). The
// loss is thus replicated over cp like over tp: ParallelModel::backward_scale counts it once, the
// logged loss and grad norm equal one process's whatever the split, and FSDP — whose shard group
// "fsdp" is dp_shard·cp — sums the cp ranks' partial parameter grads in its reduce-scatter. The
// MoE balance statistics are summed over cp (as over tp) so the balance loss is the whole
// sequence's on every rank.
//
// Core attention ("ulysses"). Four all-to-alls over the cp group turn the sequence-sharded q, k,
// v [B, S/c, H, d] into head-sharded [B, S, H/c, d] (rank i gets heads [i·H/c, (i+1)·H/c) of
// every token), one attention call runs on the whole sequence in global order (the gathered
// load-balanced pieces are put back in order, per sample, by a row gather), and the reverse
// all-to-all brings the output back to [B, S/c, H, dv]. KV heads fewer than c are repeated first
// (c/G copies, rank i gets KV head ⌊i·G/c⌋, the one its query heads use; the copies' grads are
// summed). The exchanges are differentiable, so backward is their duals around the attention's
// own backward. Per layer and rank each all-to-all sends (c-1)/c of its input.
// context_parallel_async (the spec's asynchronous CP hook): q, k and v are each posted to the
// group's comm thread as soon as packed and waited on only when unpacked, so one travels while the
// next is packed and the previous unpacked (backward: the grads the same way); without it each is
// packed, exchanged and unpacked in turn. The same copies either way: identical results. (For the
// ring it changes nothing: the next block's transfer is always posted before the current compute.)
//
// Core attention ("hybrid", USP). The cp ranks are tiled into c/u rows of u adjacent ranks:
// Ulysses inside each row gives every rank the row's tokens (u·S/c of them, in ascending global
// order) with H/u heads, and the ring runs across the column of ranks with the same position in
// their rows, each ring rank holding its row's tokens. (ulysses_degree_in_cp = u.)
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"

namespace loom::dist {

// Which tokens of a sequence each cp rank holds (see above).
struct SequenceSplit {
  int cp = 1;
  bool load_balanced = true;
  // Load-balanced only: cut each document (true), or each sample as if it held one document
  // (false: the per-sequence cut, which bench_cp compares against on packed data).
  bool per_document = true;

  // Every rank's tokens of one sample whose documents end at doc_ends (global, ascending; values
  // past S ignored; empty: one document): out[r], S/c ascending global indices. S must divide by
  // 2c (load-balanced) or c (contiguous): ShapeError naming the field otherwise.
  std::vector<std::vector<int64_t>> sample_indices(int64_t S, std::span<const int64_t> doc_ends = {}) const;
  std::vector<int64_t> indices(int rank, int64_t S, std::span<const int64_t> doc_ends = {}) const;
  // A micro-batch's split: layout[r][b] is rank r's indices in sample b (doc_ends: optional int
  // [B, K], the batch's document ends).
  using Layout = std::vector<std::vector<std::vector<int64_t>>>;
  Layout layout(int64_t B, int64_t S, const Tensor& doc_ends) const;
  // Rank r's tokens of x [B, S, ...] along dim 1, in the order of indices(): a new tensor
  // (inputs only, no history).
  Tensor local(const Tensor& x, int rank, const Tensor& doc_ends = Tensor()) const;
};

// parallelism.context_parallel_method: colossal (the ring), ulysses or hybrid.
enum class ContextParallelMethod { ring, ulysses, hybrid };

struct ContextParallelOptions {
  bool load_balanced = true;  // parallelism.context_parallel_load_balance
  bool per_document = true;   // SequenceSplit::per_document (false: bench_cp's per-sequence comparison)
  ContextParallelMethod method = ContextParallelMethod::ring;
  int ulysses_degree = 1;  // parallelism.ulysses_degree_in_cp, for hybrid
  bool async = false;      // parallelism.context_parallel_async: Ulysses' all-to-alls posted ahead
};

// Attention work of this process's ring steps since reset: blocks computed and skipped (every row
// masked), the (query, key) pairs the mask leaves visible in the computed blocks (forward), and
// the bytes the cp groups handed to the transport while the rings ran and while Ulysses exchanged
// (forward and backward).
struct RingWork {
  int64_t blocks_computed = 0;
  int64_t blocks_skipped = 0;
  int64_t visible_pairs = 0;
  int64_t bytes_sent = 0;
  int64_t all_to_all_bytes = 0;
};
RingWork ring_work();
void reset_ring_work();

// Ring attention over `cp` (see above): q [B, Sl, H, D], k [B, Sl, G, D], v [B, Sl, G, Dv] this
// rank's tokens (Sl = S/c, positions split.indices(cp rank, S)), doc_ends optional int [B, K] in
// global sequence indices. Causal within each document. Differentiable in q, k and v; every rank
// of the group must call it (and run its backward) in the same order. When max_logits is not
// null it receives the fp32 [H] max of scale·q·k over this rank's visible pairs.
Tensor ring_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                      const SequenceSplit& split, const std::shared_ptr<ProcessGroup>& cp,
                      Tensor* max_logits = nullptr);

// Ulysses over `cp` (see above): the same contract as ring_attention. The local query heads must
// divide by the group size, and the KV heads and the group size must divide one another.
Tensor ulysses_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                         const SequenceSplit& split, const std::shared_ptr<ProcessGroup>& cp,
                         Tensor* max_logits = nullptr, bool async = false);

// Hybrid (see above): Ulysses over `ulysses` (u adjacent cp ranks), the ring over `ring` (the cp
// ranks with this rank's position in their row, stride u). The same contract otherwise.
Tensor hybrid_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& doc_ends, double scale,
                        const SequenceSplit& split, const std::shared_ptr<ProcessGroup>& ulysses,
                        const std::shared_ptr<ProcessGroup>& ring, Tensor* max_logits = nullptr,
                        bool async = false);

// Splits `model` (an nn::CausalLM) over the mesh's "cp" group: wraps its inputs, every core
// attention and the head loss as described above. Apply after tensor parallelism and before the
// memory policy and FSDP (parallelize does).
void apply_context_parallel(nn::Module& model, DeviceMesh& mesh, const ContextParallelOptions& options);

}  // namespace loom::dist
