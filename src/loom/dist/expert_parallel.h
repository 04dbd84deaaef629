// Expert parallelism (spec parallel_training.md §5; MindFormers' ExpertParallel), applied to a
// built CausalLM from outside over the mesh axis "ep". The MoE layer (nn/moe.h) routes, dispatches,
// computes and combines; this file replaces its token dispatcher's two named operations
// ("dispatch", "combine", nn/token_dispatcher.h) and splits the routed experts' weights. Nothing
// else of the model changes: the router, the shared experts and every dense weight stay as they
// were (whole, or as tensor parallelism split them).
//
// Placement. Rank e of the ep group holds the routed experts [e·E/ep, (e+1)·E/ep) of every MoE
// layer (decoder and MTP): experts.weight1 [E, hidden, 2·ffn] and experts.weight2 [E, ffn, hidden]
// become [E/ep, ...], recorded as Shard(0) over "ep". The ep group is a block of ep consecutive
// ranks of the flattened (dp_shard, cp, tp) grid of one replica (ParallelDims::ep_index), so it
// may lie inside the tp group (ep ≤ tp), span tp groups (ep > tp), or be data-parallel ranks
// only. Every such rank routes different tokens (sequence parallelism gives each tp rank its
// own), so the other axis of the sparse mesh [pp, dp_replicate, efsdp, ep], efsdp =
// dp_shard·cp·tp/ep, holds the ranks whose copies of the same experts saw other tokens: FSDP
// shards the expert weights over "efsdp" (fsdp.h: buckets of their own in their layer's unit,
// gathered with it) and reduces their grads there, while dense weights shard over "fsdp" as
// before. Tensor
// parallelism leaves routed experts alone under EP (their grads are not partial over tp: they
// are summed by the all-to-all's backward and then over efsdp).
//
// Forward of one MoE layer on rank r, T local tokens, K choices each, n = ep, L = E/ep:
//
//   route         the router as on one process (every expert's score, on the local tokens)
//   dispatch      moe_permute: the T·K copies grouped by global expert, so the rows for rank p
//                 (its experts' rows) are contiguous; counts per expert exchanged (all_to_all of
//                 L int64 per peer: each rank learns how many rows of each of its experts every
//                 peer sends); the rows exchanged with all_to_all_v (differentiable); the
//                 received rows, in (source rank, expert, token) order, regrouped by local
//                 expert with a second moe_permute (stable, so an expert's rows stay in source-
//                 rank then token order)
//   compute       the local experts as one grouped GEMM over their E/ep weights
//   combine       the regrouping undone (moe_unpermute with K = 1), the reverse all_to_all_v,
//                 then the one-process weighted combine, Σ_k w_k·y_k in slot order, on the rank
//                 the token came from.
//
// The routing weights never travel: they are applied in combine on the token's own rank, exactly
// the one-process arithmetic (the expert outputs of a row do not depend on the other rows of the
// GEMM), so forward losses equal one process's and the balance-loss and expert-bias grads stay
// where the router is. Backward mirrors the forward through autograd: the grads of the expert
// outputs go back to the experts' ranks (the reverse exchange of all_to_all_v), the token grads
// come home the same way, and each expert's weight grad sums every peer's rows. The shared
// experts run on the local tokens.
//
// alltoall_deredundancy (MindFormers' DeredundancyExpertParallel). The ep ranks form nodes of P =
// npu_nums_per_device consecutive ranks (ep rank r: node r/P, index r%P; with one rank per core and
// mpirun filling each host in turn, the physical hosts). The placement is alltoall's, so node m
// owns experts [m·P·L, (m+1)·P·L). A token routed to several experts on one remote node should
// cross the node boundary once, not once per expert:
//
//   across      each token once to every node that holds at least one of its experts, to the
//               rank of the same index there (DeepEP's forwarding rather than MindFormers' all-
//               gather, which also sends the tokens a node does not need, so this never sends
//               more rows than alltoall); with the row travel its K choices as that node's
//               experts (int32; another node's choice is marked) and its K routing weights
//   inside      the copies for the node's experts, grouped by expert, go to their ranks over the
//               node (to_experts below, alltoall's exchange restricted to the node's P ranks);
//               grouped GEMM as before; the outputs come back
//   combine     each received row's weighted sum over this node's experts, in slot order (one
//               row per token and node: the reduce-scatter's dedup), sent home, where the node
//               sums are added in node order.
//
// Both exchanges run on the ep group itself with nothing sent to the ranks a step does not talk
// to. Results equal alltoall's on the same routing up to the order of the weighted sum: a token
// whose experts are all on one node is summed exactly as on one process; otherwise
// the node sums are added, a rounding difference. Bytes per remote node: alltoall sends a token
// once per expert there, deredundancy once (plus 8·K bytes of choices and weights).
//
// Everything a combine needs (the row maps, the weights, the rows sent and received per peer)
// travels in the dispatcher's combine state, never in members: correct with several micro-
// batches in flight and under recompute, which re-runs the dispatch (and its all-to-alls) in the
// recomputed forward.
//
// Routing state across ranks. The router sees every expert's score, so what depends on routing
// needs no EP-specific communication: the balance losses use the statistics of the rank's
// micro-batch (summed over tp and cp when their tokens are split), the expert-bias
// update and the tokens-per-expert monitor use the step's counts summed over the ranks that
// route other tokens (batch × cp × tp, the trainer), and nothing is dropped (no capacity factor).
//
// Checkpoints. The placement is all that sharded checkpoints read: each rank's expert rows are
// saved at their global expert indices, and a checkpoint reloads under any other ep/tp/dp.
#pragma once

#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"

namespace loom::dist {

enum class TokenDispatcher { alltoall, alltoall_deredundancy };

// parallelism.moe_token_dispatcher_type and npu_nums_per_device, resolved (the configuration
// checks that npu_nums_per_device ≤ expert_parallel and divides it).
struct ExpertParallelOptions {
  TokenDispatcher dispatcher = TokenDispatcher::alltoall;
  int ranks_per_node = 8;  // alltoall_deredundancy only
};

// Splits the routed experts of every MoE layer of `model` (an nn::CausalLM, on the meta device or
// materialised: values are kept) over the mesh's "ep" group and wraps their token dispatchers.
// Apply it after tensor parallelism and before the memory policy and FSDP (dist/parallelize.h
// order). The configuration checks that ep divides dp_shard·cp·tp and the number of routed experts
// (and that npu_nums_per_device divides ep under alltoall_deredundancy); ShapeError with the
// numbers otherwise. Returns the number of MoE layers split (0 for a dense model: nothing to do).
int apply_expert_parallel(nn::Module& model, DeviceMesh& mesh, const ExpertParallelOptions& options = {});

}  // namespace loom::dist
