#include "loom/runtime/model_runtime.h"

#include "loom/core/log.h"
#include "loom/dist/sharded_checkpoint.h"
#include "loom/memory/policy.h"
#include "loom/runtime/checkpoint_reader.h"
#include "loom/runtime/parallel_options.h"
#include "loom/runtime/pipeline_schedule.h"

namespace loom::runtime {

ModelRuntime::ModelRuntime(const config::TrainConfig& config, const config::ResolvedConfig& resolved,
                           Backend& backend)
    : backend_(&backend) {
  LOOM_CHECK(resolved.layout.world_size == backend.world_size(), ValueError, "ModelRuntime: the configuration was "
             "resolved for ", resolved.layout.world_size, " ranks but the backend's world has ", backend.world_size());
  mesh_ = std::make_shared<dist::DeviceMesh>(backend.world_ptr(), resolved.layout.dims);
  micro_batches_ = resolved.layout.num_accumulation_steps;
  load_balanced_ = config.checkpoint.load_balanced;
  // The memory policy needs the built model's layers: it runs inside parallelize, after the
  // model-splitting strategies, before FSDP.
  const memory::RecomputeOptions recompute = resolved.recompute;
  const memory::SwapOptions swap = resolved.swap;
  auto memory_policy = [this, recompute, swap](nn::Module& module) {
    const int64_t total_layers = model_->num_layers() + model_->num_mtp_layers();
    auto layers = model_->layers();
    const memory::MemoryPlan plan = memory::plan_memory(layers, total_layers, recompute, swap);
    memory_state_ = memory::apply_memory_plan(module, layers, plan, recompute);
  };
  build_model(resolved, parallelize_options(config, resolved, memory_policy));
  if (parallel_->pipeline())
    schedule_ = std::make_unique<PipelineSchedule>(*model_, *parallel_, micro_batches_,
                                                   pipeline_schedule_options(config.parallelism,
                                                                             *resolved.layout.pipeline));
  else
    schedule_ = std::make_unique<PlainSchedule>(*model_, *parallel_, micro_batches_);
}

ModelRuntime::ModelRuntime(const models::ModelArgs& args, Backend& backend) : backend_(&backend) {
  LOOM_CHECK(backend.world_size() == 1, ValueError, "ModelRuntime: a whole model runs on one process, but the "
             "backend's world has ", backend.world_size());
  mesh_ = dist::DeviceMesh::single();
  model_ = build_causal_lm(args);
  parallel_ = dist::parallelize(model_->module(), mesh_, {});
  schedule_ = std::make_unique<PlainSchedule>(*model_, *parallel_, 1);
}

std::unique_ptr<ModelRuntime> ModelRuntime::for_planning(const config::TrainConfig& config,
                                                         const config::ResolvedConfig& resolved,
                                                         std::shared_ptr<dist::DeviceMesh> mesh) {
  auto runtime = std::unique_ptr<ModelRuntime>(new ModelRuntime());
  runtime->mesh_ = std::move(mesh);
  runtime->micro_batches_ = resolved.layout.num_accumulation_steps;
  dist::ParallelizeOptions options = parallelize_options(config, resolved, {});
  options.place_parameters_only = true;
  runtime->build_model(resolved, std::move(options));
  return runtime;
}

ModelRuntime::~ModelRuntime() = default;

void ModelRuntime::build_model(const config::ResolvedConfig& resolved, dist::ParallelizeOptions options) {
  // Built on the meta device, so nothing is allocated before the strategies split it.
  model_ = build_causal_lm(resolved.model_args());
  parallel_ = dist::parallelize(model_->module(), mesh_, options);
}

Backend& ModelRuntime::backend() {
  LOOM_ASSERT(backend_ != nullptr, "ModelRuntime: a planning runtime has no backend");
  return *backend_;
}

Schedule& ModelRuntime::schedule() {
  LOOM_ASSERT(schedule_ != nullptr, "ModelRuntime: a planning runtime has no schedule");
  return *schedule_;
}

void ModelRuntime::initialize(uint64_t seed) { parallel_->materialize(seed); }

void ModelRuntime::load_full_state_dict(const std::map<std::string, Tensor>& state, const std::string& source) {
  parallel_->materialize(0);  // storage for the local pieces; every value is overwritten
  parallel_->load_full_state_dict(state, source);
}

LoadedWeights ModelRuntime::load_weights(const std::string& path, const std::string& field) {
  const ResolvedLoadPath where = resolve_load_path(path, field);
  if (where.is_hf) {
    load_full_state_dict(model_->load_hf(where.dir), where.dir);
    return {where.dir, true};
  }
  // Whatever layout saved it (one process included): each rank reads the pieces it holds now.
  const LoadedCheckpoint ck = read_checkpoint_state(where.dir, /*load_optimizer=*/false, field);
  parallel_->materialize(0);
  auto entries = dist::checkpoint_entries(module(), module().state_dict(), {});
  dist::load_resharded(ck.dir, entries, /*load_optimizer=*/false, &mesh_->group("dp_replicate"), load_balanced_);
  return {ck.dir, false};
}

}  // namespace loom::runtime
