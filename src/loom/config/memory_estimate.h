// The start-up memory estimate: the bytes one rank needs for its parameters, gradients,
// optimizer state and the activations of one micro-batch, from the model's own accounting
// (models::count_parameters) and the memory policy (full recompute keeps a layer's input only),
// summed over the ranks that share a host, against what the host can give. It is a lower bound
// (temporaries, FSDP's gathered unit and the runtime come on top), so a run
// it refuses cannot fit; a run it passes may still be tight.
//
// Per rank, with P = parameters / (tensor_parallel · fsdp shards), b = bytes of params_dtype:
//   parameters  P·b          gradients  P·b
//   optimizer   P·8 (AdamW: two fp32 moments; Muon: one fp32 momentum and its AdamW moments,
//               counted as AdamW) + P·4 for the fp32 master copy when params_dtype is not fp32
//   activations the tensors one micro-batch saves for the backward, in bytes of compute_dtype
//               (fp32 for norm statistics and the log-sum-exp), each rounded to the allocator's
//               size class: per layer see layer_saved in memory_estimate.cpp (a fully
//               recomputed layer keeps its input only; a selectively recomputed module drops
//               the tensors saved inside it).
// On this CPU build swapped activations stay in host memory, so swap does not lower the host sum.
//
// The host gives min(cgroup memory limit, MemAvailable); LOOM_MEMORY_LIMIT (bytes, or with a
// K/M/G/T suffix, binary units) replaces both, and LOOM_MEMORY_LIMIT=off skips the check. The
// run must fit in 90% of it (the rest is for the runtime, the data loader and the OS).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/config/parallel_layout.h"
#include "loom/config/sections.h"
#include "loom/memory/policy.h"
#include "loom/models/model_args.h"

namespace loom::config {

struct MemoryEstimate {
  // Per rank.
  std::int64_t parameter_bytes = 0;
  std::int64_t gradient_bytes = 0;
  std::int64_t optimizer_bytes = 0;
  std::int64_t activation_bytes = 0;
  int ranks_per_host = 1;

  std::int64_t per_rank_bytes() const;
  std::int64_t host_bytes() const;  // per_rank_bytes() · ranks_per_host
};

// How a layer is recomputed: wholly (full_recompute_layer: it keeps its input), or the modules
// select_module's patterns that list the layer match (canonical paths inside the layer,
// detail::layer_module_paths; outermost first), which keep their inputs (tensors the layer keeps
// anyway) and rebuild the rest in the backward.
struct LayerRecompute {
  bool full = false;
  std::vector<std::string> modules;
  // The selected module that covers `path` (it or a parent); "" when none does.
  std::string covering(const std::string& path) const;
};
std::map<std::int64_t, LayerRecompute> layer_recomputes(const models::ModelArgs& model,
                                                        const memory::RecomputeOptions& recompute,
                                                        const std::vector<std::int64_t>& layers);

// The activations one micro-batch leaves for the backward on one rank, through the decoder (and
// MTP: indices num_layers..) layers `layers`: each saved tensor as the modules save it, rounded as
// the allocator rounds it. The start-up estimate takes every layer; the planner (src/loom/plan)
// takes a pipeline stage's layers and multiplies by the micro-batches its schedule keeps in flight.
std::int64_t micro_batch_activation_bytes(const TrainConfig& config, const models::ModelArgs& model,
                                          const ParallelLayout& layout, const memory::RecomputeOptions& recompute,
                                          std::int64_t seq_length, const std::vector<std::int64_t>& layers);
// The same per layer, in the order of `layers`.
std::vector<std::int64_t> layer_activation_bytes(const TrainConfig& config, const models::ModelArgs& model,
                                                 const ParallelLayout& layout,
                                                 const memory::RecomputeOptions& recompute, std::int64_t seq_length,
                                                 const std::vector<std::int64_t>& layers);

// The most one backward holds on top of the saved activations: the largest of one of `layers`'
// (its MLP's grads and the residual grads; a recomputed layer's rebuilt forward with them) and, with
// `head` (the stage that runs it), the head's tensors (the final norm's output, the fused loss's
// grad of the hidden states) with the loss's chunk of fp32 logits. The planner adds it to the
// micro-batches in flight.
std::int64_t backward_transient_bytes(const TrainConfig& config, const models::ModelArgs& model,
                                      const ParallelLayout& layout, const memory::RecomputeOptions& recompute,
                                      std::int64_t seq_length, const std::vector<std::int64_t>& layers, bool head);

// Under context parallelism (0 without) what the attention's exchange holds during its backward:
// the ring ("colossal") keeps the K/V blocks of every peer it received in the step, its own and
// the dK/dV it passes on, (cp + 1) blocks; Ulysses the packed send and receive copies of q, k, v
// and the output; hybrid both, its ring over cp / ulysses_degree_in_cp ranks.
std::int64_t context_parallel_exchange_bytes(const TrainConfig& config, const models::ModelArgs& model,
                                             const ParallelLayout& layout, std::int64_t seq_length);

// Throws models::SizeOverflow naming the fields when a product of sizes does not fit 64 bits.
MemoryEstimate estimate_memory(const TrainConfig& config, const models::ModelArgs& model, const ParallelLayout& layout,
                               const memory::RecomputeOptions& recompute, std::int64_t seq_length, int ranks_per_host);

// The ranks of this run on this host: OMPI_COMM_WORLD_LOCAL_SIZE (Open MPI) or MPI_LOCALNRANKS
// (MPICH) under mpirun, else the world.
int ranks_per_host(int world_size);

struct HostMemory {
  std::int64_t bytes = 0;
  std::string source;  // "LOOM_MEMORY_LIMIT", "the cgroup limit (/sys/fs/cgroup/memory.max)", "MemAvailable"
};
inline constexpr double kUsableHostFraction = 0.9;
// What this host gives a run; nullopt when LOOM_MEMORY_LIMIT=off or nothing can be read.
// ConfigError when LOOM_MEMORY_LIMIT cannot be read as a size.
std::optional<HostMemory> host_memory();

// "" when `estimate` fits in kUsableHostFraction of `host`, else what does not fit: the numbers
// per category, the host sum, the limit and the fixes that apply.
std::string memory_fit_problem(const MemoryEstimate& estimate, const HostMemory& host, const TrainConfig& config,
                               const models::ModelArgs& model, const memory::RecomputeOptions& recompute);

// 1536 -> "1.5 KiB".
std::string format_bytes(std::int64_t bytes);

}  // namespace loom::config
