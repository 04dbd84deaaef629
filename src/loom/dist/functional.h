// Differentiable collectives: communication as autograd functions over a process group, for the
// strategies that split one layer's work across ranks (TP/SP, CP, EP). Each backward is its
// forward's dual (Megatron's tensor_parallel/mappings.py):
//
//   op                                   forward                         backward
//   all_gather(x, g, dim)                every rank's x, concatenated    reduce-scatter of dy along dim
//   reduce_scatter(x, g, dim)            rank r: Σ_s block r of x_s      all-gather of dy along dim
//   all_reduce(x, g)                     Σ_s x_s, on every rank          identity
//   copy_to_group(x, g)                  identity                        all-reduce of dy
//   all_to_all_v(x, g, send, recv)       rows exchanged between ranks    the reverse exchange
//
// Who counts the loss. Each backward is the gradient of one scalar loss L of the whole group, and
// the ops assume two different L:
// - all_gather, reduce_scatter, all_to_all_v and copy_to_group: L = Σ_r L_r, the sum of every
//   rank's own loss. Each rank uses its output for a different part of the loss (its tokens, its
//   heads, its experts), so the grad a rank holds for its output is only its own part, and dx
//   adds up every rank's part. copy_to_group's input is replicated (the same value on every rank,
//   one variable), so its grad is the sum over ranks of their grads (Megatron's f: the entry of a
//   tensor-parallel block without SP).
// - all_reduce: the output is replicated and so is everything computed from it: every rank holds
//   the same L, counted once, and the same dy, which is already dL/dx_s of every rank's x_s
//   (Megatron's g: the exit of a row-parallel block without SP).
// A strategy pairs them so that every parameter's gradient equals the one-process gradient.
//
// Rules. dim may be negative; the tensor's other dims must agree across ranks. Float32, bfloat16
// and float64 (bfloat16 sums accumulate in fp32, like the group's). The group must outlive the
// graph (the backward keeps a reference). Every rank must run the backward of each collective it
// ran forward, in the same order (each backward is a collective too): use every output in the loss
// on every rank, or the ranks that skip one wait for the others until the watchdog ends the run.
// Outputs are new contiguous tensors, except copy_to_group's, which shares x's storage.
//
// Names. Each op runs under autograd::reuse_in_recompute and records its node under the name of
// MindSpore's operator, which recompute.exclude_op matches (a case-insensitive substring,
// memory_optimization.md): kept in a recomputed layer, its output is reused and the collective is
// not issued again in backward. copy_to_group communicates in backward only.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "loom/core/tensor.h"
#include "loom/dist/process_group.h"

namespace loom::dist {

inline constexpr const char* kAllGather = "AllGather";
inline constexpr const char* kReduceScatter = "ReduceScatter";
inline constexpr const char* kAllReduce = "AllReduce";
inline constexpr const char* kAllToAll = "AllToAll";
inline constexpr const char* kCopyToGroup = "CopyToGroup";

// Every rank's x concatenated along dim, in rank order: size(dim) grows group.size() times.
Tensor all_gather(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, int dim);
// x's size(dim) splits into group.size() equal blocks; rank r gets the sum over ranks of block r.
Tensor reduce_scatter(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, int dim);
// The sum over ranks (in rank order), on every rank; the backward passes the grad through.
Tensor all_reduce(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);
// x itself (a replicated input entering rank-specific work); the backward sums the grads.
Tensor copy_to_group(const Tensor& x, const std::shared_ptr<ProcessGroup>& group);
// Along dim 0: rank r sends send_rows[p] consecutive rows of x to each rank p (in rank order) and
// receives recv_rows[p] rows from each p, concatenated in rank order.
Tensor all_to_all_v(const Tensor& x, const std::shared_ptr<ProcessGroup>& group, const std::vector<int64_t>& send_rows,
                    const std::vector<int64_t>& recv_rows);
// The expert dispatch's token counts (int64, not differentiable): `send_counts[p]` elements of
// `counts` to each rank p, `recv_counts[p]` from each, as the operator AllToAll (kept and reused
// under exclude_op like the rows it announces).
Tensor all_to_all_counts(const Tensor& counts, const std::shared_ptr<ProcessGroup>& group,
                         const std::vector<int64_t>& send_counts, const std::vector<int64_t>& recv_counts);

// The differentiable collectives this process issued, and the bytes their groups sent for them:
// in the forward, and in backward (the duals, and the forwards a checkpoint recomputes).
struct CollectiveCounts {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
};
struct DifferentiableCommStats {
  CollectiveCounts forward, backward;
};
DifferentiableCommStats differentiable_comm_stats();
void reset_differentiable_comm_stats();

}  // namespace loom::dist
