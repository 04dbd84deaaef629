// The bytes one rank hands to the transport in one optimizer step, per mesh axis: what
// ProcessGroup::stats().bytes_sent of that axis's group counts (dist/mpi_process_group.cpp).
// A collective over n ranks sends, per rank:
//   all_gather of c elements per rank      (n-1)·c          ring
//   reduce_scatter to c elements per rank  (n-1)·c          pairwise exchange
//   all_reduce of c elements               (n-1)·c          when c·n <= 2^14 (gathered and summed)
//                                          2(n-1)·ceil(c/n) otherwise
//   send / all_to_all_v                    the elements sent to other ranks
// (tp_volume.h's all_gather_bytes and friends). Per step of M micro-batches (the accumulation
// steps; the pipeline's micro-batches):
//
//   fsdp, efsdp   FSDP (rank_state.h's buckets): each unit all-gathers its buckets before its
//                 forward, and again before its backward when it reshards after forward; its
//                 grads are reduce-scattered in fp32 once per micro-batch (gradient sync is on
//                 for every micro-batch of the plain schedule; the pipeline schedule syncs only
//                 the last) and all-reduced over dp_replicate. The root unit gathers once per step
//                 and reduces once, at the end of backward. Under the pipeline schedule with
//                 reshard 'never' a unit stays gathered across the micro-batches: one gather.
//   tp            tp_volume.h's sites for this rank's layers, per micro-batch
//   cp            the ring (colossal): per layer (c-1)·(K+V) forward, (c-1)·(K+V) + c·(dK+dV)
//                 backward; Ulysses: the all-to-alls of q, k, v and the output, (c-1)/c of each,
//                 forward and backward
//   ep            per MoE layer: the dispatch and combine all_to_all_v of T·K rows of hidden_size,
//                 (ep-1)/ep of them to other ranks under uniform routing (the real split depends
//                 on the router), forward and backward, and the L int64 counts per peer
//   pp            per micro-batch and chunk boundary: the activation [B, S/(cp·tp), D] forward,
//                 its grad backward, in compute_dtype
//   world         the logged loss and extra losses and the grad norm's Σg²: one f64 all-reduce each
// Not counted: the shape agreement of the pipeline's first micro-batch, the shared-embedding
// and shared-KV-head sub-groups (no mesh axis counts them) and Muon's gathers.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "loom/config/resolved_config.h"
#include "loom/plan/rank_state.h"

namespace loom::plan {

// The layers and ends one pipeline rank runs, one entry per chunk (virtual stage).
struct StageChunk {
  int virtual_stage = 0;
  int64_t first_layer = 0, last_layer = -1;  // decoder layers, inclusive
  bool embedding = false, head = false;      // first / last virtual stage
};
std::vector<StageChunk> stage_chunks(const config::ResolvedConfig& resolved, int pp_rank);

// Bytes sent per optimizer step by a rank of pipeline rank `pp_rank` holding `state`, keyed by
// mesh axis ("fsdp", "efsdp", "dp_replicate", "tp", "cp", "ep", "pp", "world"); zero axes left out.
std::map<std::string, int64_t> bytes_sent_per_step(const config::TrainConfig& config,
                                                   const config::ResolvedConfig& resolved, int pp_rank,
                                                   const StateBytes& state, int64_t seq_length);

}  // namespace loom::plan
