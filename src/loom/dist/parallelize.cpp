#include "loom/dist/parallelize.h"

#include "loom/autograd/grad_mode.h"
#include "loom/dist/expert_parallel.h"
#include "loom/dist/tensor_parallel.h"

namespace loom::dist {

std::unique_ptr<ParallelModel> parallelize(nn::Module& model, std::shared_ptr<DeviceMesh> mesh,
                                           const ParallelizeOptions& options) {
  LOOM_CHECK(mesh != nullptr, ValueError, "parallelize: the device mesh is null");
  const ParallelDims& dims = mesh->dims();
  auto parallel = std::unique_ptr<ParallelModel>(new ParallelModel());
  parallel->module_ = &model;
  parallel->mesh_ = mesh;
  parallel->built_on_meta_ = !model.is_materialized();

  if (dims.tp() > 1) apply_tensor_parallel(model, *mesh);
  if (dims.cp() > 1 && !options.place_parameters_only) apply_context_parallel(model, *mesh, options.context);
  const bool expert_parallel = dims.ep() > 1 && apply_expert_parallel(model, *mesh, options.expert) > 0;
  if (dims.pp() > 1) parallel->pipeline_ = apply_pipeline(model, *mesh, options.pipeline);
  if (options.place_parameters_only) {
    for (auto& [name, p] : model.named_parameters()) parallel->params_[name] = p;
    return parallel;
  }

  if (options.memory_policy) options.memory_policy(model);

  // Data parallelism: grads are reduced over the ranks that train on other data (FSDP/HSDP; with
  // data_parallel_shard 1 the shard group has one rank and FSDP is plain data parallelism). Under
  // EP, routed experts are reduced over efsdp (expert_parallel.h), which may have ranks when the
  // dense fsdp group has none (tp > ep).
  const bool data_parallel = mesh->size("dp_replicate") * mesh->size("fsdp") > 1 ||
                             (expert_parallel && mesh->size("dp_replicate") * mesh->size("efsdp") > 1);
  if (data_parallel) parallel->fsdp_ = apply_fsdp(model, mesh, options.fsdp);
  // Summed grads (disable_gradient_division) need the loss pre-scaled by one over the ranks that
  // train on other data, world/(pp·tp·cp): the tp and cp ranks of a data shard hold one
  // replicated loss, counted once (tensor_parallel.h, context_parallel.h). One process: 1.
  if (options.fsdp.disable_gradient_division)
    parallel->backward_scale_ =
        1.0 / static_cast<double>(mesh->world_size() / (dims.pp() * dims.tp() * dims.cp()));

  for (auto& [name, p] : model.named_parameters()) parallel->params_[name] = p;
  return parallel;
}

void ParallelModel::materialize(uint64_t seed) {
  if (!built_on_meta_) return;
  autograd::NoGradGuard no_grad;
  for (auto& [name, p] : params_) {
    nn::allocate_local(*p);
    nn::initialize_parameter(*p, name, seed);
  }
  for (auto& [name, b] : module_->named_buffers("", /*persistent_only=*/false))
    if (b->is_meta()) *b = Tensor::zeros(b->shape(), b->dtype());
  built_on_meta_ = false;
}

void ParallelModel::load_full_state_dict(const std::map<std::string, Tensor>& state, const std::string& source) {
  module_->load_state_dict(state, /*strict=*/true, source);
  if (fsdp_) fsdp_->reshard_all();  // gathered copies are stale now
}

void ParallelModel::zero_grad() {
  module_->zero_grad();
  if (fsdp_) fsdp_->zero_grad();
}

void ParallelModel::set_requires_gradient_sync(bool on) {
  if (fsdp_) fsdp_->set_requires_gradient_sync(on);
}

void ParallelModel::release_gathered() {
  if (fsdp_) fsdp_->reshard_all();
}

void ParallelModel::finish_backward() {
  if (fsdp_) fsdp_->finish_backward();
  if (pipeline_) pipeline_->reduce_shared_grads();
}

double ParallelModel::replica_factor(const std::string& param) const {
  auto it = params_.find(param);
  if (it == params_.end()) return 1.0;
  const int stages = pipeline_ ? pipeline_->shared_copies(param) : 1;
  return static_cast<double>(mesh_->replica_factor(it->second->placement) * stages);
}

CachingAllocator* ParallelModel::optimizer_state_pool() const {
  return fsdp_ && fsdp_->options().cpu_offload ? &host_pool() : nullptr;
}

}  // namespace loom::dist
