// FSDP / HSDP applied to a built model from outside, as TorchTitan applies FSDP2's fully_shard
// (spec parallel_training.md §1). Nothing in the model knows about it.
//
// Units and buckets. Every module at a unit path (by default decoder.layers.{i} and
// mtp.layers.{k}) is one unit; every other parameter belongs to the root unit (embedding,
// final norm, output head). A unit keeps one flat bucket per parameter dtype. Each parameter's
// local tensor (the whole parameter, or the slice an inner strategy such as TP left: FSDP shards
// whatever it finds) is sharded along dim 0 over the shard group (mesh axis "fsdp" =
// dp_shard·cp): rank k of the group holds rows [k·c, (k+1)·c) with c = ceil(rows / n), so a shard
// is a real [local_rows, ...] tensor (the optimizer's 1-D/bias rules and checkpoint chunks see
// true shapes). The shard becomes the parameter's local_shard and the rows are appended to its
// placement, which is all the optimizer, checkpoints, grad norm and initialisation read. A
// bucket's shard is the concatenation of its parameters' c-row blocks: every rank holds exactly
// 1/n of the bucket (padded to the group size). Routed experts split by expert parallelism go
// to buckets of their own, sharded the same way over "efsdp" (expert_parallel.h).
//
// Forward: before a unit's first module runs, its buckets are all-gathered into full flat
// buffers and the model's parameter tensors (the same leaf tensors every step) are pointed at
// them. After the unit's forward they are resharded (freed) when reshard_after_forward holds;
// tensors the forward saved for backward that are parameter views are then stored as
// (offset, shape) by saved-tensor hooks, and an identity node on the unit's outputs all-gathers
// again before the unit's backward starts. The root unit stays gathered until backward ends.
//
// Backward: parameter grads accumulate (fp32) in the full-shape leaves; when every trainable
// parameter of a unit has its grad (and gradient sync is on: set_requires_gradient_sync), the
// unit's grads are packed rank-major and reduce-scattered
// over the shard group (summed in rank order, so n ranks give the bits of one process summing n
// micro-batches), all-reduced over the replicate group (HSDP), and added to the sharded fp32
// main grads; the full grads and the gathered parameters are freed at once, while the rest of
// backward continues. finish_backward() reduces what is left (the root unit, unused units).
//
// Gradient scale: with disable_gradient_division (the default) grads are summed; the trainer scales
// the loss by 1/(world/(pp·tp·cp)) before backward (MindFormers' get_loss_sense), so a step equals
// the one process mean. Without it, reduced grads are divided by the data-parallel size here
// instead (the cp ranks of the shard group hold one loss between them: context_parallel.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/dist/device_mesh.h"
#include "loom/nn/module.h"

namespace loom::dist {

struct FsdpOptions {
  // "always", "never" or "default" (= always without pipeline parallelism, never with it).
  std::string reshard_after_forward_policy = "default";
  bool pipeline_parallel = false;
  // true: grads are summed over the data-parallel ranks (the loss carries 1/(world/pp)).
  bool disable_gradient_division = true;
  // Sharded parameters and grads live in the host pool (loom::host_pool()), not device memory.
  bool cpu_offload = false;
  // Mixed precision (compute_dtype bf16 or f16 on fp32 parameters): parameters the model only
  // uses cast to it (Parameter::multiplied_in_compute_dtype) are cast on the shard and
  // all-gathered in it, half the bytes of fp32 and the same values the model's own cast gives;
  // the rest (norm weights, embeddings, the router) gather in fp32. Grads reduce in fp32 always.
  std::optional<DType> compute_dtype;
  // Module paths that form their own unit, matched exactly or as "<prefix>.*" (every child of
  // prefix). Empty: "decoder.layers.*" and "mtp.layers.*".
  std::vector<std::string> unit_paths;
};

// Whether units free their gathered parameters after forward under `options`
// (reshard_after_forward_policy; 'default' is always without pipeline parallelism, never with it).
// ConfigError naming the field for another value.
bool reshard_after_forward(const FsdpOptions& options);

struct FsdpMemory {
  int64_t sharded_param_bytes = 0;  // persistent (device pool, or host pool with cpu_offload)
  int64_t sharded_grad_bytes = 0;   // persistent fp32 main-grad shards
  int64_t gathered_param_bytes = 0; // full parameters gathered right now
  int64_t largest_unit_param_bytes = 0;  // full parameters of the largest unit
};

class FsdpUnit;

class FullyShardedModel {
 public:
  ~FullyShardedModel();
  FullyShardedModel(const FullyShardedModel&) = delete;
  FullyShardedModel& operator=(const FullyShardedModel&) = delete;

