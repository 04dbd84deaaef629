// `loom plan`: what a configuration's layout needs of every rank and how fast a step runs, for
// any world size, without a device. Everything is derived from the code a run uses:
//
//   layout        config::resolve_config, as check-config resolves it (same rules, same errors)
//   state bytes   rank_state.h: the model built on the meta device and split by the strategies
//                 themselves over a planning mesh; FSDP's rows counted as fsdp_unit.cpp lays them
//   activations   config::micro_batch_activation_bytes (the start-up estimate's saved tensors,
//                 each rounded to the allocator's size class) for the stage's layers, times the
//                 micro-batches the schedule keeps in flight (counted off runtime::pipeline_order:
//                 1 without pipelining; chunks of 1/v of the stage under interleaving), plus the
//                 backward's transient (config::backward_transient_bytes: a layer's grads, or on
//                 the last stage the head's tensors) or under context parallelism the attention's
//                 exchange buffers. Swapped layers (swap.layer_swap) leave the device on a GPU
//                 profile; on the cpu profile host memory is the device, so nothing leaves.
//   peak          the worst moment of the step (planner.cpp peak_moment): with FSDP each unit's
//                 gather, MLP and attention backward and reduce, with what FSDP holds then
//   FLOPs         models::layer_flops_per_token / head_flops_per_token for the stage's layers,
//                 over the rank's tokens (its data shard, 1/cp of the sequence, 1/tp of the work)
//   traffic       traffic.h, bytes per mesh axis as ProcessGroup::stats counts them
//   step time     per rank: matrix time = its FLOPs (plus one more forward of every recomputed
//                 layer or selected module, config::layer_recomputes) / the profile's matrix peak
//                 in compute_dtype; memory time = the optimizer
//                 step streaming parameters, grads and state 3 times / memory bandwidth; link time
//                 per axis = bytes / the link that axis crosses (intra-node when all its ranks
//                 share a node of devices_per_node consecutive ranks, else inter-node). FSDP and
//                 data-parallel traffic overlaps the matrix work (max of the two); tp, cp, ep and
//                 pp traffic is on the critical path (added). The step is the slowest rank's time
//                 times the pipeline bubble (1 + (pp - 1) / (v·M)).
//   MFU           model FLOPs per step (no recompute) / (step time · world · matrix peak)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/resolved_config.h"
#include "loom/plan/device_profile.h"
#include "loom/plan/rank_state.h"

namespace loom::plan {

struct RolePlan {
  std::string name;             // "pp stage 0"
  int pp_stage = 0;
  std::optional<int> ep_rank;   // set when ranks of a stage differ by expert rank (they do not: E/ep each)
  std::vector<int> ranks;
  StateBytes state;
  // At the rank's worst moment (planner.cpp peak_moment): what FSDP holds gathered (the root
  // unit, units' full parameters, grads and buffers) and the activations.
  int64_t fsdp_held_bytes = 0;
  int64_t activation_peak_bytes = 0;
  std::string peak_moment;  // which moment it is, in words
  int64_t activations_in_flight = 1;  // micro-batches (chunks under interleaving) held at the peak
  int64_t peak_bytes = 0;
  double flops_per_step = 0;
  std::map<std::string, int64_t> bytes_sent_per_step;
  double compute_time_s = 0, memory_time_s = 0, overlapped_comm_s = 0, exposed_comm_s = 0;
  double step_time_s = 0;
};

struct Plan {
  int world_size = 1;
  dist::ParallelDims dims;
  int virtual_pp = 1;
  DeviceProfile device;
  int64_t device_memory_bytes = 0;
  std::vector<RolePlan> roles;
  int64_t seq_length = 0;
  int64_t tokens_per_step = 0;
  double model_flops_per_step = 0;
  double bubble = 1;  // the pipeline bubble factor
  double step_time_s = 0;
  double mfu = 0;
  bool fits = true;
  int64_t max_peak_bytes = 0;
};

struct PlanOptions {
  // false: only the first rank of each stage (it holds the most: FSDP's short rows fall to the
  // last shard ranks), no roles kept: the sweep's peak and step time.
  bool roles = true;
  // What a rank holds; default held_parameters. The sweep passes a cache (the split depends only
  // on tp, ep, the stages and the rank's pipeline stage).
  std::function<std::vector<HeldParameter>(int pp_rank, int rank)> held;
};

// The plan of `resolved` (a layout with a model) on `device`, fitting `device_memory` bytes per
// rank. ConfigError when the configuration has no model or sequence length to plan.
Plan make_plan(const config::TrainConfig& config, const config::ResolvedConfig& resolved, const DeviceProfile& device,
               int64_t device_memory, const PlanOptions& options = {});

// The sequence length a run trains on: the dataset's, else the model's.
int64_t planned_seq_length(const config::ResolvedConfig& resolved);

}  // namespace loom::plan
