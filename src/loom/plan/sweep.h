// `loom plan --sweep`: every layout of N devices the configuration can run, planned and sorted
// by estimated step time.
//
// Candidates are every factorisation N = dp_replicate · dp_shard · cp · tp · pp, with every
// interleave v (1 .. layers / pp) and every expert-parallel degree ep dividing dp_shard·cp·tp
// (1 for a dense model). Each is written into the configuration's parallelism section
// (data_parallel_shard, context_parallel, tensor_parallel, pipeline_parallel,
// pipeline_parallel_interleave_num, expert_parallel; everything else as the file says) and
// resolved by config::resolve_config, so a candidate is valid exactly when check-config would
// accept it (head and KV divisibility, CP/SP rules, pipeline stages, batch sizes, ...). A valid
// layout is kept when its peak fits the device memory.
//
// Speed: splitting a meta model is slow, so the parameters a rank holds are cached by (tp, ep,
// pp, v, pipeline rank): they do not depend on the data-parallel degrees. Resolving is ~0.1 ms,
// but most candidates of a large N are (pp, v) whose layers cannot be placed (61 layers on 2
// stages): when the placement is a candidate's only problem (an error at
// parallelism.pipeline_parallel_layers_per_stage, a rule of pp, v and the model alone), the
// other candidates with that (pp, v) are skipped as invalid without resolving them.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/config/config.h"
#include "loom/plan/planner.h"

namespace loom::plan {

struct SweepResult {
  std::vector<Plan> fitting;  // sorted by step_time_s
  size_t candidates = 0;      // factorisations tried
  size_t valid = 0;           // accepted by the configuration rules
};

// The degrees of one candidate, before validation.
struct Candidate {
  int dp_shard = 1, tp = 1, cp = 1, pp = 1, v = 1, ep = 1;
  int dp_replicate = 1;
};

// Every candidate for `world_size` (the enumeration above; `num_layers` bounds v, `num_experts`
// bounds ep: 0 for a dense model).
std::vector<Candidate> sweep_candidates(int world_size, int64_t num_layers, int64_t num_experts);

SweepResult sweep(const config::TrainConfig& config, int world_size, const DeviceProfile& device,
                  int64_t device_memory);

}  // namespace loom::plan
