// parallelize(): the one place that applies the parallel strategies to a built model, in the
// order of MindFormers' _apply_parallelism (TorchTitan's):
//
//   TP/SP → CP → EP → PP stage split → memory policy (recompute/swap) → FSDP/HSDP
//
// (tensor_parallel.h, context_parallel.h, expert_parallel.h, pipeline.h and fsdp.h explain theirs.)
//
// Each strategy is one file of dist/ that rewrites the model from outside (it replaces a
// parameter by its slice and records the split in Parameter::placement, or wraps module
// forwards and named operations); the model files know nothing of it. A strategy is applied when
// its mesh axis has more than one rank, so one process — a mesh of size one — goes through this
// same function and gets the plain model back. The memory policy
// comes in as a function because memory/ sits below dist/ in the layering.
//
// The ParallelModel it returns is everything the training step needs from the layout, asked the
// same way for every layout: zero the grads, finish backward (FSDP reduces what is left), the
// scale the loss needs before backward, the grad norm's replica factors and the initialisation
// of a model built on the meta device.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/allocator.h"
#include "loom/dist/context_parallel.h"
#include "loom/dist/device_mesh.h"
#include "loom/dist/expert_parallel.h"
#include "loom/dist/fsdp.h"
#include "loom/dist/pipeline.h"
#include "loom/nn/module.h"

namespace loom::dist {

struct ParallelizeOptions {
  FsdpOptions fsdp;
  ContextParallelOptions context;
  ExpertParallelOptions expert;
  // The layers of every virtual stage; used when the mesh's pp axis has more than one rank.
  PipelineLayout pipeline;
  // Installs recompute/swap on the model (memory::apply_memory_plan): after the model-splitting
  // strategies, before FSDP, so FSDP's gathers wrap the recomputed forwards.
  std::function<void(nn::Module&)> memory_policy;
  // Apply only the strategies that decide which parameters a rank holds and their shapes (TP,
  // EP, PP): what `loom plan` reads off a model built on meta over a planning mesh, without the
  // collectives and buffers of the others.
  bool place_parameters_only = false;
};

class ParallelModel {
 public:
  nn::Module& module() { return *module_; }
  DeviceMesh& mesh() { return *mesh_; }
  const std::shared_ptr<DeviceMesh>& mesh_ptr() const { return mesh_; }
  // The FSDP wrapper when data-parallel grads are reduced (memory and traffic statistics), else null.
  FullyShardedModel* fsdp() { return fsdp_.get(); }
  // This rank's pipeline stage when pp > 1 (its chunks, the peers), else null.
  PipelineStage* pipeline() { return pipeline_.get(); }

  // Initialises every parameter's local tensor when the model was built on the meta device
  // (nn::initialize_parameter: the one-process weights, whatever the layout), and meta buffers.
  // A model that was materialised before parallelize() keeps its values.
  void materialize(uint64_t seed);
  // Copies whole tensors (HF weights, a one-process state dict) into the local pieces.
  void load_full_state_dict(const std::map<std::string, Tensor>& state, const std::string& source);

  // Start of a step: no grads anywhere. End of its last backward: every grad reduced, every
  // gathered parameter freed, the pipeline's shared embedding summed over its two stages; the
  // grads the optimizer sees are final.
  void zero_grad();
  void finish_backward();
  // After forwards that no backward follows (evaluation): frees the parameters FSDP gathered
  // for them, so the model is left as a training step leaves it.
  void release_gathered();
  // FSDP's gradient sync for the next backwards (FullyShardedModel::set_requires_gradient_sync;
  // nothing to do without FSDP). finish_backward() reduces whatever is still unreduced.
  void set_requires_gradient_sync(bool on);
  // The factor the loss needs before backward so that reduced grads are the mean over the
  // data-parallel ranks: 1/(world/(pp·tp·cp)) while grads are summed (parallelism.
  // disable_gradient_division, the default), else 1 (MindFormers' get_loss_sense, with the loss
  // that tensor and context parallelism replicate counted once: tensor_parallel.h,
  // context_parallel.h). 1 on one process.
  double backward_scale() const { return backward_scale_; }
  // Ranks holding the same local grad of `param` (1 for a name it does not know: buffers); the
  // pipeline's shared embedding counts its two stages.
  double replica_factor(const std::string& param) const;
  // Where the optimizer's state belongs when not in device memory: the host pool with FSDP's
  // cpu_offload (beside the sharded parameters and grads), else null.
  CachingAllocator* optimizer_state_pool() const;

 private:
  friend std::unique_ptr<ParallelModel> parallelize(nn::Module&, std::shared_ptr<DeviceMesh>, const ParallelizeOptions&);
  ParallelModel() = default;

  nn::Module* module_ = nullptr;
  std::shared_ptr<DeviceMesh> mesh_;
  bool built_on_meta_ = false;
  double backward_scale_ = 1.0;
  std::map<std::string, nn::Parameter*> params_;
  std::shared_ptr<FullyShardedModel> fsdp_;
  std::shared_ptr<PipelineStage> pipeline_;
};

std::unique_ptr<ParallelModel> parallelize(nn::Module& model, std::shared_ptr<DeviceMesh> mesh,
                                           const ParallelizeOptions& options);

}  // namespace loom::dist
