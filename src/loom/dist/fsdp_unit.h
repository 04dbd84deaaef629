// One FSDP unit (see fsdp.h for the scheme): its parameters' slots, one flat bucket per dtype,
// all-gather/reshard of the full parameters, and the grad reduction. Internal to the dist layer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/autograd/saved_tensor.h"
#include "loom/dist/process_group.h"
#include "loom/nn/module.h"

namespace loom::dist {

struct FsdpSlot {
  std::string name;
  nn::Parameter* param = nullptr;
  Tensor leaf;               // the model's tensor: full shape; its storage is swapped in and out
  bool trainable = true;
  int64_t rows = 1;          // dim 0 (1 for 0-d parameters)
  int64_t row_numel = 1;     // elements per row
  int64_t rows_per_rank = 1; // c = ceil(rows / n)
  int64_t row_begin = 0;     // first row this rank holds
  int64_t local_rows = 0;    // rows this rank holds (0..c)
  size_t bucket = 0;
  int64_t shard_offset = 0;  // element offset of the c-row block in the bucket's per-rank shard
  int64_t full_offset = 0;   // element offset in the bucket's full buffer
  Tensor shard;              // [local_rows, ...] view of the bucket's shard (what the optimizer steps)
  bool grad_ready = false;   // grad accumulated since the unit's last reduction
};

// The group a bucket is sharded over and the mesh axis recorded in its parameters' placements
// (the group may share the world's communicator and name when it spans every rank).
struct FsdpShardGroup {
  std::shared_ptr<ProcessGroup> group;
  std::string axis;
};

struct FsdpBucket {
  DType dtype = DType::f32;         // of the parameters and their shard
  DType gather_dtype = DType::f32;  // of the all-gather and the full buffer (fsdp.h: compute_dtype)
  FsdpShardGroup shard;      // the unit's shard group, or the expert group (efsdp)
  int64_t shard_numel = 0;   // per rank: Σ c·row_numel
  int64_t full_numel = 0;    // Σ rows·row_numel
  std::vector<size_t> slots;
  Tensor shard_flat;         // [shard_numel] parameters (persistent)
  Tensor grad_flat;          // [shard_numel] fp32 main grads (persistent)
  Tensor full;               // [full_numel] while gathered
};

struct FsdpUnitConfig {
  bool is_root = false;
  bool reshard_after_forward = true;  // never for the root
  bool divide_gradients = false;      // mean instead of sum
  // The data-parallel ranks the mean divides by: dp_replicate·dp_shard, the ranks that train on
  // other data. The shard group also spans cp (context parallelism: its ranks hold pieces of one
  // sequence and one replicated loss), and the shard and replicate groups of an expert unit
  // (efsdp) have other sizes, while its grads are a sum over the same data (expert_parallel.h).
  double data_parallel_ranks = 1;
  bool cpu_offload = false;
  std::optional<DType> compute_dtype;  // FsdpOptions::compute_dtype
  // The mesh axis the unit's shard group spans, recorded in the parameters' placements.
  std::string shard_axis = "fsdp";
};

class FsdpUnit : public std::enable_shared_from_this<FsdpUnit> {
 public:
  FsdpUnit(std::string name, FsdpUnitConfig config, std::shared_ptr<ProcessGroup> shard_group,
           std::shared_ptr<ProcessGroup> replicate_group);

  const std::string& name() const { return name_; }
  const FsdpUnitConfig& config() const { return config_; }
  std::vector<FsdpSlot>& slots() { return slots_; }
  const std::vector<FsdpSlot>& slots() const { return slots_; }
  const std::vector<FsdpBucket>& buckets() const { return buckets_; }
  ProcessGroup& shard_group() { return *shard_group_; }
  ProcessGroup* replicate_group() { return replicate_group_.get(); }

  // Layout: add every parameter, then build() allocates the shards, copying the values of
  // parameters that are materialised (and releasing their full tensors). A parameter goes to the
  // bucket of its dtype and shard group: the unit's, or `shard` (routed experts over efsdp).
  void add_param(const std::string& name, nn::Parameter* param);
  void add_param(const std::string& name, nn::Parameter* param, const FsdpShardGroup& shard);
  void build();
  void register_grad_hooks();

  // Full parameters: gather (no-op when gathered) and free.
  void unshard();
  void reshard();
  bool gathered() const { return gathered_; }
  int64_t gathered_bytes() const;
  int64_t full_param_bytes() const;

  // Forward-wrapper state: true while an outermost wrapped module of this unit runs.
  bool active = false;
  // Stores parameter views saved for backward as (bucket, offset, shape, strides), re-gathering on use.
  std::shared_ptr<autograd::SavedTensorHooks> saved_tensor_hooks();
  // Identity on `outputs` whose backward gathers the parameters again before the unit's backward.
  std::vector<Tensor> attach_pre_backward(const std::vector<Tensor>& outputs);

  // Grad side. With sync off (pipeline micro-batches before a chunk's last), a unit whose grads
  // are all in keeps them full and unreduced, so the next micro-batch adds to them and one
  // reduction per step follows the sync-on backward (or finish_backward).
  void set_requires_gradient_sync(bool on) { requires_gradient_sync_ = on; }
  void on_grad_accumulated(size_t slot);
  bool has_unreduced_grads() const;
  // Reduce-scatters the accumulated full grads into the sharded main grads and frees them.
  void reduce_grads();
  void zero_grad();
  // Bytes this unit's grad reductions sent (reduce-scatter and replicate all-reduce) since reset.
  int64_t reduce_bytes_sent() const { return reduce_bytes_sent_; }
  // Bytes this unit's parameter all-gathers sent (in each bucket's parameter dtype) since reset.
  int64_t gather_bytes_sent() const { return gather_bytes_sent_; }
  void reset_reduce_bytes() { reduce_bytes_sent_ = gather_bytes_sent_ = 0; }

 private:
  void point_leaves_at_full();
  void release_leaves();

  std::string name_;
  FsdpUnitConfig config_;
  std::shared_ptr<ProcessGroup> shard_group_, replicate_group_;
  std::vector<FsdpSlot> slots_;
  std::vector<FsdpBucket> buckets_;
  bool gathered_ = false;
  size_t trainable_count_ = 0, ready_count_ = 0;
  bool requires_gradient_sync_ = true;
  int64_t reduce_bytes_sent_ = 0, gather_bytes_sent_ = 0;
  std::shared_ptr<autograd::SavedTensorHooks> hooks_;
};

}  // namespace loom::dist
