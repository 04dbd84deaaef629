// Tensor parallelism with sequence parallelism (Megatron-SP: Korthikanti et al., "Reducing
// Activation Recomputation in Large Transformer Models"; spec parallel_training.md §2, §6), applied
// to a built CausalLM from outside over the mesh axis "tp". The model files know nothing of it:
// this file splits parameters (recording each split in Parameter::placement), wraps module forwards
// and named operations, and installs the vocabulary-split head loss.
//
// Activations are [B, S, D]. Between the blocks every rank holds its 1/t of the sequence,
// [B, S/t, D] (norms, residual adds and the MoE layer run there); each attention and dense MLP
// block gathers the sequence at its entry and scatters its (partial) output at its exit:
//
//   embedding        vocabulary rows split (Shard(0)); the lookup of rows held elsewhere is 0,
//                    so a reduce-scatter along the sequence sums the one non-zero row exactly
//   self-attention   all_gather(seq) → linear_q/k/v column-parallel by heads (Shard(0)) → RoPE,
//                    qk-norm and core attention on the local heads → linear_proj row-parallel
//                    (Shard(1)) → reduce_scatter(seq), then its bias (added once, after the sum)
//   MLA              linear_qa and linear_kva on the local tokens; their outputs (the latents,
//                    1536+512+64 per token in DeepSeek-V3, not the hidden size) are gathered
//                    after q_layernorm and after linear_kva; linear_qb/linear_kvb column-parallel
//                    by heads; linear_proj row-parallel. Without q-LoRA the input is gathered.
//   dense MLP        all_gather(seq) → linear_fc1 column-parallel, its gate and up halves split
//                    like the two tensors they fuse → linear_fc2 row-parallel → reduce_scatter
//   MoE layer        router, routed experts and shared experts whole on every rank, on the local
//                    tokens; the balance-loss statistics are summed over tp (reduce_statistics).
//                    Under expert parallelism the routed experts are left to it (expert_parallel.h)
//   output head      vocabulary rows split; the final norm's output is gathered and the loss
//                    runs on vocabulary-split logits (max and Σexp reduced over tp, chunked over
//                    tokens, kernels::VocabShard): no rank holds a token's full logits. The
//                    logits (evaluation, generation) are gathered whole on every rank instead
//
// GQA with fewer KV heads than ranks (t % G == 0, t > G): a deliberate extension over the
// reference, which rejects it. Rank r keeps the KV head its query heads use, g = r / (t/G): the
// KV weights are Shard(0) with copies = t/G, and their grads are summed over the t/G ranks that
// share them.
//
// Gradients. Every value replicated over tp (the loss, every norm's output, ...) is counted once:
// backward seeds are not divided by t (ParallelModel::backward_scale is 1/(world/(pp·tp))), the
// sequence all-gather's backward is a reduce-scatter and the vocabulary-split loss needs no ×t
// (the reference's compensate_tp QUIRK has nothing to compensate). Every parameter that is not
// split over tp sees only this rank's tokens (or heads), so its grad is partial: it is marked
// Partial("tp") and each grad contribution is summed over tp before it accumulates — the norms,
// qk-norms, MLA's down-projections and latent norms, the router, experts and shared experts,
// MTP's norms and eh_proj, row-parallel biases (the classic SP bug is to forget these).
//
// Communication recompute: each sequence all-gather is the named operation "all_gather" of the
// module it feeds (self_attention, mlp, q_layernorm, linear_kva), and each row-parallel output's
// reduce-scatter the operation "reduce_scatter" of linear_proj / linear_fc2, so recompute_comm's
// '.*\.all_gather' entries regenerate them in backward instead of keeping their outputs.
#pragma once

#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"

namespace loom::dist {

// Splits `model` (an nn::CausalLM, on the meta device or materialised: values are kept) over the
// mesh's "tp" group. Apply it first (dist/parallelize.h order), before the memory policy and FSDP.
// The sizes it splits must divide by tp (the configuration checks them with the spec's messages);
// ShapeError naming the module otherwise.
void apply_tensor_parallel(nn::Module& model, DeviceMesh& mesh);

}  // namespace loom::dist