  // Initialises the shards of a model that was built on the meta device (initialize_parameter:
  // Philox by global index, so every layout gets the one-process weights), then meta buffers.
  void materialize(uint64_t seed);
  // Copies whole tensors (e.g. a one-process or Hugging Face state dict) into the shards
  // (Module::load_state_dict: CheckpointError listing every missing or mis-shaped name).
  void load_full_state_dict(const std::map<std::string, Tensor>& state);

  // Drops the sharded grads (the next backward starts a new accumulation).
  void zero_grad();
  // Whether the next backward reduces the grads of each unit it completes (the default). The
  // pipeline schedule turns it off for every backward but a chunk's last micro-batch: the
  // unreduced full grads then accumulate over the micro-batches and each unit is reduced once
  // per step (TorchTitan's set_requires_gradient_sync, Megatron's no_sync), m× less reduce traffic.
  void set_requires_gradient_sync(bool on);
  // Reduces every unit whose grads were not reduced during backward, then frees every gathered
  // parameter. Call once after the last backward of a step (before clipping and the update).
  void finish_backward();
  // Frees every gathered parameter now (e.g. after an evaluation forward with "never").
  void reshard_all();

  bool reshard_after_forward() const { return reshard_after_forward_; }
  const FsdpOptions& options() const { return options_; }
  DeviceMesh& mesh() { return *mesh_; }
  std::vector<std::string> unit_names() const;
  FsdpMemory memory() const;
  // Bytes this process sent through the shard and replicate groups since the last reset.
  CommStats comm_stats() const;
  // The part of comm_stats().bytes_sent that grad reductions sent, since the last reset.
  int64_t grad_reduce_bytes() const;
  // The part that parameter all-gathers sent (each bucket in its parameters' dtype: float32
  // parameters are gathered in float32 even under bf16 compute, see docs/distributed.md).
  int64_t param_gather_bytes() const;
  void reset_comm_stats();

 private:
  friend std::shared_ptr<FullyShardedModel> apply_fsdp(nn::Module&, std::shared_ptr<DeviceMesh>, const FsdpOptions&);
  FullyShardedModel() = default;

  nn::Module* model_ = nullptr;
  std::shared_ptr<DeviceMesh> mesh_;
  FsdpOptions options_;
  bool reshard_after_forward_ = true;
  std::vector<std::shared_ptr<FsdpUnit>> units_;  // root last
};

// The mixed-precision rule of FsdpOptions::compute_dtype, in one place for FSDP, the trainer and
// the planner: a model computing in bf16 or f16 gathers in it (nullopt for fp32/f64 compute), and
// a parameter gathers in it when it is fp32 and the model only uses it cast there.
std::optional<DType> mixed_precision_compute_dtype(DType model_compute_dtype);
DType fsdp_gather_dtype(const nn::Parameter& param, std::optional<DType> compute_dtype);

// Shards `model`'s parameters over mesh's "fsdp" group (replicated over "dp_replicate") and
// installs the forward wrappers and grad hooks. Apply it last, after tensor/context/expert/
// pipeline parallelism and the memory policy (recompute/swap). The model may be on the meta
// device (then call materialize) or materialised (its values are kept, as shards).
std::shared_ptr<FullyShardedModel> apply_fsdp(nn::Module& model, std::shared_ptr<DeviceMesh> mesh,
                                              const FsdpOptions& options = {});

}  // namespace loom::dist
