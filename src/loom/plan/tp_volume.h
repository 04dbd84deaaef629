// The bytes one rank sends in a tensor-parallel training step, counted from the collective sites of
// dist/tensor_parallel.h as a function of the model configuration and t = tensor_parallel —
// Megatron-SP's all-gather / reduce-scatter per column- and row-parallel linear, written out — so
// that bench_tp can hold it against what the ProcessGroups counted.
//
// Convention: ProcessGroup's CommStats count the payload bytes this rank hands to point-to-point
// transfers. Its MPI collectives (dist/mpi_process_group.cpp) move, for t ranks:
//
//   all_gather, n elements per rank in        (t-1)·n        a ring: t-1 blocks passed on
//   reduce_scatter, n elements per rank out   (t-1)·n        pairwise exchange of t-1 blocks
//   all_reduce of n elements                  (t-1)·n        when n·t <= 2^14 (gathered, summed here)
//                                             2(t-1)·⌈n/t⌉   otherwise (reduce-scatter + all-gather)
//
// so moving an activation [B, S, w] between its sequence-split form [B, S/t, w] and the whole
// sequence costs (t-1)/t · B·S·w elements either way, and a large all-reduce 2(t-1)/t of its
// elements.
//
// Sites, per micro-batch of B sequences of S tokens, D = hidden_size, every layer of the decoder
// and of MTP (forward | backward):
//
//   embedding       reduce-scatter of the lookup [B,S,D]          | all-gather   (again per MTP layer)
//   self-attention  all-gather of its input [B,S/t,D]             | reduce-scatter
//   MLA, q-LoRA     all-gathers of the latents after q_layernorm [B,S/t,q_lora_rank] and after
//                   linear_kva [B,S/t,kv_lora_rank+qk_rope_head_dim] | reduce-scatters
//                   (without q-LoRA: the input, as self-attention)
//   linear_proj     reduce-scatter of the partial output [B,S,D]  | all-gather
//   dense MLP       all-gather of its input, reduce-scatter after linear_fc2 | their duals
//   MoE layer       all-reduce of the balance statistics: Σp [E] and counts [E] (f64) for
//                   aux_loss/gbs_aux_loss, per sequence [B,E] and [B,E] (f64) for seq_aux_loss | —
//   output head     all-gather of the final norm's output [B,S/t,D] | reduce-scatter (per MTP too)
//   loss            per chunk of c tokens (kernels linear_cross_entropy_chunk over V/t rows): an
//                   all-reduce of c row maxima, one of 2c (Σexp, target logit) | —
//   parameters      — | all-reduce of the grad of every parameter left whole on the tp ranks
//                   (Partial): norms, qk-norms, row-parallel biases, MLA's down-projections
//                   and latent norms, router, experts, shared experts, MTP's norms and eh_proj
//   recompute_comm  with '.*\.all_gather' selected, each gather of a layer runs once more in backward
//   after the step  all-reduce of the routing counts, int64 [E] per MoE layer
//   world scalars   all-reduces of one f64 each: the logged loss, each logged extra loss, the grad
//                   norm's Σg² (on the tp group's communicator when tp is the whole world)
//   shared KV heads with t > G the KV weights' grads are summed over the t/G ranks sharing a head,
//                   on a sub-group of tp that the mesh does not list (its bytes are in no CommStats)
//
// Every value is counted as float32 (the benchmark's models are float32 throughout; the count
// refuses others rather than guess which sites would move bf16) unless the caller gives the
// activations' element size (TpStepShape::activation_bytes: the planner, src/loom/plan/planner.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/nn/transformer_config.h"

namespace loom::plan {

// The transport's bytes for t ranks (see above); elem_bytes per element.
int64_t all_gather_bytes(int64_t elements_per_rank, int64_t elem_bytes, int t);
int64_t reduce_scatter_bytes(int64_t elements_per_rank, int64_t elem_bytes, int t);
int64_t all_reduce_bytes(int64_t elements, int64_t elem_bytes, int t);

struct TpStepShape {
  int64_t batch = 1;                // sequences of one micro-batch on this data shard
  int64_t seq = 1;                  // tokens per sequence (divisible by t)
  bool gathers_recomputed = false;  // recompute_comm '.*\.all_gather' on every layer
  int world_size = 1;               // t without data parallelism: the step's scalars then share tp's communicator
  // 0: every value is float32 (checked); else the bytes of one activation element (compute_dtype),
  // for the planner (grads and the loss's reductions stay float32).
  int64_t activation_bytes = 0;
  // One pipeline stage: its decoder layers [first_layer, last_layer] (-1: to the last), whether it
  // embeds (the first stage) and runs the head, the final norm and MTP (the last stage).
  int64_t first_layer = 0, last_layer = -1;
  bool embedding = true, head = true;
  bool experts_on_ep = false;  // routed experts split by expert parallelism: not summed over tp
};

// What a site moves, for tables by kind.
enum class SiteKind {
  sequence,    // the layers' sequence all-gathers and reduce-scatters of [B, S, D]
  latent,      // MLA's latent all-gathers
  vocabulary,  // the embedding's reduce-scatter, the head's all-gather, the loss's reductions
  grads,       // grad all-reduces of replicated (and shared-KV) parameters
  moe,         // balance statistics and routing counts
  scalars,     // the step's logged loss values and the grad norm
};
const char* site_kind_name(SiteKind kind);

// One kind of collective site: how often it runs per step and the bytes of all its runs.
struct VolumeSite {
  SiteKind kind;
  std::string what;
  std::string group;  // "tp", "world" (when it is not tp) or "tp_kv" (the KV-sharing sub-group)
  int64_t count = 0;
  int64_t forward_bytes = 0;
  int64_t backward_bytes = 0;  // after the step's optimizer update included
  int64_t bytes() const { return forward_bytes + backward_bytes; }
};

// The sites of one training step (one micro-batch), in model order; sites that do not occur are
// left out. ValueError when the configuration is not float32 throughout.
std::vector<VolumeSite> count_tp_volume(const nn::TransformerConfig& c, int t, const TpStepShape& step);

// The extra losses a step logs besides the loss (the balance loss, the MTP loss and each depth's):
// each is one more f64 all-reduce over the world.
int64_t logged_extra_losses(const nn::TransformerConfig& c);

// Whether MoE layers log a balance loss (a non-zero coefficient of aux_loss / seq_aux_loss).
bool logs_balance_loss(const nn::TransformerConfig& c);
// The router's balance statistics of one MoE layer and micro-batch of `batch` sequences summed
// over a group of n ranks (tp, and cp: context_parallel.h), as the MoE site above counts them.
int64_t balance_statistics_bytes(const nn::TransformerConfig& c, int64_t batch, int n);

// Σ bytes of the sites on `group`.
int64_t total_bytes(const std::vector<VolumeSite>& sites, const std::string& group);

}  // namespace loom::plan
