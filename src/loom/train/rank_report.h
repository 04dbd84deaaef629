// What one rank really held and sent: `loom train --rank-report` writes, for one steady-state
// optimizer step (the run's last by default), <run dir>/rank_report/rank-<r>.json with
//
//   parameter_bytes   the buffers holding this rank's local parameter tensors
//   gradient_bytes    the buffers holding the main grads the optimizer reads
//   optimizer_bytes   optimizer state: moments, plus fp32 master copies of bf16/f16 parameters
//   mem_start_bytes   allocator bytes live when the step began (the static part, mostly the above)
//   mem_peak_bytes    allocator peak during the step (as metrics.jsonl)
//   bytes_sent_per_step  payload bytes handed to the transport in that step, per communicator
//   layer_collectives_per_step  the differentiable collectives of the layers (TP, CP, EP): calls
//                        and bytes sent in forward and in backward (duals and recomputed forwards)
//
// in the vocabulary of `loom plan --json` (docs/plan.md), so a plan can be checked against a run.
// Everything is read from the live tensors, the allocator and the process groups' counters.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "loom/train/callbacks.h"

namespace loom::train {

class Trainer;

// Unique storage bytes (a buffer shared by several tensors, e.g. an FSDP flat shard or tied
// weights, counts once) of the trainer's local parameters, their grads and the optimizer state.
struct HeldBytes {
  int64_t parameter_bytes = 0;
  int64_t gradient_bytes = 0;
  int64_t optimizer_bytes = 0;
};
HeldBytes measure_held_bytes(Trainer& trainer);

// Resets the mesh's traffic counters at the start of step `step` (0: the run's last) and, at its
// end, writes this rank's report atomically. A run that stops before that step writes none.
std::unique_ptr<Callback> make_rank_report_callback(int64_t step);

// The report's file for `rank` under `run_dir`.
std::string rank_report_path(const std::string& run_dir, int rank);

}  // namespace loom::train
